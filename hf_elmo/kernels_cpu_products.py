"""
The matrix products of the fast recurrences (`kernels_lstm_inference`, `kernels_lstm_training`): for each kernel and
row count, the library that multiplies fastest on this machine, measured once per CPU model, thread count, torch
version and shape and kept in a cache file ([`choices_file`]); int8 where `config.cpu_matmul` asks for it; and
autocast's dtype under mixed precision, on any device.

A product is a function `(x, out, accumulate)` writing `x @ kernel` into `out` (or adding it); the libraries are
torch's own `mm` ("blas"), oneDNN's linear on a prepacked copy of the kernel ("onednn"), PyTorch's dynamic int8
quantisation ("int8", inference only), and in bfloat16 or float16 what autocast would run, `mm` ("bfloat16",
"float16") or on the CPU oneDNN's linear ("onednn-bfloat16"), whichever is faster for the shape. Prepacked,
quantised and half-precision copies are made once per kernel and again only after its weights change
([`prepared_products`]).
"""

import contextlib
import functools
import json
import os
import platform
import tempfile
import time
import warnings
import weakref
from collections.abc import Callable, Iterable
from pathlib import Path

import torch
from torch import nn

from .errors import json_object_or_none

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


def onednn_product(kernel: torch.Tensor, dtype: torch.dtype = torch.float32) -> Product:
    """
    oneDNN's linear on a copy of the kernel in `dtype` prepacked in its own layout (as `torch.compile` does on CPU);
    in bfloat16, the product rounded to it as autocast's would be, then written or added in `out`'s precision.
    """
    packed = torch.ops.mkldnn._reorder_linear_weight(kernel.t().contiguous().to(dtype))

    def product(x: torch.Tensor, out: torch.Tensor, accumulate: bool) -> None:
        result = torch.ops.mkldnn._linear_pointwise(x.to(dtype), packed, None, "none", [], "")
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


def half_precision_product(kernel: torch.Tensor, dtype: torch.dtype) -> Product:
    """
    Mixed precision, as autocast runs a matmul: `x` and a copy of the kernel in `dtype` (bfloat16 or float16), their
    product rounded to `dtype`, then written into `out` or added to it in `out`'s own precision (float32).
    """
    half_kernel = kernel.to(dtype)

    def product(x: torch.Tensor, out: torch.Tensor, accumulate: bool) -> None:
        result = torch.mm(x.to(dtype), half_kernel)
        out.add_(result) if accumulate else out.copy_(result)

    return product


PRODUCTS = {
    "blas": blas_product,
    "onednn": onednn_product,
    "int8": int8_product,
    "bfloat16": functools.partial(half_precision_product, dtype=torch.bfloat16),
    "onednn-bfloat16": functools.partial(onednn_product, dtype=torch.bfloat16),
    "float16": functools.partial(half_precision_product, dtype=torch.float16),
}


def autocast_dtype(device: torch.device) -> torch.dtype | None:
    """
    The dtype autocast runs matrix products in on `device` in this thread, or None outside autocast. Read where a
    kernel is called: autocast's state belongs to the thread, and the kernels' worker threads and backward do not
    see it. None too on a device autocast has no kernels for (`meta`), where asking would raise.
    """
    if not torch.amp.is_autocast_available(device.type):
        return None
    return torch.get_autocast_dtype(device.type) if torch.is_autocast_enabled(device.type) else None


def without_autocast(device: torch.device) -> contextlib.AbstractContextManager:
    """Autocast turned off on `device` inside the block; nothing to turn off where autocast has no kernels."""
    return (
        torch.autocast(device.type, enabled=False)
        if torch.amp.is_autocast_available(device.type)
        else contextlib.nullcontext()
    )


def mixed_mm(a: torch.Tensor, b: torch.Tensor, dtype: torch.dtype | None, bias: torch.Tensor | None = None):
    """
    `a @ b` (plus `bias`, where given) in float32; under mixed precision (`dtype`), the product as autocast computes
    it, in `dtype`, then widened to float32 as the bias is added.
    """
    if dtype is None:
        return a @ b if bias is None else torch.addmm(bias, a, b)
    # Widened first, then the bias added in float32: a sum across dtypes takes a slower path than the two passes.
    product = torch.mm(a.to(dtype), b.to(dtype)).float()
    return product if bias is None else product.add_(bias)


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


# The libraries measured against each other for the products of each dtype: torch's own, and oneDNN's prepacked.
CANDIDATES = {torch.float32: ("blas", "onednn"), torch.bfloat16: ("bfloat16", "onednn-bfloat16")}


def fastest_library(in_dim: int, out_dim: int, rows: int, dtype: torch.dtype = torch.float32) -> str:
    """
    Of the `CANDIDATES` for products in `dtype` (float32 or bfloat16), torch's own or oneDNN's, whichever multiplies
    `(rows, in_dim) @ (in_dim, out_dim)` faster here, from the choices file if this CPU model, thread count, torch
    version, shape and dtype are in it; else timed now, on a random kernel, and added to the file. oneDNN must be 5%
    faster to be chosen: in float32 its prepacked copy costs memory (in bfloat16 either takes a copy). A file that
    cannot be read or written only means measuring again.
    """
    global _choices
    path = choices_file()
    if _choices is None:
        _choices = json_object_or_none(path) or {}
    key = (
        f"{cpu_model()} | torch {torch.__version__} | {torch.get_num_threads()} threads | "
        f"({rows}, {in_dim}) @ ({in_dim}, {out_dim})" + ("" if dtype == torch.float32 else f" | {dtype}")
    )
    own, onednn = CANDIDATES[dtype]
    if _choices.get(key) not in (own, onednn):  # not measured yet, or not a choice of these (a damaged file)
        if not torch.backends.mkldnn.is_available():
            _choices[key] = own
        else:
            generator = torch.Generator().manual_seed(0)
            kernel = torch.randn(in_dim, out_dim, generator=generator) / in_dim**0.5
            x, out = torch.randn(rows, in_dim, generator=generator), torch.zeros(rows, out_dim)
            own_time, onednn_time = (time_product(PRODUCTS[name](kernel), x, out) for name in (own, onednn))
            _choices[key] = onednn if onednn_time < 0.95 * own_time else own
        try:  # written whole, then renamed: a reader never sees half a file
            path.parent.mkdir(parents=True, exist_ok=True)
            with tempfile.NamedTemporaryFile("w", dir=path.parent, suffix=".tmp", delete=False) as handle:
                json.dump(_choices, handle, indent=1, sort_keys=True)
            os.replace(handle.name, path)
        except OSError:
            pass
    return _choices[key]


def step_products(
    module: nn.Module,
    kernel: torch.Tensor,
    row_counts: Iterable[int],
    quantizable: bool = True,
    compute_dtype: torch.dtype | None = None,
) -> dict[int, Product]:
    """
    For each of `row_counts`, the product `(rows, in) @ kernel` of the fast recurrence of `module`, by the library its
    `config.cpu_matmul` names ("auto": the float32 library measured fastest here for that shape). Off the CPU, or for
    kernels in another precision than float32, torch's own ("blas"): the choices are CPU float32 libraries. Under
    mixed precision (`compute_dtype`, autocast's dtype where the caller runs under autocast), every product of a
    float32 kernel is taken in that dtype, on any device and whatever `cpu_matmul` says, as autocast would.

    "int8" quantises only `quantizable` products: inference's recurrent and projection products, whose weights are
    streamed again at every step. The input products, one per chunk of steps, stay float32: they are a small share of
    the time where int8 pays (small batches), and most of its error (the inputs of a whole chunk share one scale).
    Training's products are never quantised: int8 is an inference mode.
    """
    libraries = {rows: step_library(module, kernel, rows, quantizable, compute_dtype) for rows in row_counts}
    products = prepared_products(kernel, set(libraries.values()))
    return {rows: products[library] for rows, library in libraries.items()}


def step_library(
    module: nn.Module, kernel: torch.Tensor, rows: int, quantizable: bool, compute_dtype: torch.dtype | None
) -> str:
    """
    The library of [`step_products`] for `rows` rows. An internal of the CPU kernels, not a second chooser of paths:
    `kernels_elmo.choose_path` has chosen the kernel, and this picks how that kernel multiplies on this machine (a
    kernel registered for another device in `kernels_elmo` takes its own products and never asks).
    """
    if compute_dtype is not None and kernel.dtype == torch.float32:
        if kernel.device.type == "cpu" and compute_dtype in CANDIDATES:
            return fastest_library(*kernel.shape, row_bucket(rows), compute_dtype)
        return str(compute_dtype).removeprefix("torch.")
    choice = module.config.cpu_matmul
    if kernel.device.type != "cpu" or kernel.dtype != torch.float32:
        if choice == "int8":
            raise ValueError(
                f"cpu_matmul='int8' runs float32 kernels on the CPU; this model's are "
                f"{kernel.dtype} on {kernel.device.type}: set cpu_matmul='auto'"
            )
        return "blas"
    if choice == "int8" and quantizable:
        return "int8"
    return fastest_library(*kernel.shape, row_bucket(rows))
