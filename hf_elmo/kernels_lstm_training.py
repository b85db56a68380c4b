"""
The LSTM layer's recurrence for training: the reference recurrence's results from [`ElmoLstmLayerFunction`], whose
backward through time is written by hand, on the valid positions alone, with a layer's two directions in one call
that runs them at once on the CPU ([`run_directions`]).
"""

import concurrent.futures
import functools
import os
from collections.abc import Callable, Iterable, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any, NamedTuple

import torch
from torch import nn

from .kernels_cpu_products import Product, autocast_dtype, mixed_mm, step_products, without_autocast
from .kernels_lstm_inference import PackedSteps


def lstm_layers_with_handwritten_backward(
    modules: Sequence[nn.Module],
    inputs: Sequence[torch.Tensor],
    mask: torch.Tensor,
    hidden: Sequence[torch.Tensor],
    memory: Sequence[torch.Tensor],
) -> list[tuple[torch.Tensor, torch.Tensor, torch.Tensor]]:
    """
    For each of `modules` (`ElmoLstmLayer`s of one config, such as a layer's two directions), the results of its
    reference recurrence on its own `inputs`, `hidden` and `memory` (as `ElmoLstmLayer.forward` takes them), from one
    [`ElmoLstmLayerFunction`], so that its backward can run the directions at once too ([`run_directions`]). Under
    autocast, of the reference under the same autocast: every product in autocast's dtype, in both passes; the state,
    the gate arithmetic and each product's result in float32.
    """
    # Read here, in the caller's thread: the directions' threads and the backward do not see autocast.
    compute_dtype = autocast_dtype(mask.device)

    def products_of(module: nn.Module) -> Callable[[torch.Tensor, Iterable[int]], dict[int, Product]]:
        return lambda kernel, row_counts: step_products(module, kernel, row_counts, False, compute_dtype)

    tensors = []
    for module, *direction in zip(modules, inputs, hidden, memory, strict=True):
        tensors += [*direction, module.input_kernel, module.recurrent_kernel, module.bias, module.projection_kernel]
    results = ElmoLstmLayerFunction.apply(
        [products_of(module) for module in modules],
        [
            DirectionSettings(module.cell_clip, module.proj_clip, module.config.forget_bias, compute_dtype)
            for module in modules
        ],
        mask,
        *tensors,
    )
    return [results[index : index + 3] for index in range(0, len(results), 3)]


# Threads that run a layer's two directions at once ([`run_directions`]), with the process that made them: made on
# first use, and again in a forked child, which inherits none of its parent's threads.
_direction_threads: tuple[int, ThreadPoolExecutor] | None = None


def run_directions(tasks: Sequence[Callable[[], Any]], device: torch.device) -> list[Any]:
    """
    The results of `tasks`, the directions of one layer, which share nothing. On the CPU with two or more threads,
    two tasks run at once, each on half of torch's threads: the recurrence's steps multiply a few dozen rows at a
    time, too few to keep several threads busy, while the directions' steps can run side by side. Elsewhere (one
    thread, CUDA), one after the other.
    """
    threads = torch.get_num_threads()
    if len(tasks) != 2 or device.type != "cpu" or threads < 2:
        return [task() for task in tasks]
    global _direction_threads
    if _direction_threads is None or _direction_threads[0] != os.getpid():
        _direction_threads = os.getpid(), ThreadPoolExecutor(len(tasks), thread_name_prefix="hf_elmo-direction")
    futures = [_direction_threads[1].submit(_run_on_threads, task, threads // 2) for task in tasks]
    concurrent.futures.wait(futures)  # both finish, even if one fails, before anything is returned or raised
    # A thread count set in a worker also becomes torch's default for threads started later: set this thread's again
    # (after a failure too, which may have come after the worker set its threads).
    if any(future.exception() is not None or future.result()[1] for future in futures):
        torch.set_num_threads(threads)
    return [future.result()[0] for future in futures]


def _run_on_threads(task: Callable[[], Any], threads: int) -> tuple[Any, bool]:
    """`task()` on `threads` threads, without autograd (as in an `autograd.Function`), and whether it set them."""
    changed = torch.get_num_threads() != threads
    if changed:
        torch.set_num_threads(threads)
    with torch.no_grad():
        return task(), changed


class SavedLayer(NamedTuple):
    """What the forward of one direction keeps for its backward; rows in packed order ([`PackedSteps`])."""

    packed_inputs: torch.Tensor  # (positions, input_dim)
    input_kernel: torch.Tensor
    recurrent_kernel: torch.Tensor
    projection_kernel: torch.Tensor | None
    gates: torch.Tensor  # (positions, 4 * cell_dim), activated
    initial_hidden: torch.Tensor  # (batch, output_dim), rows sorted
    initial_memory: torch.Tensor  # (batch, cell_dim), rows sorted
    packed_hidden: torch.Tensor  # (positions, output_dim): the state after each position
    packed_memory: torch.Tensor  # (positions, cell_dim)
    hidden_clip_passes: torch.Tensor | None  # (positions, output_dim): 1.0 where the output's clip passes the gradient
    memory_clip_passes: torch.Tensor | None  # (positions, cell_dim): the same for the memory's clip; None: no clip
    memory_tanh: torch.Tensor  # (positions, cell_dim)
    cell_outputs: torch.Tensor  # (positions, cell_dim): what the projection multiplies, in the products' dtype


class DirectionSettings(NamedTuple):
    """What the passes of one direction need besides its tensors."""

    cell_clip: float | None
    proj_clip: float | None
    forget_bias: float
    compute_dtype: torch.dtype | None  # the products' dtype under mixed precision (autocast's); None: float32


# The tensors each direction passes to [`ElmoLstmLayerFunction`], in order.
DIRECTION_TENSORS = ("inputs", "hidden", "memory", "input_kernel", "recurrent_kernel", "bias", "projection_kernel")


class ElmoLstmLayerFunction(torch.autograd.Function):
    """
    One layer of one or more directions, each as the reference recurrence, with a hand-written backward through time
    for training.

    Both passes run on the valid positions alone ([`PackedSteps`]): padding costs no arithmetic, whatever the batch's
    spread of lengths. The forward takes the input gates of every position in one product and saves, per position,
    the activated gates, the states before and after each clip and `tanh` of the memory. The backward walks the steps
    in reverse for the gradients of the gates and of the state, then takes each weight's gradient as one product over
    all positions (autograd through the reference loop adds a product into each weight's gradient at every step). A
    row's state gradient waits, untouched, until the backward reaches the row's last valid step. The directions share
    nothing but the layout of their steps, which they only read: [`run_directions`] may run them at once, in both
    passes.
    """

    @staticmethod
    def forward(
        ctx,
        products: Sequence[Callable[[torch.Tensor, Iterable[int]], dict[int, Product]]],
        settings: Sequence[DirectionSettings],
        mask: torch.Tensor,
        *tensors: torch.Tensor | None,
    ) -> tuple[torch.Tensor, ...]:
        """
        For each direction, `products(kernel, row_counts)`, which gives for each row count the function multiplying
        `(rows, in) @ kernel` ([`step_products`]), and its `settings`; `mask` `(batch, steps)`; then for each
        direction in turn its `DIRECTION_TENSORS`: the arguments as `ElmoLstmLayer.forward` takes them and the
        layer's parameters (`projection_kernel` may be None).
        Returns for each direction in turn its outputs `(batch, steps, output_dim)`, zero at invalid steps, and its
        final `hidden` and `memory`.
        """
        per_direction = len(DIRECTION_TENSORS)
        directions = [tensors[index : index + per_direction] for index in range(0, len(tensors), per_direction)]
        layout = PackedSteps.of(mask)  # one mask (the backward direction reads reversed rows), one layout for all
        # Each product's dtype is the settings' (read where autocast was seen), never autocast's here.
        tasks = [
            functools.partial(layer_forward, direction_products, direction_settings, layout, *direction)
            for direction_products, direction_settings, direction in zip(products, settings, directions, strict=True)
        ]
        with without_autocast(mask.device):
            runs = run_directions(tasks, mask.device)
        ctx.products, ctx.settings, ctx.layout = products, settings, layout
        ctx.save_for_backward(*(tensor for _, saved in runs for tensor in saved))
        return tuple(result for results, _ in runs for result in results)

    @staticmethod
    @torch.autograd.function.once_differentiable
    def backward(ctx, *grads: torch.Tensor) -> tuple[torch.Tensor | None, ...]:
        """The gradients of each direction's inputs, initial state and parameters; None for the other arguments."""
        saved, saved_per_direction, per_direction = ctx.saved_tensors, len(SavedLayer._fields), len(DIRECTION_TENSORS)
        tasks = [
            functools.partial(
                layer_backward,
                ctx.products[direction],
                ctx.settings[direction],
                ctx.layout,
                SavedLayer(*saved[direction * saved_per_direction : (direction + 1) * saved_per_direction]),
                ctx.needs_input_grad[3 + direction * per_direction : 3 + (direction + 1) * per_direction],
                *grads[3 * direction : 3 * direction + 3],
            )
            for direction in range(len(ctx.settings))
        ]
        device = saved[0].device
        with without_autocast(device):  # as in the forward: the settings choose each product's dtype
            gradients = run_directions(tasks, device)
        return None, None, None, *(grad for direction in gradients for grad in direction)


def layer_forward(
    products: Callable[[torch.Tensor, Iterable[int]], dict[int, Product]],
    settings: DirectionSettings,
    layout: PackedSteps,
    inputs: torch.Tensor,
    hidden: torch.Tensor,
    memory: torch.Tensor,
    input_kernel: torch.Tensor,
    recurrent_kernel: torch.Tensor,
    bias: torch.Tensor,
    projection_kernel: torch.Tensor | None,
) -> tuple[tuple[torch.Tensor, torch.Tensor, torch.Tensor], SavedLayer]:
    """
    The forward of one direction of [`ElmoLstmLayerFunction`] over the steps of `layout` (its mask's): its results
    and what its backward reads.
    """
    cell_clip, proj_clip, forget_bias, compute_dtype = settings
    cell = memory.shape[-1]
    gate_bias = bias.clone()
    gate_bias[cell : 2 * cell] += forget_bias
    packed_inputs = layout.pack(inputs)
    # (positions, 4 * cell): the input gates of every position in one product, activated in place step by step.
    gates = mixed_mm(packed_inputs, input_kernel, compute_dtype, gate_bias)
    positions = len(gates)
    initial_hidden, initial_memory = hidden[layout.order], memory[layout.order]
    output_dim = cell if projection_kernel is None else projection_kernel.shape[1]
    # The state after each position; before each clip too, where there is one, for the clip's gradient. In the
    # state's dtype: under autocast the inputs may come in autocast's.
    packed_hidden, packed_memory = hidden.new_empty(positions, output_dim), memory.new_empty(positions, cell)
    unclipped_hidden = hidden.new_empty(positions, output_dim) if proj_clip is not None else packed_hidden
    unclipped_memory = memory.new_empty(positions, cell) if cell_clip is not None else packed_memory
    memory_tanh = memory.new_empty(positions, cell)
    # What the projection multiplies, in the products' dtype: rounded once as the mul writes it, not at every read.
    projected_dtype = compute_dtype or memory.dtype
    cell_outputs = (
        memory.new_empty(positions, cell, dtype=projected_dtype) if projection_kernel is not None else unclipped_hidden
    )
    # Each step's products, by row count (rows fall as sentences end), looked up once per call.
    recurrent_products = products(recurrent_kernel, set(layout.running))
    if projection_kernel is not None:
        projection_products = products(projection_kernel, set(layout.running))
    previous_hidden, previous_memory = initial_hidden, initial_memory
    for step, rows in enumerate(layout.running):
        here = slice(layout.starts[step], layout.starts[step] + rows)
        step_gates = gates[here]
        recurrent_products[rows](previous_hidden[:rows], step_gates, True)
        in_gate, forget_gate, cell_input, out_gate = step_gates.split(cell, dim=-1)
        step_gates[:, : 2 * cell].sigmoid_()
        cell_input.tanh_()
        out_gate.sigmoid_()
        torch.mul(forget_gate, previous_memory[:rows], out=unclipped_memory[here]).addcmul_(in_gate, cell_input)
        if cell_clip is not None:
            torch.clamp(unclipped_memory[here], -cell_clip, cell_clip, out=packed_memory[here])
        torch.tanh(packed_memory[here], out=memory_tanh[here])
        torch.mul(out_gate, memory_tanh[here], out=cell_outputs[here])
        if projection_kernel is not None:
            projection_products[rows](cell_outputs[here], unclipped_hidden[here], False)
        if proj_clip is not None:
            torch.clamp(unclipped_hidden[here], -proj_clip, proj_clip, out=packed_hidden[here])
        previous_hidden, previous_memory = packed_hidden[here], packed_memory[here]

    # Each row's state after its last valid step; rows without one keep the initial state.
    final_hidden, final_memory = initial_hidden.clone(), initial_memory.clone()
    last = layout.last_rows()
    final_hidden[: len(last)], final_memory[: len(last)] = packed_hidden[last], packed_memory[last]
    # Each clip's gradient: 1.0 where it left its input unchanged (boundaries included, as `torch.clamp`'s), else 0.0;
    # compared over all positions at once, and multiplied by rows in the backward's steps.
    hidden_clip_passes = (unclipped_hidden == packed_hidden).to(hidden.dtype) if proj_clip is not None else None
    memory_clip_passes = (unclipped_memory == packed_memory).to(memory.dtype) if cell_clip is not None else None
    restore = torch.argsort(layout.order)
    saved = SavedLayer(
        packed_inputs,
        input_kernel,
        recurrent_kernel,
        projection_kernel,
        gates,
        initial_hidden,
        initial_memory,
        packed_hidden,
        packed_memory,
        hidden_clip_passes,
        memory_clip_passes,
        memory_tanh,
        cell_outputs,
    )
    return (layout.unpack(packed_hidden), final_hidden[restore], final_memory[restore]), saved


def layer_backward(
    products: Callable[[torch.Tensor, Iterable[int]], dict[int, Product]],
    settings: DirectionSettings,
    layout: PackedSteps,
    saved: SavedLayer,
    needs_grad: Sequence[bool],
    outputs_grad: torch.Tensor,
    hidden_grad: torch.Tensor,
    memory_grad: torch.Tensor,
) -> tuple[torch.Tensor | None, ...]:
    """
    The backward of one direction of [`ElmoLstmLayerFunction`]: the gradients of its `DIRECTION_TENSORS`, those
    `needs_grad` does not ask for as None (the initial state's always come: the steps compute them anyway).
    """
    cell_clip, proj_clip, _, compute_dtype = settings
    cell = saved.packed_memory.shape[-1]
    first_rows = layout.running[0] if layout.running else 0
    # The backward's products multiply by the transposed kernels, copied once so that each is contiguous.
    recurrent_transposed = saved.recurrent_kernel.t().contiguous()
    recurrent_products = products(recurrent_transposed, set(layout.running))
    if saved.projection_kernel is not None:
        projection_transposed = saved.projection_kernel.t().contiguous()
        projection_products = products(projection_transposed, set(layout.running))
        cell_output_grads = saved.gates.new_empty(first_rows, cell)
    # The gradient of each position's output, to which the next step's adds its state's; after the loop, the
    # gradient of the projection's output (for its kernel's gradient in one product).
    new_hidden_grads = layout.pack(outputs_grad)
    gates_grad = torch.empty_like(saved.gates)
    # Per sorted row, the gradient of its state after the step being walked (the final state's until then).
    hidden_grad, memory_grad = hidden_grad[layout.order], memory_grad[layout.order]
    # Each step's derivatives are taken within the step, on rows still in cache: passes over all positions at
    # once cost more memory traffic than they save in calls.
    for step in reversed(range(len(layout.running))):
        rows = layout.running[step]
        here = slice(layout.starts[step], layout.starts[step] + rows)
        if step > 0:
            previous_memory = saved.packed_memory[layout.starts[step - 1] : layout.starts[step - 1] + rows]
        else:
            previous_memory = saved.initial_memory[:rows]
        in_gate, forget_gate, cell_input, out_gate = saved.gates[here].split(cell, dim=-1)
        in_grad, forget_grad, cell_input_grad, out_grad = gates_grad[here].split(cell, dim=-1)
        new_hidden_grad = new_hidden_grads[here].add_(hidden_grad[:rows])
        if proj_clip is not None:
            new_hidden_grad.mul_(saved.hidden_clip_passes[here])
        if saved.projection_kernel is not None:
            cell_output_grad = cell_output_grads[:rows]
            projection_products[rows](new_hidden_grad, cell_output_grad, False)
        else:
            cell_output_grad = new_hidden_grad
        step_tanh = saved.memory_tanh[here]
        through_tanh = cell_output_grad * out_gate
        new_memory_grad = memory_grad[:rows].add_(through_tanh).addcmul_(through_tanh * step_tanh, step_tanh, value=-1)
        if cell_clip is not None:
            new_memory_grad.mul_(saved.memory_clip_passes[here])
        # Each gate's gradient before its activation: sigmoid' = s - s^2, tanh' = 1 - t^2.
        torch.mul(cell_output_grad, step_tanh, out=out_grad).mul_(out_gate)
        out_grad.addcmul_(out_grad, out_gate, value=-1)
        torch.mul(new_memory_grad, cell_input, out=in_grad).mul_(in_gate)
        in_grad.addcmul_(in_grad, in_gate, value=-1)
        torch.mul(new_memory_grad, previous_memory, out=forget_grad).mul_(forget_gate)
        forget_grad.addcmul_(forget_grad, forget_gate, value=-1)
        torch.mul(new_memory_grad, in_gate, out=cell_input_grad)
        cell_input_grad.addcmul_(cell_input_grad * cell_input, cell_input, value=-1)
        recurrent_products[rows](gates_grad[here], hidden_grad[:rows], False)
        new_memory_grad.mul_(forget_gate)  # the memory before this step, through the forget gate

    restore = torch.argsort(layout.order)
    inputs_grad = input_kernel_grad = recurrent_kernel_grad = bias_grad = projection_kernel_grad = None
    if needs_grad[5]:
        bias_grad = gates_grad.sum(dim=0)
    if compute_dtype is not None:  # once for the (up to) three products below, which would each round it the same
        gates_grad = gates_grad.to(compute_dtype)
    if needs_grad[0]:
        inputs_grad = layout.unpack(mixed_mm(gates_grad, saved.input_kernel.t(), compute_dtype))
    if needs_grad[3]:
        input_kernel_grad = mixed_mm(saved.packed_inputs.t(), gates_grad, compute_dtype)
    if needs_grad[4]:
        # The state each position's step read: the initial one at step 0, else the row's output a step before.
        previous_hidden = torch.cat([saved.initial_hidden[:first_rows], saved.packed_hidden[layout.previous_rows()]])
        recurrent_kernel_grad = mixed_mm(previous_hidden.t(), gates_grad, compute_dtype)
    if needs_grad[6]:
        projection_kernel_grad = mixed_mm(saved.cell_outputs.t(), new_hidden_grads, compute_dtype)
    return (
        inputs_grad,
        hidden_grad[restore],
        memory_grad[restore],
        input_kernel_grad,
        recurrent_kernel_grad,
        bias_grad,
        projection_kernel_grad,
    )
