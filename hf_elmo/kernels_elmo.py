"""
The fast kernels of ELMo beside its reference code in `modeling_elmo.py`, and the one place that picks between them.

Each module that has a kernel ([`ElmoLstmLayer`], [`ElmoCharConvolution`]) asks [`dispatch`] for the function to run
on every call and runs it on itself, inside its own `forward`: what hooks do around a module call (accelerate's
`device_map` and offloading load the weights and move the inputs) is done before any kernel reads the weights.

- inference (nothing needs gradients): the recurrence in place without autograd
  (`kernels_lstm_inference.lstm_layer_in_place`), its matrix products on CPU from the library this machine measured
  fastest (`kernels_cpu_products.step_products`), and the character convolutions as matrix products
  ([`max_pooled_by_matmul`], here);
- training the biLM: the reference recurrence's results from `kernels_lstm_training.ElmoLstmLayerFunction`, whose
  backward through time is written by hand, a layer's two directions in one call that runs them at once
  ([`trains_directions_together`]);
- mixed precision (autocast): the same kernels, their matrix products in autocast's dtype and the recurrences' state
  and gate arithmetic in float32, as autocast leaves the reference code's;
- `config.recurrence_implementation == "reference"`, `torch.compile` and `torch.export`: the reference code only.
"""

from collections.abc import Callable, Sequence

import torch
from torch import nn

# Words whose character windows the fast convolution multiplies at a time, so that each product stays in cache.
WORDS_PER_CHUNK = 64


def dispatch(module: nn.Module, implementations: dict[str, Callable], *inputs: torch.Tensor) -> Callable:
    """
    The function `module` runs on `inputs`, from `implementations` keyed "reference", "inference" and "training":
    "reference" when `module.config.recurrence_implementation` asks for it, while compiling or exporting (which trace
    the plain operations of the reference code); else "inference" when nothing in `module` or `inputs` needs
    gradients, "training" otherwise. Under autocast the kernels take their products in autocast's dtype, as the
    reference code's would be ([`kernels_cpu_products.autocast_dtype`]).
    """
    reference = (
        module.config.recurrence_implementation == "reference"
        or torch.compiler.is_compiling()
        or torch.compiler.is_exporting()
    )
    if reference:
        return implementations["reference"]
    needs_grad = torch.is_grad_enabled() and any(t.requires_grad for t in (*inputs, *module.parameters()))
    return implementations["training" if needs_grad else "inference"]


def trains_directions_together(layers: Sequence[nn.Module], *inputs: torch.Tensor) -> bool:
    """
    Whether the directions `layers` of one biLM layer train through one [`ElmoLstmLayerFunction`] (which may run them
    at once) instead of a call of each: when [`dispatch`] picks "training" for each, and nothing is attached to their
    calls that would be skipped (forward hooks; accelerate's wrapped `forward`, which under a `device_map` loads a
    layer's weights around its own call).
    """
    hooked = bool(nn.modules.module._global_forward_hooks or nn.modules.module._global_forward_pre_hooks)
    for layer in layers:
        hooked = hooked or bool(layer._forward_hooks or layer._forward_pre_hooks) or "forward" in vars(layer)
    return not hooked and all(
        dispatch(layer, layer.implementations, *inputs) is layer.implementations["training"] for layer in layers
    )


# -- character CNN ----------------------------------------------------------------------------------------------------


@torch.no_grad()
def max_pooled_by_matmul(module: nn.Conv1d, chars: torch.Tensor) -> torch.Tensor:
    """
    The convolution's max over positions, `(words, n_filters)` from `chars` `(words, chars, char_dim)`, as products of
    each word's character windows `(positions, char_dim * width)` with the flattened filters: equal to `nn.Conv1d`
    within fp32 rounding, and faster on CPU, taken a few words at a time so that each `(words, positions, filters)`
    product stays in cache. The bias is added after the max, which commutes with it.
    """
    kernel = module.weight.flatten(1).t()  # (char_dim * width, filters)
    width = module.kernel_size[0]
    pooled = [(words.unfold(1, width, 1).flatten(2) @ kernel).amax(dim=1) for words in chars.split(WORDS_PER_CHUNK)]
    return torch.cat(pooled) + module.bias


def distinct_rows(rows: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """
    `torch.unique(rows, dim=0, return_inverse=True)` for a matrix of non-negative integers `(n, columns)`: the
    distinct rows in lexicographic order and, for each row, the index of its distinct row. On the CPU
    `torch.unique(dim=0)` compares rows element by element; here the columns are packed, several to an int64 key, and
    the rows sorted once on those keys.
    """
    if len(rows) == 0:
        return rows, rows.new_zeros(0)
    bits = max(int(rows.max()).bit_length(), 1)
    per_key = 63 // bits
    keys = []
    for first in range(0, rows.shape[1], per_key):
        key = torch.zeros(len(rows), dtype=torch.long, device=rows.device)
        for column in rows[:, first : first + per_key].unbind(dim=1):
            key = (key << bits) | column
        keys.append(key)
    order = torch.arange(len(rows), device=rows.device)
    for key in reversed(keys):  # least significant first: each stable sort keeps the order of the ones after it
        order = order[torch.argsort(key[order], stable=True)]
    sorted_keys = torch.stack(keys, dim=1)[order]
    starts_group = torch.ones(len(rows), dtype=torch.bool, device=rows.device)
    starts_group[1:] = (sorted_keys[1:] != sorted_keys[:-1]).any(dim=1)
    inverse = torch.empty_like(order)
    inverse[order] = starts_group.cumsum(dim=0) - 1
    return rows[order[starts_group]], inverse
