"""Where the time of a pre-training step goes: a `torch.profiler` of hf_elmo's training steps at the shipped ko-nsmc
shape (`benchmark_pretrain.py`'s), its operators grouped by kind, beside the rate of its matrix products.

    PYTHONPATH=$PWD python benchmarks/pretrain_time_split.py --train-file outputs/nsmc/data/pretrain_train.txt \\
        --old-reviews-per-second 82.1 125.7

The steps are `hf-elmo pretrain`'s without the Trainer around them: batches of 256 reviews cut at 40 positions, the
loss's backward, the gradient clipped at norm 10, fused AdamW, with the memory kept as the command keeps it, and
without the Trainer's start (its DataLoader worker, the first batch), which its reviews/s include. Each thread count
times steps (the step time is the median); on one thread as many steps are then profiled, for the split (the profiler
does not follow the worker threads on which a layer's directions run with more). The profiler adds a cost per
operator: the split says which part bounds a step, the unprofiled time is the one to quote. Given the old path's
reviews/s per thread count (from `benchmark_pretrain.py`'s table), it prints the step time five times those would need
and what the products, at the machine's GEMM peak, would leave of it. With `--bf16`, the steps run under bfloat16
autocast (as `--bf16` trains), against the bfloat16 GEMM peak:

    PYTHONPATH=$PWD python benchmarks/pretrain_time_split.py --train-file outputs/nsmc/data/pretrain_train.txt --bf16
"""

import argparse
import random
import statistics
import tempfile
import time
from pathlib import Path

import torch
from benchmark_inference import gemm_peak
from benchmark_pretrain import SHAPES, shipped_tokenizer, training_gflop

from hf_elmo.kernels_cpu_products import cpu_model
from hf_elmo.modeling_elmo import ElmoForPreTraining
from hf_elmo.pretraining import ElmoPreTrainingCollator, ModelArguments, keep_freed_memory, model_config
from hf_elmo.text_files import read_sentences

# Operators by kind, matched on their names (the profiler's `aten::...`); anything else is "other arithmetic".
KINDS = {
    "matrix products": (
        "mm", "addmm", "addmm_", "bmm", "_linear_pointwise", "mkldnn_convolution", "convolution_backward",
    ),
    "sigmoid, tanh, exp, log": (
        "sigmoid", "sigmoid_", "tanh", "tanh_", "exp", "log", "_log_softmax", "_log_softmax_backward_data",
    ),
    "memory moves (copy, fill, index, gather, cat)": (
        "copy_", "fill_", "index", "index_select", "index_put_", "index_add_", "index_copy_", "gather",
        "scatter_add_", "cat", "embedding_dense_backward", "nonzero", "sort", "argsort",
    ),
    "optimizer and clipping": ("_fused_adamw_", "_foreach_norm", "_foreach_mul_", "_foreach_add_"),
}  # fmt: skip


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--train-file", required=True, help="the pre-training text (one review per line)")
    parser.add_argument("--threads", nargs="+", type=int, default=[1, 2])
    parser.add_argument("--old-reviews-per-second", nargs="+", type=float, help="the old path's, per --threads")
    parser.add_argument("--steps", type=int, default=8, help="steps timed, then as many profiled")
    parser.add_argument("--batch-size", type=int, default=256)
    parser.add_argument("--max-length", type=int, default=40)
    parser.add_argument("--bf16", action="store_true", help="the steps under bfloat16 autocast (mixed precision)")
    return parser.parse_args()


def kind_of(name: str) -> str:
    operator = name.split("::")[-1]
    return next((kind for kind, names in KINDS.items() if operator in names), "other arithmetic")


def main():
    args = parse_args()
    keep_freed_memory()
    with tempfile.TemporaryDirectory() as folder:
        tokenizer = shipped_tokenizer(args.train_file, Path(folder) / "tokenizer")
    lines = list(read_sentences([args.train_file]))
    rng = random.Random(0)
    collate = ElmoPreTrainingCollator(tokenizer, args.max_length)
    samples = [rng.sample(lines, args.batch_size) for _ in range(2 * args.steps)]
    batches = [collate([{"units": tokenizer.split_words(line)} for line in sample]) for sample in samples]
    positions = statistics.mean(int(batch["attention_mask"].sum()) for batch in batches)
    distinct = statistics.mean(len(torch.unique(b["input_ids"][b["attention_mask"].bool()], dim=0)) for b in batches)
    model_args = ModelArguments(**SHAPES["ko-nsmc"], max_characters_per_token=20, n_negative_samples=1024)
    torch.manual_seed(0)
    model = ElmoForPreTraining(model_config(model_args, tokenizer)).train()
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3, fused=True)
    gflop = training_gflop(model.config, positions, 2 * (positions - args.batch_size), distinct)

    def step(batch):
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=args.bf16):
            loss = model(**batch).loss
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 10.0)
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)

    precision = "bfloat16 autocast" if args.bf16 else "float32"
    print(f"CPU: {cpu_model()}; torch {torch.__version__}; batches of {args.batch_size} reviews, ko-nsmc shape")
    print(f"precision: {precision}")
    print(f"{positions / args.batch_size:.2f} real positions per review; {gflop:.1f} GFLOP of products per step\n")
    old_speeds = args.old_reviews_per_second or [None] * len(args.threads)
    for threads, old_speed in zip(args.threads, old_speeds, strict=True):
        torch.set_num_threads(threads)
        peak = gemm_peak(dtype=torch.bfloat16 if args.bf16 else torch.float32)
        for batch in batches[:2]:  # the product libraries are measured on first use
            step(batch)
        times = []
        for batch in batches[: args.steps]:
            began = time.perf_counter()
            step(batch)
            times.append(time.perf_counter() - began)
        wall = statistics.median(times)
        at_peak = gflop / peak
        print(f"{threads} thread(s): {wall * 1e3:.0f} ms a step ({args.batch_size / wall:.1f} reviews/s)")
        print(f"  the step's products at this machine's GEMM peak ({peak:.0f} GFLOP/s): {at_peak * 1e3:.0f} ms")
        if old_speed is not None:
            needed = args.batch_size / (5 * old_speed)
            print(f"  5x the old path's {old_speed} reviews/s: {needed * 1e3:.0f} ms a step, of which the products at")
            print(f"  the peak would leave {(needed - at_peak) * 1e3:.0f} ms for everything else")
        if threads == 1:  # with more, a layer's directions run on worker threads, which the profiler does not follow
            with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]) as profile:
                for batch in batches[args.steps :]:
                    step(batch)
            by_kind = dict.fromkeys([*KINDS, "other arithmetic"], 0.0)
            for event in profile.key_averages():
                if event.key.startswith(("aten::", "mkldnn::")):
                    by_kind[kind_of(event.key)] += event.self_cpu_time_total / 1e6 / args.steps
            products = by_kind["matrix products"]
            rate = gflop / products
            print(f"  profiled: the products ran at {rate:.0f} GFLOP/s ({rate / peak:.0%} of the peak), everything")
            print(f"  else took {(wall - products) * 1e3:.0f} ms of the step\n")
            print("| operators | ms a step (profiled) | share |")
            print("| --- | ---: | ---: |")
            total = sum(by_kind.values())
            for kind, seconds in by_kind.items():
                print(f"| {kind} | {seconds * 1e3:.0f} | {seconds / total:.0%} |")
            print(f"| all operators | {total * 1e3:.0f} | 100% |")
        print(flush=True)


if __name__ == "__main__":
    main()
