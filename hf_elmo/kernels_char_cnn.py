"""
The character CNN's kernels: each distinct word found once ([`distinct_rows_by_packed_keys`]), every row as its own
for a traced graph ([`every_row_as_distinct`]) and the convolutions' max over positions as matrix products
([`max_pooled_by_matmul`]). Registered in `kernels_elmo`, beside the reference code of `modeling_elmo`
(`distinct_rows_reference`, `torch.unique`; `conv_max_pooled`).
"""

import torch
from torch import nn

# Words whose character windows the fast convolution multiplies at a time, so that each product stays in cache.
WORDS_PER_CHUNK = 64


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


def distinct_rows_by_packed_keys(rows: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
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


def every_row_as_distinct(rows: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Every row of `rows` as its own, for a traced graph, which cannot hold a count of distinct rows."""
    return rows, torch.arange(rows.shape[0], device=rows.device)  # not len(), which a graph would fix
