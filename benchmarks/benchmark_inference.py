"""Words per second of ELMo inference from words, AllenNLP 2.10 beside each hf_elmo path, on one random checkpoint.

Prints one markdown table: throughput at each batch size (1 and 32 by default), the ratio to AllenNLP, the top
layer's max |diff| against hf_elmo's exact path and against AllenNLP, its minimum cosine with hf_elmo's exact path in
float32, and the peak memory one call added (resident memory on the CPU, allocated GPU memory on CUDA). The paths
take turns batch by batch on the same sentences, so that load from other processes falls on all of them alike.
On the CPU it also runs the opt-in int8 products (`cpu_matmul="int8"`) and the fast path under bfloat16 autocast
(mixed precision, as `--bf16` runs a model), and prints this machine's float32 and bfloat16 GEMM peaks and the share
of its dtype's peak each fast hf_elmo row uses (the floating-point operations it executes per second). A CPU without
bfloat16 instructions (avx512_bf16 or amx_bf16) is named as such: its bfloat16 row has no goal there.

    PYTHONPATH=$PWD:/tmp/allennlp_site:../shared/peer python benchmarks/benchmark_inference.py
    ... benchmarks/benchmark_inference.py --device cuda --dtype bf16 --batches 1:32,64:1024,256:2048

`--dtype` sets hf_elmo's weights and compute (`tf32`: float32 weights, TensorFloat-32 products on CUDA, which also
apply to AllenNLP); AllenNLP always runs in float32.

AllenNLP is optional (see ../shared/peer/README.md); without it its rows and columns are left out.
"""

import argparse
import copy
import os
import tempfile
import time
from pathlib import Path

import torch
from common import PeakRss, cpu_has_bfloat16, make_sentences, write_random_original_checkpoint

from hf_elmo import ElmoConfig, ElmoTokenizer
from hf_elmo.conversion_original import load_original
from hf_elmo.kernels_cpu_products import cpu_model


def load_allennlp(options_file: Path, weight_file: Path):
    """AllenNLP's `Elmo` on the same files, or None when AllenNLP is not importable."""
    # The shim first (../shared/peer/README.md): it stands in for AllenNLP's heavy, unused dependencies, and imported
    # after allennlp it came too late where those are not installed, leaving the peer out of the run without a word.
    try:
        # isort: off
        import allennlp_shim  # noqa: F401
        import allennlp.modules.elmo as allennlp_elmo
        import allennlp.modules.elmo_lstm as allennlp_elmo_lstm

        # isort: on
    except ImportError:
        return None
    allennlp_elmo.cached_path = allennlp_elmo_lstm.cached_path = str
    elmo = allennlp_elmo.Elmo(str(options_file), str(weight_file), num_output_representations=1, dropout=0.0)
    return elmo.eval(), allennlp_elmo.batch_to_ids


DTYPES = {"fp32": torch.float32, "tf32": torch.float32, "bf16": torch.bfloat16, "fp16": torch.float16}
BFLOAT16_AUTOCAST = "hf_elmo fast, bf16 autocast (mixed precision)"
# The dtypes whose GEMM peak the CPU rows are measured against.
PEAK_DTYPES = (torch.float32, torch.bfloat16)


def finished(device: torch.device) -> float:
    """The time once all work queued on `device` is done (CUDA runs asynchronously)."""
    if device.type == "cuda":
        torch.cuda.synchronize(device)
    return time.perf_counter()


def hf_elmo_path(
    model, tokenizer, recurrence_implementation: str, cpu_matmul: str = "auto", autocast: torch.dtype | None = None
):
    """
    From words to `(seconds, float32 CPU top layer with boundary rows, mask)` with hf_elmo under
    `recurrence_implementation` ("reference": the exact reference code; "auto": the fast kernels) and `cpu_matmul`,
    under autocast to `autocast` where given.
    """

    def run(batch):
        model.config.recurrence_implementation = recurrence_implementation
        model.config.cpu_matmul = cpu_matmul
        began = finished(model.device)
        encoded = tokenizer(batch, is_split_into_words=True, padding=True, return_tensors="pt").to(model.device)
        with torch.autocast(model.device.type, dtype=autocast, enabled=autocast is not None):
            output = model(input_ids=encoded["input_ids"], attention_mask=encoded["attention_mask"])
        seconds = finished(model.device) - began
        return seconds, output.last_hidden_state.float().cpu(), encoded["attention_mask"].bool().cpu()

    return run


def allennlp_path(elmo, batch_to_ids, device: torch.device):
    """
    From words to `(seconds, float32 CPU top layer with boundary rows, mask)` with AllenNLP's `Elmo` (timed: what its
    users run), then its biLM again, untimed, for the top layer; the LSTM state is reset before each call.
    """
    bilm = elmo._elmo_lstm

    def run(batch):
        bilm._elmo_lstm.reset_states()
        began = finished(device)
        elmo(batch_to_ids(batch).to(device))
        seconds = finished(device) - began
        bilm._elmo_lstm.reset_states()
        output = bilm(batch_to_ids(batch).to(device))
        return seconds, output["activations"][-1].float().cpu(), output["mask"].bool().cpu()

    return run


class PeakCudaMemory:
    """Like `PeakRss` for the GPU: `delta` is the peak of allocated CUDA memory above entry."""

    def __init__(self, device: torch.device):
        self.device = device

    def __enter__(self):
        torch.cuda.reset_peak_memory_stats(self.device)
        self.start = torch.cuda.memory_allocated(self.device)
        return self

    def __exit__(self, *exc):
        self.delta = torch.cuda.max_memory_allocated(self.device) - self.start


def measure(paths, sentences, batch_size, device: torch.device):
    """
    Runs every path on each batch of `sentences` in turn (the order rotating from batch to batch, so that load from
    other processes falls on all paths alike); returns, per path, timed seconds, the largest peak memory added by one
    call, and `[(top layer, mask)]`.
    """
    results = {name: [0.0, 0, []] for name in paths}
    for turn, start in enumerate(range(0, len(sentences), batch_size)):
        names = list(paths)
        for name in names[turn % len(names) :] + names[: turn % len(names)]:
            with PeakCudaMemory(device) if device.type == "cuda" else PeakRss() as peak:
                seconds, top, mask = paths[name](sentences[start : start + batch_size])
            results[name][0] += seconds
            results[name][1] = max(results[name][1], peak.delta)
            results[name][2].append((top, mask))
    return results


def max_diff(outputs, reference) -> float:
    worst = 0.0
    for (top, mask), (reference_top, reference_mask) in zip(outputs, reference):
        if not torch.equal(mask, reference_mask):
            raise RuntimeError("paths disagree on the mask")
        worst = max(worst, (top - reference_top)[mask].abs().max().item())
    return worst


def min_cosine(outputs, reference) -> float:
    """The smallest cosine between a position's top-layer vector and the reference's, over unmasked positions."""
    worst = 1.0
    for (top, mask), (reference_top, _) in zip(outputs, reference):
        worst = min(worst, torch.nn.functional.cosine_similarity(top[mask], reference_top[mask], dim=-1).min().item())
    return worst


def step_products_bound(model, batch_size: int, words_per_position: float, repeats: int = 200) -> float:
    """
    Words/s that no fp32 implementation on this machine can exceed at `batch_size`: the time of the two matrix
    products that every LSTM step must do with its own output (`hidden @ recurrent_kernel`, then the projection),
    timed alone with the weights hot in cache, times the `n_layers * 2` steps each position takes. Input
    projections, the character CNN and all gate arithmetic are left out, so real throughput is lower.
    """
    layer = model.bilm.forward_layers[0]
    hidden = torch.randn(batch_size, layer.recurrent_kernel.shape[0])
    cell_output = torch.randn(batch_size, layer.cell_dim)
    for _ in range(repeats // 10 + 1):  # warm the caches
        hidden @ layer.recurrent_kernel, cell_output @ layer.projection_kernel
    began = time.perf_counter()
    for _ in range(repeats):
        hidden @ layer.recurrent_kernel, cell_output @ layer.projection_kernel
    step_seconds = (time.perf_counter() - began) / repeats
    positions_per_second = batch_size / (step_seconds * 2 * model.config.n_layers)
    return positions_per_second * words_per_position


def gemm_peak(size: int = 2048, repeats: int = 10, dtype: torch.dtype = torch.float32) -> float:
    """This machine's GEMM peak in `dtype`, GFLOP/s: the best of `repeats` `(size, size) @ (size, size)` products."""
    a, b = torch.randn(size, size, dtype=dtype), torch.randn(size, size, dtype=dtype)
    a @ b
    best = float("inf")
    for _ in range(repeats):
        began = time.perf_counter()
        a @ b
        best = min(best, time.perf_counter() - began)
    return 2 * size**3 / best / 1e9


def model_flops(config: ElmoConfig, positions: int, distinct_words: int) -> float:
    """
    Floating-point operations that hf_elmo's fast path executes for a batch, as it runs them: the character encoder
    (convolutions, highways, projection) and the first LSTM layer's input products once per distinct word; every
    other LSTM product (recurrent, projection, later layers' inputs) at each valid position, both directions. Gate
    arithmetic is left out. Work the fast path skips is not counted, so this is the machine's use, not a credit.
    """
    cell, projection = config.cell_dim, config.projection_dim
    projected = projection < cell
    input_product = 2 * projection * 4 * cell
    step_products = 2 * (projection if projected else cell) * 4 * cell + (2 * cell * projection if projected else 0)
    chars = config.max_characters_per_token
    convolutions = sum(2 * config.char_embedding_dim * width * n * (chars - width + 1) for width, n in config.filters)
    encoder = convolutions + config.n_highway * 4 * config.n_filters**2 + 2 * config.n_filters * projection
    per_direction = positions * (config.n_layers * step_products + (config.n_layers - 1) * input_product)
    return 2 * per_direction + distinct_words * (encoder + 2 * input_product)


def parse_batches(text: str) -> list[tuple[int, int]]:
    """`"1:8,32:96"` -> `[(1, 8), (32, 96)]`: batch sizes and how many sentences each runs."""
    try:
        return [(int(size), int(count)) for size, count in (item.split(":") for item in text.split(","))]
    except ValueError as error:
        raise argparse.ArgumentTypeError(f"expected SIZE:SENTENCES[,...], got {text!r}") from error


def add_batches_argument(parser: argparse.ArgumentParser) -> None:
    """`--batches SIZE:SENTENCES,...`, the runs of both inference benchmarks."""
    parser.add_argument(
        "--batches",
        type=parse_batches,
        default=parse_batches("1:8,32:96"),
        help="batch sizes and the sentences each runs, SIZE:SENTENCES,... (default 1:8,32:96)",
    )


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    add_batches_argument(parser)
    parser.add_argument("--device", default="cpu", help="torch device (default cpu)")
    parser.add_argument("--dtype", choices=sorted(DTYPES), default="fp32", help="hf_elmo's precision (default fp32)")
    parser.add_argument("--no-allennlp", action="store_true", help="leave AllenNLP out even where it is importable")
    parser.add_argument("--checkpoint-dir", type=Path, default=Path(tempfile.gettempdir()) / "hf_elmo_bench_ckpt")
    parser.add_argument("--threads", type=int, default=None, help="torch intra-op threads (default: torch's choice)")
    args = parser.parse_args()
    if args.threads is not None:
        torch.set_num_threads(args.threads)
    device = torch.device(args.device)
    if device.type == "cuda" and not torch.cuda.is_available():
        parser.error(f"--device {args.device}: CUDA is not available here")
    torch.backends.cuda.matmul.allow_tf32 = torch.backends.cudnn.allow_tf32 = args.dtype == "tf32"

    config = ElmoConfig()
    options_file, weight_file = write_random_original_checkpoint(args.checkpoint_dir, config)
    model = load_original(options_file, weight_file).eval().to(device)
    # The float32 exact path, TF32 off, is the reference of every row's cosine; a copy when the rows run in 16 bits.
    float32_model = model if DTYPES[args.dtype] == torch.float32 else copy.deepcopy(model)
    model = model.to(DTYPES[args.dtype])
    tokenizer = ElmoTokenizer(max_characters_per_token=config.max_characters_per_token)
    paths = {
        "hf_elmo exact (reference paths)": hf_elmo_path(model, tokenizer, "reference"),
        "hf_elmo fast (default)": hf_elmo_path(model, tokenizer, "auto"),
    }
    if device.type == "cpu" and DTYPES[args.dtype] == torch.float32:
        paths["hf_elmo fast, int8 products (opt-in)"] = hf_elmo_path(model, tokenizer, "auto", "int8")
        paths[BFLOAT16_AUTOCAST] = hf_elmo_path(model, tokenizer, "auto", autocast=torch.bfloat16)
    float32_exact = hf_elmo_path(float32_model, tokenizer, "reference")
    allennlp = None if args.no_allennlp else load_allennlp(options_file, weight_file)
    if allennlp is not None:
        paths = {"AllenNLP 2.10.1 Elmo": allennlp_path(allennlp[0].to(device), allennlp[1], device), **paths}

    load_before = f"{os.getloadavg()[0]:.2f}"
    # The peaks are taken before and after the paths, the better of the two: other processes' load lowers them.
    peaks_before = [gemm_peak(dtype=dtype) for dtype in PEAK_DTYPES] if device.type == "cpu" else None
    sentences = make_sentences(max(count for _, count in args.batches), seed=0)
    rows, bounds = [], {}
    with torch.inference_mode():
        for run in paths.values():  # warm-up: first-call allocations and library initialisation
            run(sentences[:2])
        for batch_size, count in args.batches:
            batch_sentences = sentences[:count]
            # This batch shape's one-time work before the timed runs: CUDA kernels and allocations, and on the
            # CPU the product libraries that `cpu_matmul="auto"` measures once per shape (kept in its cache file).
            for run in paths.values():
                run(batch_sentences[:batch_size])
            words = sum(len(sentence) for sentence in batch_sentences)
            positions = words + 2 * len(batch_sentences)  # with <S> and </S>
            flops = sum(
                model_flops(config, sum(len(s) + 2 for s in batch), len({w for s in batch for w in s}) + 2)
                for batch in (batch_sentences[i : i + batch_size] for i in range(0, count, batch_size))
            )
            if device.type == "cpu":
                bounds[batch_size] = step_products_bound(float32_model, batch_size, words / positions)
            results = measure(paths, batch_sentences, batch_size, device)
            exact = results["hf_elmo exact (reference paths)"][2]
            torch.backends.cuda.matmul.allow_tf32 = torch.backends.cudnn.allow_tf32 = False
            reference = [
                float32_exact(batch_sentences[start : start + batch_size])[1:] for start in range(0, count, batch_size)
            ]
            torch.backends.cuda.matmul.allow_tf32 = torch.backends.cudnn.allow_tf32 = args.dtype == "tf32"
            baseline = results.get("AllenNLP 2.10.1 Elmo")
            for name, (seconds, memory, outputs) in results.items():
                # Rows whose products run in one dtype at a known peak: the fast path in float32 and in bfloat16.
                peak_dtype = (
                    (torch.bfloat16 if name == BFLOAT16_AUTOCAST else torch.float32)
                    if device.type == "cpu"
                    and name.startswith("hf_elmo fast")
                    and "int8" not in name
                    and DTYPES[args.dtype] == torch.float32
                    else None
                )
                rows.append(
                    (
                        name,
                        batch_size,
                        count,
                        words / seconds,
                        f"{baseline[0] / seconds:.2f}x" if baseline else "-",
                        f"{max_diff(outputs, exact):.1e}",
                        f"{max_diff(outputs, baseline[2]):.1e}" if baseline else "-",
                        f"{min_cosine(outputs, reference):.5f}",
                        memory / 2**20,
                        (flops / seconds / 1e9, peak_dtype) if peak_dtype else None,
                    )
                )

    parameters = sum(p.numel() for p in model.parameters())
    hardware = (
        f"{torch.cuda.get_device_name(device)} (CUDA {torch.version.cuda})"
        if device.type == "cuda"
        else f"{cpu_model()}, {torch.get_num_threads()} threads"
    )
    print(f"load average before / after: {load_before} / {os.getloadavg()[0]:.2f} (other processes share these cores)")
    print(
        f"{hardware}, torch {torch.__version__}, hf_elmo in {args.dtype}, inference_mode; "
        f"random checkpoint of the original shapes ({parameters / 1e6:.1f}M parameters); ~25-word sentences; "
        f"end to end from words (tokenize + model)\n"
    )
    memory = "peak GPU memory added (MB)" if device.type == "cuda" else "peak RSS added (MB)"
    peaks = (
        dict(zip(PEAK_DTYPES, map(max, peaks_before, [gemm_peak(dtype=dtype) for dtype in PEAK_DTYPES])))
        if device.type == "cpu"
        else {}
    )
    if device.type == "cpu" and not cpu_has_bfloat16():
        print("this CPU has no bfloat16 instructions (avx512_bf16, amx_bf16): its bfloat16 rows have no goal here")
    print(
        "| path | batch | sentences | words/s | vs AllenNLP | max abs diff vs exact | max abs diff vs AllenNLP "
        f"| min cosine vs fp32 exact | {memory} | GFLOP/s (of the GEMM peak in its dtype) |"
    )
    print("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    for name, batch_size, count, speed, ratio, diff_exact, diff_allennlp, cosine, memory, compute in rows:
        if compute is not None and peaks:
            gflops, dtype = compute
            compute = f"{gflops:.0f} ({gflops / peaks[dtype]:.0%})"
        else:
            compute = "-"
        print(
            f"| {name} | {batch_size} | {count} | {speed:.1f} | {ratio} | {diff_exact} | {diff_allennlp} "
            f"| {cosine} | {memory:.0f} | {compute} |"
        )
    if peaks:
        print(
            f"\nGEMM peaks here: fp32 {peaks[torch.float32]:.0f}, bf16 {peaks[torch.bfloat16]:.0f} GFLOP/s (the best "
            f"(2048, 2048) @ (2048, 2048) torch.mm in each dtype on {torch.get_num_threads()} threads, before and "
            "after the paths); GFLOP/s counts the products the fast path executes (see model_flops)"
        )
    if bounds:
        print(
            "\nupper bound from the LSTM steps' recurrent and projection products alone (timed in this run, weights "
            "in cache; see step_products_bound): "
            + ", ".join(f"batch {size}: {bound:.0f} words/s" for size, bound in bounds.items())
        )


if __name__ == "__main__":
    main()
