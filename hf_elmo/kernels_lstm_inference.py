"""
The LSTM layer's recurrence for inference: the reference recurrence's results within fp32 rounding, in place and
without autograd ([`lstm_layer_in_place`]), on the valid positions of the batch alone ([`PackedSteps`], whose layout
the training recurrence in `kernels_lstm_training` shares).
"""

import itertools
from typing import NamedTuple

import torch
from torch import nn

from .kernels_cpu_products import autocast_dtype, step_products

# Packed rows of input gates the fast recurrence computes at a time (16 MB at the original shapes).
GATE_CHUNK_ROWS = 256


class PackedSteps(NamedTuple):
    """
    The valid positions of a right-padded batch in time-major order, rows sorted by decreasing length, so that the
    rows still running at any step are a prefix of the batch: padded positions cost nothing, ended rows simply keep
    their final state, and no step needs a mask. Step `s` owns packed rows `starts[s]:starts[s + 1]`, the first
    `running[s]` rows of `order`.
    """

    order: torch.Tensor  # (batch,): batch row of each sorted row
    positions: torch.Tensor  # (packed rows,): each packed row's position `row * steps + step` in the batch
    running: list[int]  # rows still running at each step that has any
    starts: list[int]  # len(running) + 1 offsets into the packed rows
    shape: tuple[int, int]  # (batch, steps)

    @classmethod
    def of(cls, mask: torch.Tensor) -> "PackedSteps":
        """
        The layout of `mask` `(batch, steps)`, each row's valid steps first, worked out on the host from one copy of
        the mask there, the sorted rows and packed positions copied back (on the CPU, none of them copies): on an
        accelerator, the host waits for the device once per call.
        """
        host_mask = mask.cpu()
        order = torch.argsort(host_mask.sum(dim=1), descending=True, stable=True)
        sorted_mask = host_mask[order].t()  # (steps, batch): time-major
        step, row = sorted_mask.nonzero(as_tuple=True)
        running = [rows for rows in sorted_mask.sum(dim=1).tolist() if rows > 0]
        positions = (order[row] * mask.shape[1] + step).to(mask.device)
        return cls(order.to(mask.device), positions, running, [0, *itertools.accumulate(running)], tuple(mask.shape))

    def pack(self, x: torch.Tensor) -> torch.Tensor:
        """`(batch, steps, ...)` -> its valid positions `(packed rows, ...)` in packed order."""
        return x.flatten(0, 1).index_select(0, self.positions)

    def unpack(self, packed: torch.Tensor) -> torch.Tensor:
        """`(packed rows, ...)` in packed order -> `(batch, steps, ...)`, zero at padded positions."""
        x = packed.new_zeros(self.shape[0] * self.shape[1], *packed.shape[1:])
        return x.index_copy_(0, self.positions, packed).view(*self.shape, *packed.shape[1:])

    def previous_rows(self) -> torch.Tensor:
        """For each packed row of steps 1 onwards, the packed row of the same sentence at the step before."""
        steps = [torch.arange(start, start + count) for start, count in zip(self.starts, self.running[1:])]
        return torch.cat(steps).to(self.order.device) if steps else self.order.new_zeros(0)

    def last_rows(self) -> torch.Tensor:
        """For each sorted row with a valid step, the packed row of its last step."""
        if not self.running:
            return self.order.new_zeros(0)
        rows = torch.arange(self.running[0])
        lengths = (torch.tensor(self.running)[:, None] > rows).sum(dim=0)
        return (torch.tensor(self.starts)[lengths - 1] + rows).to(self.order.device)


def gate_chunks(step_starts: list[int], max_rows: int) -> list[tuple[int, int]]:
    """
    Consecutive steps grouped into `(first, end)` ranges of at most `max_rows` packed rows (a step with more rows is a
    range of its own). Step `s` owns rows `step_starts[s]:step_starts[s + 1]`.
    """
    chunks, first = [], 0
    steps = len(step_starts) - 1
    for step in range(steps):
        if step > first and step_starts[step + 1] - step_starts[first] > max_rows:
            chunks.append((first, step))
            first = step
    return chunks + [(first, steps)] if steps > 0 else []


@torch.no_grad()
def lstm_layer_in_place(
    module: nn.Module, inputs: torch.Tensor, mask: torch.Tensor, hidden: torch.Tensor, memory: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """
    The results of the reference recurrence of `module` (an `ElmoLstmLayer`) within fp32 rounding, without autograd,
    for when nothing needs gradients. Arguments and results as `ElmoLstmLayer.forward`. Under autocast, the results of
    the reference under the same autocast: the products in autocast's dtype, the state and the gate arithmetic in the
    state's dtype (float32), as autocast leaves them.

    The steps run on the valid positions alone ([`PackedSteps`]). Their input gates come `GATE_CHUNK_ROWS` packed
    rows at a time, from one matrix product (when `module.input_is_context_free`, a copy from the gates of the distinct
    rows, each projected once); each step adds its recurrent product to its slice of those input gates and does the
    gate arithmetic there, in place.
    """
    batch_size = inputs.shape[0]
    cell, cell_clip, proj_clip = module.cell_dim, module.cell_clip, module.proj_clip
    projection_kernel = module.projection_kernel
    layout = PackedSteps.of(mask)
    order, running, step_starts = layout.order, layout.running, layout.starts
    chunks = gate_chunks(step_starts, GATE_CHUNK_ROWS)
    compute_dtype = autocast_dtype(inputs.device)

    packed_inputs = layout.pack(inputs)
    if module.input_is_context_free:
        # Context-free word vectors, one row per occurrence of a word: project each distinct row once and copy its
        # gates to every position holding it. `torch.unique` itself, not `kernels_elmo.ALL_DISTINCT_ROWS`: that
        # registry finds distinct rows of character ids (its kernels pack non-negative integers into keys, and its
        # graph entries keep every row), these rows are float vectors, and this kernel runs on the inference path
        # alone, where no graph is traced.
        distinct, positions = torch.unique(packed_inputs, dim=0, return_inverse=True)
        distinct_gates = memory.new_empty(len(distinct), 4 * cell)
        step_products(module, module.input_kernel, [len(distinct)], False, compute_dtype)[len(distinct)](
            distinct, distinct_gates, False
        )

    hidden, memory = hidden[order], memory[order]  # indexing copies: the arguments stay untouched
    # Buffers in the state's dtype: under autocast the inputs may come in autocast's.
    packed_outputs = hidden.new_empty(step_starts[-1], hidden.shape[-1])
    cell_output = memory.new_empty(batch_size, cell) if projection_kernel is not None else None
    # The input gates of a chunk of steps at a time, in one buffer: small enough to stay in cache between their
    # product and their steps, and to be reused rather than freshly mapped (page faults) for every chunk.
    largest_chunk = max((step_starts[end] - step_starts[first] for first, end in chunks), default=0)
    chunk_buffer = memory.new_empty(largest_chunk, 4 * cell)
    # Added to each step's gates while they are in cache rather than in a pass over all input gates.
    gate_bias = module.bias.clone()
    gate_bias[cell : 2 * cell] += module.config.forget_bias
    # Each step's two products by row count (rows fall as sentences end), and each chunk's input product by its rows,
    # looked up once per call.
    recurrent_products = step_products(module, module.recurrent_kernel, set(running), True, compute_dtype)
    if projection_kernel is not None:
        projection_products = step_products(module, projection_kernel, set(running), True, compute_dtype)
    if not module.input_is_context_free:
        chunk_rows = {step_starts[end] - step_starts[first] for first, end in chunks}
        input_products = step_products(module, module.input_kernel, chunk_rows, False, compute_dtype)
    for first_step, end_step in chunks:
        chunk = slice(step_starts[first_step], step_starts[end_step])
        chunk_gates = chunk_buffer[: chunk.stop - chunk.start]
        if module.input_is_context_free:
            torch.index_select(distinct_gates, 0, positions[chunk], out=chunk_gates)
        else:
            chunk_inputs = packed_inputs[chunk]
            input_products[len(chunk_inputs)](chunk_inputs, chunk_gates, False)
        for step in range(first_step, end_step):
            rows, start = running[step], step_starts[step] - chunk.start
            step_gates = chunk_gates[start : start + rows]  # overwritten in place: each is read once
            recurrent_products[rows](hidden[:rows], step_gates, True)
            step_gates.add_(gate_bias)
            in_gate, forget_gate, cell_input, out_gate = step_gates.split(cell, dim=-1)
            step_gates[:, : 2 * cell].sigmoid_()
            out_gate.sigmoid_()
            step_memory = memory[:rows]
            step_memory.mul_(forget_gate).addcmul_(in_gate, cell_input.tanh_())
            if cell_clip is not None:
                step_memory.clamp_(-cell_clip, cell_clip)
            step_hidden = hidden[:rows]
            if projection_kernel is not None:
                torch.tanh(step_memory, out=cell_output[:rows]).mul_(out_gate)
                projection_products[rows](cell_output[:rows], step_hidden, False)
            else:
                torch.tanh(step_memory, out=step_hidden).mul_(out_gate)
            if proj_clip is not None:
                step_hidden.clamp_(-proj_clip, proj_clip)
            packed_outputs[step_starts[step] : step_starts[step + 1]] = step_hidden

    restore = torch.argsort(order)
    return layout.unpack(packed_outputs), hidden[restore], memory[restore]
