"""
The one registry of ELMo's fast kernels, and the one function that chooses which implementation runs.

Each computation that has kernels keeps its reference code in `modeling_elmo.py` and asks here on every call, inside
its own module's `forward` (where accelerate's `device_map` hooks have loaded the weights and moved the inputs):

    implementation = ALL_RECURRENCES.get_interface(choose_implementation(config, modules, *inputs), reference)

as transformers' models ask `ALL_ATTENTION_FUNCTIONS` with `config._attn_implementation`. [`choose_implementation`]
names one of:

- "reference": the model's own code, when `config.recurrence_implementation == "reference"`, while `torch.compile`
  traces or `torch.export` exports (which trace plain operations);
- "inference": nothing in the modules or their inputs needs gradients;
- "training": otherwise.

A registry maps these names to kernels; a name it lacks runs the reference. The kernels live in the `kernels_*.py`
modules beside this one (flat files, so that a saved folder carries them for `trust_remote_code`):

- `kernels_char_cnn`: each distinct word found once, the character convolutions as matrix products;
- `kernels_lstm_inference`: the recurrence in place without autograd, on the valid positions alone;
- `kernels_lstm_training`: the recurrence under a hand-written backward, a layer's directions at once;
- `kernels_cpu_products`: the recurrences' matrix products on the CPU, where the library of each product is chosen
  (by shape, dtype, autocast and `config.cpu_matmul`); nothing outside the kernels asks it.

Under autocast the kernels take their products in autocast's dtype, as the reference code's would be; autocast
changes no choice. A new kernel (a compiled or a CUDA one) is one more entry of a registry here.
"""

from collections.abc import Callable, Sequence

import torch
from torch import nn

from .kernels_char_cnn import distinct_rows, max_pooled_by_matmul
from .kernels_lstm_inference import lstm_layer_in_place
from .kernels_lstm_training import lstm_layers_with_handwritten_backward


class Implementations(dict):
    """Kernels of one computation by the name [`choose_implementation`] gives."""

    def get_interface(self, name: str, reference: Callable) -> Callable:
        """The kernel registered as `name`, or `reference` (the model's own code) where there is none."""
        return self.get(name, reference)


def choose_implementation(config, modules: Sequence[nn.Module], *inputs: torch.Tensor) -> str:
    """
    "reference", "inference" or "training" (see the module's doc) for a call of `modules` (sharing `config`) on
    `inputs`. The one place that chooses: every module with kernels asks it, and nothing else decides.
    """
    if (
        config.recurrence_implementation == "reference"
        or torch.compiler.is_compiling()
        or torch.compiler.is_exporting()
    ):
        return "reference"
    parameters = (parameter for module in modules for parameter in module.parameters())
    needs_grad = torch.is_grad_enabled() and any(t.requires_grad for t in (*inputs, *parameters))
    return "training" if needs_grad else "inference"


def lstm_layers_in_place(layers, inputs, mask, hidden, memory):
    """[`kernels_lstm_inference.lstm_layer_in_place`] of each direction, in turn."""
    return [lstm_layer_in_place(layer, x, mask, h, c) for layer, x, h, c in zip(layers, inputs, hidden, memory)]


# Each recurrence runs the directions `layers` (`ElmoLstmLayer`s of one config) of one biLM layer:
# `(layers, inputs, mask, hidden, memory) -> [(outputs, hidden, memory)]`, one per layer, each on its own `inputs`,
# `hidden` and `memory` as `ElmoLstmLayer.forward` takes them (one direction is a list of one).
ALL_RECURRENCES = Implementations(inference=lstm_layers_in_place, training=lstm_layers_with_handwritten_backward)
# `(module, chars) -> (words, n_filters)`, as `ElmoCharConvolution.forward`.
ALL_CHARACTER_CONVOLUTIONS = Implementations(inference=max_pooled_by_matmul)
# `rows -> (distinct rows, inverse)`, as `torch.unique(rows, dim=0, return_inverse=True)`.
ALL_DISTINCT_ROWS = Implementations(inference=distinct_rows, training=distinct_rows)
