"""
The one registry of ELMo's kernels, and the one function that chooses which path a call takes.

Each computation that has kernels keeps its reference code in `modeling_elmo.py` and asks here on every call, inside
its own module's `forward` (where accelerate's `device_map` hooks have loaded the weights and moved the inputs):

    path = choose_path(config, modules, *inputs)
    recurrence = ALL_RECURRENCES.get_interface(path, inputs[0].device, reference, graph_form)

as transformers' models ask `ALL_ATTENTION_FUNCTIONS` with `config._attn_implementation`. [`choose_path`] names one
of these paths:

- "reference": the model's own code, when the config asks for it (`config.recurrence_implementation == "reference"`);
- "exported": while `torch.export` exports (and ONNX with it): the graph cannot depend on values (a count of
  distinct words, the number of steps, a check that raises) and must hold any number of steps;
- "compiled": while `torch.compile` traces: values as for "exported", but its graphs are specialised to their
  shapes, so the steps may stay a Python loop (inductor cannot lower the scan of "exported");
- "inference": nothing in the modules or their inputs needs gradients;
- "training": otherwise.

Every entry of every registry is declared here, in one table per computation ([`Kernels`]), keyed by a path or by
`(path, device_type)`: a kernel for one device (CUDA, or any other) is one `register(("inference", "cuda"), kernel)`,
and a path without an entry for the device falls back to the path's own entry. An unknown path is a `KeyError`
naming the paths, as transformers' `AttentionInterface` refuses an unknown implementation. Where a path runs the
model's own code, its entry says so ([`REFERENCE`], [`GRAPH_FORM`]) and the module hands that code over at the call
(as BERT hands `eager_attention_forward` to `ALL_ATTENTION_FUNCTIONS.get_interface`): a kernel never imports the
model, and the model writes nothing into a registry. The kernels live in the `kernels_*.py` modules beside this one
(flat files, so that a saved folder carries them for `trust_remote_code`):

- `kernels_char_cnn`: each distinct word found once, the character convolutions as matrix products, and every row
  as its own for a traced graph;
- `kernels_lstm_inference`: the recurrence in place without autograd, on the valid positions alone;
- `kernels_lstm_training`: the recurrence under a hand-written backward, a layer's directions at once;
- `kernels_cpu_products`: the recurrences' matrix products on the CPU, where the library of each product is chosen
  (by shape, dtype, autocast and `config.cpu_matmul`): an internal of the CPU kernels, not a path, and nothing
  outside them asks it.

The entries of "exported" and "compiled" are the reference code itself in the forms a graph keeps (every position
encoded, no check of values, and for "exported" the steps as one scan): the two that are the model's code in
another form (the scans, [`GRAPH_FORM`]) the model hands over beside its reference; the two that share nothing with
it (`every_row_as_distinct`, [`trust_values`]) are kernels here.

Under autocast the kernels take their products in autocast's dtype, as the reference code's would be; autocast
changes no choice.
"""

from collections.abc import Callable, Sequence

import torch
from torch import nn

from .kernels_char_cnn import distinct_rows_by_packed_keys, every_row_as_distinct, max_pooled_by_matmul
from .kernels_lstm_inference import lstm_layer_in_place
from .kernels_lstm_training import lstm_layers_with_handwritten_backward

# The paths `choose_path` names, in the order it tries them.
PATHS = ("reference", "exported", "compiled", "inference", "training")
# Entries that name the model's own code, which the calling module hands over (`Kernels.get_interface`): its
# reference, and the reference in the form a traced graph keeps (the steps as one scan).
REFERENCE = "the reference"
GRAPH_FORM = "the graph form of the reference"


class Kernels(dict):
    """
    The kernels of one computation: an entry for every path (`PATHS`), a kernel or the name of the model's own code
    (`REFERENCE`, `GRAPH_FORM`), and beside them any number of `(path, device_type)` entries, which take precedence
    on that device. The "reference" path always runs the reference: it is what `recurrence_implementation` asks for.
    """

    def __init__(self, computation: str, **entries: Callable | str):
        missing = [path for path in PATHS[1:] if path not in entries]
        if missing or set(entries) - set(PATHS[1:]):
            expected = ", ".join(PATHS[1:])
            raise ValueError(f"{computation} needs one entry for each of {expected}; got {sorted(entries)}")
        super().__init__(reference=REFERENCE, **entries)
        self.computation = computation

    def _path_of(self, key: str | tuple[str, str]) -> str:
        """The path of `key` (a path, or `(path, device_type)`); a `KeyError` naming the paths where it is none."""
        path = key if isinstance(key, str) else key[0]
        if path not in PATHS or not (isinstance(key, str) or (len(key) == 2 and isinstance(key[1], str))):
            raise KeyError(
                f"{key!r} is not a key of {self.computation}: a path ({', '.join(PATHS)}) or (path, device_type)"
            )
        return path

    def register(self, key: str | tuple[str, str], kernel: Callable | str):
        """
        Makes `kernel` the entry of `key`: a path (every device) or `(path, device_type)` (that device alone, e.g.
        `("inference", "cuda")`). The "reference" path is the reference on every device.
        """
        if self._path_of(key) == "reference":
            raise KeyError(f"the reference path of {self.computation} runs the model's own code; register another")
        self[key] = kernel

    def get_interface(
        self, path: str, device: torch.device, reference: Callable, graph_form: Callable | None = None
    ) -> Callable:
        """
        The kernel for `path` on `device` (its `(path, device.type)` entry, else the path's), where the entry is a
        kernel; the model's own code where it names it: `reference`, or `graph_form` (the reference as a traced
        graph keeps it), which the calling module hands over. An unknown path is a `KeyError` naming the paths.
        """
        entry = self.get((self._path_of(path), torch.device(device).type), self[path])
        if entry == REFERENCE:
            return reference
        if entry == GRAPH_FORM:
            if graph_form is None:
                raise TypeError(f"the {path} path of {self.computation} runs the reference's graph form: pass it")
            return graph_form
        return entry


def choose_path(config, modules: Sequence[nn.Module], *inputs: torch.Tensor) -> str:
    """
    The path (see the module's doc) of a call of `modules` (sharing `config`) on `inputs`. The one place that
    chooses: every module with kernels asks it, and nothing else decides.
    """
    if config.recurrence_implementation == "reference":
        return "reference"
    if torch.compiler.is_exporting():  # first: exporting compiles too
        return "exported"
    if torch.compiler.is_compiling():
        return "compiled"
    parameters = (parameter for module in modules for parameter in module.parameters())
    needs_grad = torch.is_grad_enabled() and any(t.requires_grad for t in (*inputs, *parameters))
    return "training" if needs_grad else "inference"


def lstm_layers_in_place(layers, inputs, mask, hidden, memory):
    """[`kernels_lstm_inference.lstm_layer_in_place`] of each direction, in turn."""
    return [lstm_layer_in_place(layer, x, mask, h, c) for layer, x, h, c in zip(layers, inputs, hidden, memory)]


def trust_values(*values) -> None:
    """Checks nothing: a traced graph cannot raise on values, so its caller's mask is taken as right-padded and its
    ids as within their tables."""


# Each recurrence runs the directions `layers` (`ElmoLstmLayer`s of one config) of one biLM layer:
# `(layers, inputs, mask, hidden, memory) -> [(outputs, hidden, memory)]`, one per layer, each on its own `inputs`,
# `hidden` and `memory` as `ElmoLstmLayer.forward` takes them (one direction is a list of one). A compiled graph keeps
# the loop (it is specialised to its number of steps), since inductor's lowering of the scan to a while loop fails on
# this one (a data-dependent scalar, torch 2.13).
ALL_RECURRENCES = Kernels(
    "ALL_RECURRENCES",
    exported=GRAPH_FORM,
    compiled=REFERENCE,
    inference=lstm_layers_in_place,
    training=lstm_layers_with_handwritten_backward,
)
# `(module, chars) -> (words, n_filters)`, as `ElmoCharConvolution.forward`.
ALL_CHARACTER_CONVOLUTIONS = Kernels(
    "ALL_CHARACTER_CONVOLUTIONS",
    exported=REFERENCE,
    compiled=REFERENCE,
    inference=max_pooled_by_matmul,
    training=REFERENCE,
)
# `rows -> (distinct rows, inverse)`, as `torch.unique(rows, dim=0, return_inverse=True)`.
ALL_DISTINCT_ROWS = Kernels(
    "ALL_DISTINCT_ROWS",
    exported=every_row_as_distinct,
    compiled=every_row_as_distinct,
    inference=distinct_rows_by_packed_keys,
    training=distinct_rows_by_packed_keys,
)
# `(module, features, mask) -> features`, as `ElmoTaskBiLstm.forward`. A compiled graph runs the packed rows (each
# specialisation its own lengths).
ALL_TASK_BILSTMS = Kernels(
    "ALL_TASK_BILSTMS", exported=GRAPH_FORM, compiled=REFERENCE, inference=REFERENCE, training=REFERENCE
)
# `(*values) -> None`, the checks of input values that a traced graph cannot make, each raising a one-line
# `ValueError`: a mask `(batch, positions)` that does not put each row's valid positions first, ids outside the
# table they look up. The caller hands over the check it makes, as its reference.
ALL_VALUE_CHECKS = Kernels(
    "ALL_VALUE_CHECKS",
    exported=trust_values,
    compiled=trust_values,
    inference=REFERENCE,
    training=REFERENCE,
)
