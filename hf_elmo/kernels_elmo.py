"""
The fast kernels of ELMo beside its reference code in `modeling_elmo.py`, and the one place that picks between them.

Each module that has a kernel ([`ElmoLstmLayer`], [`ElmoCharConvolution`]) asks [`dispatch`] for the function to run
on every call and runs it on itself, inside its own `forward`: what hooks do around a module call (accelerate's
`device_map` and offloading load the weights and move the inputs) is done before any kernel reads the weights.

- inference (nothing needs gradients): the recurrence in place without autograd ([`lstm_layer_in_place`]), its
  matrix products on CPU from the library `config.cpu_matmul` names or this machine measured fastest
  ([`step_products`]), and the character convolutions as matrix products ([`max_pooled_by_matmul`]);
- training the biLM: the reference recurrence's results from [`ElmoLstmLayerFunction`], whose backward through time
  is written by hand, a layer's two directions in one call that runs them at once ([`trains_directions_together`]);
- `config.recurrence_implementation == "reference"`, autocast (which picks each operation's dtype), `torch.compile`
  and `torch.export`: the reference code only.
"""

import concurrent.futures
import functools
import itertools
import json
import os
import platform
import tempfile
import time
import warnings
import weakref
from collections.abc import Callable, Iterable, Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any, NamedTuple

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
_prepared: dict[int, tuple[tuple[int, int, float], dict[str, Product]]] = {}


def prepared_products(kernel: torch.Tensor, libraries: set[str]) -> dict[str, Product]:
    """
    `PRODUCTS[library]` of `kernel` for each of `libraries`. Copies (prepacked, quantised) are made once and again
    only after the kernel is written to or replaced; torch's own product reads the kernel itself.
    """
    if libraries == {"blas"}:
        return {"blas": blas_product(kernel.detach())}
    # The version counter alone misses writes: fused optimizers (the Trainer's default AdamW) and `.data` update a
    # tensor in place without bumping it, and a stale copy would silently keep the old weights. The sum catches them;
    # it reads the kernel once per call, where every step of the recurrence reads it again.
    identity = (kernel.data_ptr(), kernel._version, kernel.detach().sum().item())
    cached = _prepared.get(id(kernel))
    if cached is None:
        weakref.finalize(kernel, _prepared.pop, id(kernel), None)
    if cached is None or cached[0] != identity:
        cached = _prepared[id(kernel)] = (identity, {})
    products = cached[1]
    for library in libraries - products.keys():
        products[library] = PRODUCTS[library](kernel.detach())
    return products


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


def step_products(
    module: nn.Module, kernel: torch.Tensor, row_counts: Iterable[int], quantizable: bool = True
) -> dict[int, Product]:
    """
    For each of `row_counts`, the product `(rows, in) @ kernel` of the fast recurrence of `module`, by the library its
    `config.cpu_matmul` names ("auto": the float32 library measured fastest here for that shape). Off the CPU, or for
    kernels in another precision than float32, torch's own (`"blas"`): the choices are CPU float32 libraries.

    "int8" quantises only `quantizable` products: inference's recurrent and projection products, whose weights are
    streamed again at every step. The input products, one per chunk of steps, stay float32: they are a small share of
    the time where int8 pays (small batches), and most of its error (the inputs of a whole chunk share one scale).
    Training's products are never quantised: int8 is an inference mode.
    """
    libraries = {rows: step_library(module, kernel, rows, quantizable) for rows in row_counts}
    products = prepared_products(kernel, set(libraries.values()))
    return {rows: products[library] for rows, library in libraries.items()}


def step_library(module: nn.Module, kernel: torch.Tensor, rows: int, quantizable: bool) -> str:
    """The library of [`step_products`] for `rows` rows."""
    choice = module.config.cpu_matmul
    if kernel.device.type != "cpu" or kernel.dtype != torch.float32:
        if choice in ("onednn", "int8"):
            raise ValueError(
                f"cpu_matmul={choice!r} runs float32 kernels on the CPU; this model's are "
                f"{kernel.dtype} on {kernel.device.type}: set cpu_matmul='auto'"
            )
        return "blas"
    if choice == "onednn" and not torch.backends.mkldnn.is_available():
        raise ValueError("cpu_matmul='onednn' needs a torch built with oneDNN (mkldnn); set cpu_matmul='auto'")
    if choice == "auto" or (choice == "int8" and not quantizable):
        return fastest_float32_library(*kernel.shape, row_bucket(rows))
    return choice


# ---------------------------------------------------------------------------------------------------------------------
# LSTM layer: in place for inference, with a hand-written backward for training
# ---------------------------------------------------------------------------------------------------------------------


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
        """The layout of `mask` `(batch, steps)`, each row's valid steps first."""
        order = torch.argsort(mask.sum(dim=1), descending=True, stable=True)
        sorted_mask = mask[order].t()  # (steps, batch): time-major
        step, row = sorted_mask.nonzero(as_tuple=True)
        running = [rows for rows in sorted_mask.sum(dim=1).tolist() if rows > 0]
        positions = order[row] * mask.shape[1] + step
        return cls(order, positions, running, [0, *itertools.accumulate(running)], tuple(mask.shape))

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
    for when nothing needs gradients. Arguments and results as `ElmoLstmLayer.forward`.

    The steps run on the valid positions alone ([`PackedSteps`]). Their input gates come `GATE_CHUNK_ROWS` packed
    rows at a time, from one matrix product (when `module.reads_word_vectors`, a copy from the gates of the distinct
    rows, each projected once); each step adds its recurrent product to its slice of those input gates and does the
    gate arithmetic there, in place.
    """
    batch_size = inputs.shape[0]
    cell, cell_clip, proj_clip = module.cell_dim, module.cell_clip, module.proj_clip
    projection_kernel = module.projection_kernel
    layout = PackedSteps.of(mask)
    order, running, step_starts = layout.order, layout.running, layout.starts
    chunks = gate_chunks(step_starts, GATE_CHUNK_ROWS)

    packed_inputs = layout.pack(inputs)
    if module.reads_word_vectors:
        # Context-free word vectors, one row per occurrence of a word: project each distinct row once and copy its
        # gates to every position holding it.
        distinct, positions = torch.unique(packed_inputs, dim=0, return_inverse=True)
        distinct_gates = distinct.new_empty(len(distinct), 4 * cell)
        step_products(module, module.input_kernel, [len(distinct)], False)[len(distinct)](
            distinct, distinct_gates, False
        )

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
    # Each step's two products by row count (rows fall as sentences end), and each chunk's input product by its rows,
    # looked up once per call.
    recurrent_products = step_products(module, module.recurrent_kernel, set(running))
    if projection_kernel is not None:
        projection_products = step_products(module, projection_kernel, set(running))
    if not module.reads_word_vectors:
        chunk_rows = {step_starts[end] - step_starts[first] for first, end in chunks}
        input_products = step_products(module, module.input_kernel, chunk_rows, False)
    for first_step, end_step in chunks:
        chunk = slice(step_starts[first_step], step_starts[end_step])
        chunk_gates = chunk_buffer[: chunk.stop - chunk.start]
        if module.reads_word_vectors:
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


def lstm_layer_with_handwritten_backward(
    module: nn.Module, inputs: torch.Tensor, mask: torch.Tensor, hidden: torch.Tensor, memory: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """The results of the reference recurrence of `module` (an `ElmoLstmLayer`) from [`ElmoLstmLayerFunction`]."""
    return lstm_layers_with_handwritten_backward([module], [inputs], mask, [hidden], [memory])[0]


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
    [`ElmoLstmLayerFunction`], so that its backward can run the directions at once too ([`run_directions`]).
    """

    def float32_products(module: nn.Module) -> Callable[[torch.Tensor, Iterable[int]], dict[int, Product]]:
        return lambda kernel, row_counts: step_products(module, kernel, row_counts, quantizable=False)

    tensors = []
    for module, *direction in zip(modules, inputs, hidden, memory, strict=True):
        tensors += [*direction, module.input_kernel, module.recurrent_kernel, module.bias, module.projection_kernel]
    results = ElmoLstmLayerFunction.apply(
        [float32_products(module) for module in modules],
        [(module.cell_clip, module.proj_clip, module.config.forget_bias) for module in modules],
        mask,
        *tensors,
    )
    return [results[index : index + 3] for index in range(0, len(results), 3)]


# Threads that run a layer's two directions at once ([`run_directions`]); made on first use, and again in a forked
# child, which inherits none of its parent's threads.
_direction_threads: ThreadPoolExecutor | None = None


def _forget_direction_threads() -> None:
    global _direction_threads
    _direction_threads = None


os.register_at_fork(after_in_child=_forget_direction_threads)


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
    if _direction_threads is None:
        _direction_threads = ThreadPoolExecutor(len(tasks), thread_name_prefix="hf_elmo-direction")
    futures = [_direction_threads.submit(_run_on_threads, task, threads // 2) for task in tasks]
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
    cell_outputs: torch.Tensor  # (positions, cell_dim): what the projection multiplies


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
        settings: Sequence[tuple[float | None, float | None, float]],
        mask: torch.Tensor,
        *tensors: torch.Tensor | None,
    ) -> tuple[torch.Tensor, ...]:
        """
        For each direction, `products(kernel, row_counts)`, which gives for each row count the function multiplying
        `(rows, in) @ kernel` ([`step_products`]), and its `settings`: the clips of the memory and of the output and
        the forget bias; `mask` `(batch, steps)`; then for each direction in turn its `DIRECTION_TENSORS`: the
        arguments as `ElmoLstmLayer.forward` takes them and the layer's parameters (`projection_kernel` may be None).
        Returns for each direction in turn its outputs `(batch, steps, output_dim)`, zero at invalid steps, and its
        final `hidden` and `memory`.
        """
        per_direction = len(DIRECTION_TENSORS)
        directions = [tensors[index : index + per_direction] for index in range(0, len(tensors), per_direction)]
        layout = PackedSteps.of(mask)  # one mask (the backward direction reads reversed rows), one layout for all
        runs = run_directions(
            [
                functools.partial(layer_forward, direction_products, direction_settings, layout, *direction)
                for direction_products, direction_settings, direction in zip(
                    products, settings, directions, strict=True
                )
            ],
            mask.device,
        )
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
        return None, None, None, *(grad for grads in run_directions(tasks, saved[0].device) for grad in grads)


def layer_forward(
    products: Callable[[torch.Tensor, Iterable[int]], dict[int, Product]],
    settings: tuple[float | None, float | None, float],
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
    cell_clip, proj_clip, forget_bias = settings
    cell = memory.shape[-1]
    gate_bias = bias.clone()
    gate_bias[cell : 2 * cell] += forget_bias
    packed_inputs = layout.pack(inputs)
    # (positions, 4 * cell): the input gates of every position in one product, activated in place step by step.
    gates = torch.addmm(gate_bias, packed_inputs, input_kernel)
    positions = len(gates)
    initial_hidden, initial_memory = hidden[layout.order], memory[layout.order]
    output_dim = cell if projection_kernel is None else projection_kernel.shape[1]
    # The state after each position; before each clip too, where there is one, for the clip's gradient.
    packed_hidden, packed_memory = inputs.new_empty(positions, output_dim), inputs.new_empty(positions, cell)
    unclipped_hidden = inputs.new_empty(positions, output_dim) if proj_clip is not None else packed_hidden
    unclipped_memory = inputs.new_empty(positions, cell) if cell_clip is not None else packed_memory
    memory_tanh = inputs.new_empty(positions, cell)
    cell_outputs = inputs.new_empty(positions, cell) if projection_kernel is not None else unclipped_hidden
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
    hidden_clip_passes = (unclipped_hidden == packed_hidden).to(inputs.dtype) if proj_clip is not None else None
    memory_clip_passes = (unclipped_memory == packed_memory).to(inputs.dtype) if cell_clip is not None else None
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
    settings: tuple[float | None, float | None, float],
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
    cell_clip, proj_clip, _ = settings
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
    if needs_grad[0]:
        inputs_grad = layout.unpack(gates_grad @ saved.input_kernel.t())
    if needs_grad[3]:
        input_kernel_grad = saved.packed_inputs.t() @ gates_grad
    if needs_grad[4]:
        # The state each position's step read: the initial one at step 0, else the row's output a step before.
        previous_hidden = torch.cat([saved.initial_hidden[:first_rows], saved.packed_hidden[layout.previous_rows()]])
        recurrent_kernel_grad = previous_hidden.t() @ gates_grad
    if needs_grad[5]:
        bias_grad = gates_grad.sum(dim=0)
    if needs_grad[6]:
        projection_kernel_grad = saved.cell_outputs.t() @ new_hidden_grads
    return (
        inputs_grad,
        hidden_grad[restore],
        memory_grad[restore],
        input_kernel_grad,
        recurrent_kernel_grad,
        bias_grad,
        projection_kernel_grad,
    )
