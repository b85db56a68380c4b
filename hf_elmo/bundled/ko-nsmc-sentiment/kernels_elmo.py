"""
The fast kernels of ELMo beside its reference code in `modeling_elmo.py`, and the one place that picks between them.

Each module that has a kernel ([`ElmoLstmLayer`], [`ElmoCharConvolution`]) asks [`dispatch`] for the function to run
on every call and runs it on itself, inside its own `forward`: what hooks do around a module call (accelerate's
`device_map` and offloading load the weights and move the inputs) is done before any kernel reads the weights.

- inference (nothing needs gradients): the recurrence in place without autograd ([`lstm_layer_in_place`]), its
  matrix products on CPU from the library `config.cpu_matmul` names or this machine measured fastest
  ([`step_product`]), and the character convolutions as matrix products ([`max_pooled_by_matmul`]);
- training the biLM: the reference recurrence's results from [`ElmoLstmLayerFunction`], whose backward through time
  is written by hand;
- `config.recurrence_implementation == "reference"`, autocast (which picks each operation's dtype), `torch.compile`
  and `torch.export`: the reference code only.
"""

import functools
import itertools
import json
import os
import platform
import tempfile
import time
import warnings
import weakref
from collections.abc import Callable
from pathlib import Path

import torch
from torch import nn

# Packed rows of input gates the fast recurrence computes at a time (16 MB at the original shapes).
GATE_CHUNK_ROWS = 256
# Words whose character windows the fast convolution multiplies at a time, so that each product stays in cache.
WORDS_PER_CHUNK = 64


def dispatch(module: nn.Module, implementations: dict[str, Callable], *inputs: torch.Tensor) -> Callable:
    """
    The function `module` runs on `inputs`, from `implementations` keyed "reference", "inference" and "training":
    "reference" when `module.config.recurrence_implementation` asks for it, under autocast, while compiling or
    exporting; else "inference" when nothing in `module` or `inputs` needs gradients, "training" otherwise.
    """
    reference = (
        module.config.recurrence_implementation == "reference"
        or torch.is_autocast_enabled(inputs[0].device.type)
        or torch.compiler.is_compiling()
        or torch.compiler.is_exporting()
    )
    if reference:
        return implementations["reference"]
    needs_grad = torch.is_grad_enabled() and any(t.requires_grad for t in (*inputs, *module.parameters()))
    return implementations["training" if needs_grad else "inference"]


# ---------------------------------------------------------------------------------------------------------------------
# Character CNN
# ---------------------------------------------------------------------------------------------------------------------


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


# ---------------------------------------------------------------------------------------------------------------------
# Matrix products of the fast recurrence: one library per machine and shape
# ---------------------------------------------------------------------------------------------------------------------

# A product `x @ kernel` written into `out`, or added to it when `accumulate`.
Product = Callable[[torch.Tensor, torch.Tensor, bool], None]


def blas_product(kernel: torch.Tensor) -> Product:
    """`torch.mm` on the `(in, out)` kernel itself: no copy."""

    def product(x: torch.Tensor, out: torch.Tensor, accumulate: bool) -> None:
        if accumulate:
            out.addmm_(x, kernel)
        else:
            torch.mm(x, kernel, out=out)

    return product


def onednn_product(kernel: torch.Tensor) -> Product:
    """oneDNN's linear on a copy of the kernel prepacked in its own layout (as `torch.compile` does on CPU)."""
    packed = torch.ops.mkldnn._reorder_linear_weight(kernel.t().contiguous())

    def product(x: torch.Tensor, out: torch.Tensor, accumulate: bool) -> None:
        result = torch.ops.mkldnn._linear_pointwise(x, packed, None, "none", [], "")
        out.add_(result) if accumulate else out.copy_(result)

    return product


def int8_product(kernel: torch.Tensor) -> Product:
    """
    Reduced precision: the kernel quantised to int8 per output column (symmetric, scale `max |w| / 127`), each call's
    `x` quantised on the fly, products accumulated in int32 and rescaled to float32 (PyTorch's dynamic quantisation,
    as `torch.ao.quantization.quantize_dynamic` applies to `nn.Linear`).
    """
    weight = kernel.t().contiguous()  # (out, in): one scale per output
    scales = weight.abs().amax(dim=1).clamp_min(torch.finfo(torch.float32).tiny) / 127
    with warnings.catch_warnings():
        # PyTorch marks quantised tensors as deprecated in favour of torchao; their CPU int8 products are still the
        # ones shipped with torch, and this is their only use here.
        warnings.simplefilter("ignore")
        quantized = torch.quantize_per_channel(
            weight, scales.double(), torch.zeros_like(scales, dtype=torch.long), 0, torch.qint8
        )
    packed = torch.ops.quantized.linear_prepack(quantized, None)

    def product(x: torch.Tensor, out: torch.Tensor, accumulate: bool) -> None:
        # `reduce_range`: 7-bit inputs, so that x86's 8-bit multiply-adds cannot saturate.
        result = torch.ops.quantized.linear_dynamic(x, packed, True)
        out.add_(result) if accumulate else out.copy_(result)

    return product


PRODUCTS = {"blas": blas_product, "onednn": onednn_product, "int8": int8_product}
# Products prepared from each kernel, by library, under the kernel's `id` while it lives (tensors compare by value,
# so they cannot be weak dictionary keys themselves).
_prepared: dict[int, tuple[tuple[int, int], dict[str, Product]]] = {}


def prepared_product(kernel: torch.Tensor, library: str) -> Product:
    """`PRODUCTS[library]` of `kernel`, prepared once and again only after the kernel is written to or replaced."""
    identity = (kernel.data_ptr(), kernel._version)
    cached = _prepared.get(id(kernel))
    if cached is None:
        weakref.finalize(kernel, _prepared.pop, id(kernel), None)
    if cached is None or cached[0] != identity:
        cached = _prepared[id(kernel)] = (identity, {})
    products = cached[1]
    if library not in products:
        products[library] = PRODUCTS[library](kernel.detach())
    return products[library]


def row_bucket(rows: int) -> int:
    """The power of two a product of `rows` rows is measured at: rows vary from step to step as sentences end."""
    return 1 << (rows - 1).bit_length()


def choices_file() -> Path:
    """Where measured choices are kept: `$HF_ELMO_CACHE`, else `$XDG_CACHE_HOME/hf_elmo` or `~/.cache/hf_elmo`."""
    default = Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache")) / "hf_elmo"
    return Path(os.environ.get("HF_ELMO_CACHE", default)) / "cpu_matmul_choices.json"


@functools.cache
def cpu_model() -> str:
    """The CPU's model name (what decides which library is fastest), e.g. "AMD EPYC 7B13"; read once per process."""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def time_product(product: Product, x: torch.Tensor, out: torch.Tensor, calls: int = 3, rounds: int = 5) -> float:
    """The best of `rounds` timings of `calls` products, after one to warm up."""
    product(x, out, True)
    best = float("inf")
    for _ in range(rounds):
        began = time.perf_counter()
        for _ in range(calls):
            product(x, out, True)
        best = min(best, time.perf_counter() - began)
    return best


_choices: dict[str, str] | None = None  # the choices file's contents, read once


def fastest_float32_library(in_dim: int, out_dim: int, rows: int) -> str:
    """
    "blas" or "onednn", whichever multiplies `(rows, in_dim) @ (in_dim, out_dim)` faster here, from the choices file
    if this CPU model, thread count, torch version and shape are in it; else timed now, on a random kernel, and
    added to the file. "onednn" must be 5% faster to be chosen: its prepacked copy costs memory. A file that cannot
    be read or written only means measuring again.
    """
    global _choices
    path = choices_file()
    if _choices is None:
        try:
            _choices = json.loads(path.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            _choices = {}
    key = (
        f"{cpu_model()} | torch {torch.__version__} | {torch.get_num_threads()} threads | "
        f"({rows}, {in_dim}) @ ({in_dim}, {out_dim})"
    )
    if key not in _choices:
        if not torch.backends.mkldnn.is_available():
            _choices[key] = "blas"
        else:
            generator = torch.Generator().manual_seed(0)
            kernel = torch.randn(in_dim, out_dim, generator=generator) / in_dim**0.5
            x, out = torch.randn(rows, in_dim, generator=generator), torch.zeros(rows, out_dim)
            blas, onednn = (time_product(PRODUCTS[name](kernel), x, out) for name in ("blas", "onednn"))
            _choices[key] = "onednn" if onednn < 0.95 * blas else "blas"
        try:  # written whole, then renamed: a reader never sees half a file
            path.parent.mkdir(parents=True, exist_ok=True)
            with tempfile.NamedTemporaryFile("w", dir=path.parent, suffix=".tmp", delete=False) as handle:
                json.dump(_choices, handle, indent=1, sort_keys=True)
            os.replace(handle.name, path)
        except OSError:
            pass
    return _choices[key]


def step_product(module: nn.Module, kernel: torch.Tensor, rows: int, repeated_every_step: bool = True) -> Product:
    """
    The product `(rows, in) @ kernel` of the fast recurrence of `module`, by the library its `config.cpu_matmul`
    names ("auto": the float32 library measured fastest here for that shape). Off the CPU, or for kernels in
    another precision than float32, torch's own (`"blas"`): the choices are CPU float32 libraries.

    "int8" quantises only the products `repeated_every_step` (recurrent and projection), whose weights are streamed
    again at every step. The input products, one per chunk of steps, stay float32: they are a small share of the time
    where int8 pays (small batches), and most of its error (the inputs of a whole chunk share one scale).
    """
    choice = module.config.cpu_matmul
    if kernel.device.type != "cpu" or kernel.dtype != torch.float32:
        if choice in ("onednn", "int8"):
            raise ValueError(
                f"cpu_matmul={choice!r} runs float32 kernels on the CPU; this model's are "
                f"{kernel.dtype} on {kernel.device.type}: set cpu_matmul='auto'"
            )
        return blas_product(kernel)
    if choice == "onednn" and not torch.backends.mkldnn.is_available():
        raise ValueError("cpu_matmul='onednn' needs a torch built with oneDNN (mkldnn); set cpu_matmul='auto'")
    if choice == "auto" or (choice == "int8" and not repeated_every_step):
        return prepared_product(kernel, fastest_float32_library(*kernel.shape, row_bucket(rows)))
    return prepared_product(kernel, choice)


# ---------------------------------------------------------------------------------------------------------------------
# LSTM layer: in place for inference, with a hand-written backward for training
# ---------------------------------------------------------------------------------------------------------------------


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
    for when nothing needs gradients. Arguments and results as `ElmoLstmLayer.forward`.

    Rows are sorted by length so that the rows still running at any step are a prefix of the batch: padded positions
    cost nothing, ended rows simply keep their final state, and no step needs a mask. The input gates of the valid
    positions come `GATE_CHUNK_ROWS` packed rows at a time, from one matrix product (when `module.reads_word_vectors`,
    a copy from the gates of the distinct rows, each projected once); each step adds its recurrent product to its
    slice of those input gates and does the gate arithmetic there, in place.
    """
    batch_size, steps, _ = inputs.shape
    cell, cell_clip, proj_clip = module.cell_dim, module.cell_clip, module.proj_clip
    projection_kernel = module.projection_kernel
    lengths = mask.sum(dim=1)
    order = torch.argsort(lengths, descending=True, stable=True)
    packed_mask = mask[order].t()  # (steps, batch): the valid positions in time-major order
    running = [rows for rows in packed_mask.sum(dim=1).tolist() if rows > 0]  # rows still running at each step
    step_starts = [0, *itertools.accumulate(running)]  # step `s` owns rows `step_starts[s]:step_starts[s + 1]`
    chunks = gate_chunks(step_starts, GATE_CHUNK_ROWS)

    packed_inputs = inputs[order].transpose(0, 1)[packed_mask]
    if module.reads_word_vectors:
        # Context-free word vectors, one row per occurrence of a word: project each distinct row once and copy its
        # gates to every position holding it.
        distinct, positions = torch.unique(packed_inputs, dim=0, return_inverse=True)
        distinct_gates = distinct.new_empty(len(distinct), 4 * cell)
        step_product(module, module.input_kernel, len(distinct), False)(distinct, distinct_gates, False)

    hidden, memory = hidden[order], memory[order]  # indexing copies: the arguments stay untouched
    packed_outputs = inputs.new_empty(step_starts[-1], hidden.shape[-1])
    cell_output = inputs.new_empty(batch_size, cell) if projection_kernel is not None else None
    # The input gates of a chunk of steps at a time, in one buffer: small enough to stay in cache between their
    # product and their steps, and to be reused rather than freshly mapped (page faults) for every chunk.
    largest_chunk = max((step_starts[end] - step_starts[first] for first, end in chunks), default=0)
    chunk_buffer = inputs.new_empty(largest_chunk, 4 * cell)
    # Added to each step's gates while they are in cache rather than in a pass over all input gates.
    gate_bias = module.bias.clone()
    gate_bias[cell : 2 * cell] += module.config.forget_bias
    # Each step's two products, by row count (rows fall as sentences end), looked up once per call.
    step_products = {
        rows: (
            step_product(module, module.recurrent_kernel, rows),
            step_product(module, projection_kernel, rows) if projection_kernel is not None else None,
        )
        for rows in set(running)
    }
    for first_step, end_step in chunks:
        chunk = slice(step_starts[first_step], step_starts[end_step])
        chunk_gates = chunk_buffer[: chunk.stop - chunk.start]
        if module.reads_word_vectors:
            torch.index_select(distinct_gates, 0, positions[chunk], out=chunk_gates)
        else:
            chunk_inputs = packed_inputs[chunk]
            step_product(module, module.input_kernel, len(chunk_inputs), False)(chunk_inputs, chunk_gates, False)
        for step in range(first_step, end_step):
            rows, start = running[step], step_starts[step] - chunk.start
            recurrent_product, projection_product = step_products[rows]
            step_gates = chunk_gates[start : start + rows]  # overwritten in place: each is read once
            recurrent_product(hidden[:rows], step_gates, True)
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
                projection_product(cell_output[:rows], step_hidden, False)
            else:
                torch.tanh(step_memory, out=step_hidden).mul_(out_gate)
            if proj_clip is not None:
                step_hidden.clamp_(-proj_clip, proj_clip)
            packed_outputs[step_starts[step] : step_starts[step + 1]] = step_hidden

    outputs = packed_outputs.new_zeros(steps, batch_size, hidden.shape[-1])
    outputs[packed_mask] = packed_outputs
    restore = torch.argsort(order)
    return outputs.transpose(0, 1)[restore], hidden[restore], memory[restore]


def lstm_layer_with_handwritten_backward(
    module: nn.Module, inputs: torch.Tensor, mask: torch.Tensor, hidden: torch.Tensor, memory: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """The results of the reference recurrence of `module` (an `ElmoLstmLayer`) from [`ElmoLstmLayerFunction`]."""
    return ElmoLstmLayerFunction.apply(
        inputs,
        mask,
        hidden,
        memory,
        module.input_kernel,
        module.recurrent_kernel,
        module.bias,
        module.projection_kernel,
        module.cell_clip,
        module.proj_clip,
        module.config.forget_bias,
    )


class ElmoLstmLayerFunction(torch.autograd.Function):
    """
    One layer of one direction, as the reference recurrence, with a hand-written backward through time for training.

    The forward saves each step's gate activations, states and clip masks, time-major (two thirds of what autograd
    keeps from the reference loop at the original shapes, most of it the gates). The backward walks the steps
    in reverse for the gradients of the gates and of the state, then takes each weight's gradient as one product over
    all steps: autograd through the reference loop adds a `(in, 4 * cell_dim)` product into the gradient at every step.
    At invalid steps the gates get no gradient and the state's gradient passes through unchanged.
    """

    @staticmethod
    def forward(
        ctx,
        inputs: torch.Tensor,
        mask: torch.Tensor,
        hidden: torch.Tensor,
        memory: torch.Tensor,
        input_kernel: torch.Tensor,
        recurrent_kernel: torch.Tensor,
        bias: torch.Tensor,
        projection_kernel: torch.Tensor | None,
        cell_clip: float | None,
        proj_clip: float | None,
        forget_bias: float,
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """
        Arguments as `ElmoLstmLayer.forward` takes them, then the layer's parameters, clips and forget bias. Returns
        the outputs `(batch, steps, output_dim)`, zero at invalid steps, and the final `hidden` and `memory`.
        """
        batch_size, steps, _ = inputs.shape
        cell = memory.shape[-1]
        valid = mask.t()[..., None]  # (steps, batch, 1)
        # (steps, batch, 4 * cell): the input gates of every step in one product, activated in place step by step.
        gates = inputs.transpose(0, 1) @ input_kernel + bias
        hidden_states = hidden.new_empty(steps + 1, *hidden.shape)  # the state before each step and after the last
        memory_states = memory.new_empty(steps + 1, *memory.shape)
        hidden_states[0], memory_states[0] = hidden, memory
        output_dim = cell if projection_kernel is None else projection_kernel.shape[1]
        outputs = inputs.new_empty(batch_size, steps, output_dim)
        # Where each clamp passed its gradient (boundaries included), as `torch.clamp` does.
        in_clip = {"dtype": torch.bool, "device": inputs.device}
        memory_in_clip = torch.empty(steps, batch_size, cell, **in_clip) if cell_clip is not None else None
        hidden_in_clip = torch.empty(steps, batch_size, output_dim, **in_clip) if proj_clip is not None else None
        for step in range(steps):
            step_gates = gates[step].addmm_(hidden_states[step], recurrent_kernel)
            in_gate, forget_gate, cell_input, out_gate = step_gates.split(cell, dim=-1)
            forget_gate.add_(forget_bias)
            step_gates[:, : 2 * cell].sigmoid_()
            cell_input.tanh_()
            out_gate.sigmoid_()
            new_memory = in_gate * cell_input + forget_gate * memory_states[step]
            if cell_clip is not None:
                torch.le(new_memory.abs(), cell_clip, out=memory_in_clip[step])
                new_memory.clamp_(-cell_clip, cell_clip)
            new_hidden = out_gate * new_memory.tanh()
            if projection_kernel is not None:
                new_hidden = new_hidden @ projection_kernel
            if proj_clip is not None:
                torch.le(new_hidden.abs(), proj_clip, out=hidden_in_clip[step])
                new_hidden.clamp_(-proj_clip, proj_clip)
            step_valid = valid[step]
            torch.where(step_valid, new_hidden, hidden_states[step], out=hidden_states[step + 1])
            torch.where(step_valid, new_memory, memory_states[step], out=memory_states[step + 1])
            outputs[:, step] = torch.where(step_valid, new_hidden, 0.0)
        ctx.save_for_backward(
            inputs,
            mask,
            input_kernel,
            recurrent_kernel,
            projection_kernel,
            gates,
            hidden_states,
            memory_states,
            memory_in_clip,
            hidden_in_clip,
        )
        return outputs, hidden_states[steps].clone(), memory_states[steps].clone()

    @staticmethod
    @torch.autograd.function.once_differentiable
    def backward(ctx, outputs_grad: torch.Tensor, hidden_grad: torch.Tensor, memory_grad: torch.Tensor):
        """The gradients of the inputs, the initial state and the parameters; None for the other arguments."""
        (
            inputs,
            mask,
            input_kernel,
            recurrent_kernel,
            projection_kernel,
            gates,
            hidden_states,
            memory_states,
            memory_in_clip,
            hidden_in_clip,
        ) = ctx.saved_tensors
        steps, batch_size, _ = gates.shape
        cell = memory_states.shape[-1]
        valid = mask.t()[..., None]
        gates_grad = torch.empty_like(gates)  # (steps, batch, 4 * cell), zero at invalid steps
        if projection_kernel is not None:
            # The projection's inputs and its output's gradient at every step, for its gradient in one product.
            cell_outputs = memory_states.new_empty(steps, batch_size, cell)
            projected_grad = hidden_states.new_empty(steps, batch_size, projection_kernel.shape[1])
        for step in reversed(range(steps)):
            step_valid = valid[step]
            in_gate, forget_gate, cell_input, out_gate = gates[step].split(cell, dim=-1)
            in_grad, forget_grad, cell_input_grad, out_grad = gates_grad[step].split(cell, dim=-1)
            # `hidden_grad` and `memory_grad` hold the gradient of the state after this step.
            new_hidden_grad = torch.where(step_valid, hidden_grad + outputs_grad[:, step], 0.0)
            if hidden_in_clip is not None:
                new_hidden_grad.mul_(hidden_in_clip[step])
            memory_tanh = memory_states[step + 1].tanh()
            if projection_kernel is not None:
                projected_grad[step] = new_hidden_grad
                torch.mul(out_gate, memory_tanh, out=cell_outputs[step])
                # `kernel @ grad^T` rather than `grad @ kernel^T`, here and for the recurrent kernel: at a small
                # batch, CPU BLAS runs it two to three times faster.
                cell_output_grad = (projection_kernel @ new_hidden_grad.t()).t()
            else:
                cell_output_grad = new_hidden_grad
            torch.mul(cell_output_grad, memory_tanh, out=out_grad).mul_(out_gate).mul_(1.0 - out_gate)
            new_memory_grad = torch.where(step_valid, memory_grad, 0.0).addcmul_(
                cell_output_grad * out_gate, 1.0 - memory_tanh.square()
            )
            if memory_in_clip is not None:
                new_memory_grad.mul_(memory_in_clip[step])
            torch.mul(new_memory_grad, cell_input, out=in_grad).mul_(in_gate).mul_(1.0 - in_gate)
            torch.mul(new_memory_grad, memory_states[step], out=forget_grad).mul_(forget_gate).mul_(1.0 - forget_gate)
            torch.mul(new_memory_grad, in_gate, out=cell_input_grad).mul_(1.0 - cell_input.square())
            # Rows at invalid steps have no gate gradient: their state's gradient is carried to the earlier step.
            hidden_grad = torch.where(step_valid, (recurrent_kernel @ gates_grad[step].t()).t(), hidden_grad)
            memory_grad = torch.where(step_valid, new_memory_grad * forget_gate, memory_grad)

        needs_grad = ctx.needs_input_grad
        flat_gates_grad = gates_grad.view(steps * batch_size, -1)
        inputs_grad = input_kernel_grad = recurrent_kernel_grad = bias_grad = projection_kernel_grad = None
        if needs_grad[0]:
            inputs_grad = (flat_gates_grad @ input_kernel.t()).view(steps, batch_size, -1).transpose(0, 1)
        if needs_grad[4]:
            input_kernel_grad = inputs.transpose(0, 1).reshape(steps * batch_size, -1).t() @ flat_gates_grad
        if needs_grad[5]:
            recurrent_kernel_grad = hidden_states[:steps].view(steps * batch_size, -1).t() @ flat_gates_grad
        if needs_grad[6]:
            bias_grad = flat_gates_grad.sum(dim=0)
        if needs_grad[7]:
            projection_kernel_grad = cell_outputs.view(steps * batch_size, cell).t() @ projected_grad.flatten(0, 1)
        return (
            inputs_grad,
            None,
            hidden_grad,
            memory_grad,
            input_kernel_grad,
            recurrent_kernel_grad,
            bias_grad,
            projection_kernel_grad,
            None,
            None,
            None,
        )
