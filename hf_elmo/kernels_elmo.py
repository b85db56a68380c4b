"""
The one registry of ELMo's kernels, and the one function that chooses which path a call takes.

Each computation that has kernels keeps its reference code in `modeling_elmo.py` and asks here on every call, inside
its own module's `forward` (where accelerate's `device_map` hooks have loaded the weights and moved the inputs):

    recurrence = ALL_RECURRENCES.get_interface(choose_path(config, modules, *inputs), reference)

as transformers' models ask `ALL_ATTENTION_FUNCTIONS` with `config._attn_implementation`. [`choose_path`] names one
of these paths:

- "reference": the model's own code, when the config asks for it (`config.recurrence_implementation == "reference"`);
- "exported": while `torch.export` exports (and ONNX with it): the graph cannot depend on values (a count of
  distinct words, the number of steps, a check that raises) and must hold any number of steps;
- "compiled": while `torch.compile` traces: values as for "exported", but its graphs are specialised to their
  shapes, so the steps may stay a Python loop (inductor cannot lower the scan of "exported");
- "inference": nothing in the modules or their inputs needs gradients;
- "training": otherwise.

A registry maps paths to kernels; a path it lacks runs the reference. The kernels live in the `kernels_*.py` modules
beside this one (flat files, so that a saved folder carries them for `trust_remote_code`):

- `kernels_char_cnn`: each distinct word found once, the character convolutions as matrix products;
- `kernels_lstm_inference`: the recurrence in place without autograd, on the valid positions alone;
- `kernels_lstm_training`: the recurrence under a hand-written backward, a layer's directions at once;
- `kernels_cpu_products`: the recurrences' matrix products on the CPU, where the library of each product is chosen
  (by shape, dtype, autocast and `config.cpu_matmul`); nothing outside the kernels asks it.

The entries of "exported" and "compiled" are the reference code itself in the forms a graph keeps (every position
encoded, no check of values, and for "exported" the steps as one scan); `modeling_elmo` registers them beside that
code, which they share.

Under autocast the kernels take their products in autocast's dtype, as the reference code's would be; autocast
changes no choice. A new kernel (a compiled or a CUDA one) is one more entry of a registry here.
"""

from collections.abc import Callable, Sequence

import torch
from torch import nn

from .kernels_char_cnn import distinct_rows_by_packed_keys, max_pooled_by_matmul
from .kernels_lstm_inference import lstm_layer_in_place
from .kernels_lstm_training import lstm_layers_with_handwritten_backward


class Kernels(dict):
    """The kernels of one computation, by the path [`choose_path`] names."""

    def get_interface(self, path: str, reference: Callable) -> Callable:
        """The kernel registered for `path`, or `reference` (the model's own code) where there is none."""
        return self.get(path, reference)


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


# Each recurrence runs the directions `layers` (`ElmoLstmLayer`s of one config) of one biLM layer:
# `(layers, inputs, mask, hidden, memory) -> [(outputs, hidden, memory)]`, one per layer, each on its own `inputs`,
# `hidden` and `memory` as `ElmoLstmLayer.forward` takes them (one direction is a list of one).
ALL_RECURRENCES = Kernels(inference=lstm_layers_in_place, training=lstm_layers_with_handwritten_backward)
# `(module, chars) -> (words, n_filters)`, as `ElmoCharConvolution.forward`.
ALL_CHARACTER_CONVOLUTIONS = Kernels(inference=max_pooled_by_matmul)
# `rows -> (distinct rows, inverse)`, as `torch.unique(rows, dim=0, return_inverse=True)`.
ALL_DISTINCT_ROWS = Kernels(inference=distinct_rows_by_packed_keys, training=distinct_rows_by_packed_keys)
# `(module, features, mask) -> features`, as `ElmoTaskBiLstm.forward`.
ALL_TASK_BILSTMS = Kernels()
# `mask -> None`, raising where `mask` `(batch, positions)` does not put each row's valid positions first.
ALL_RIGHT_PADDING_CHECKS = Kernels()
