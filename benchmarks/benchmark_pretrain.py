"""Pre-training throughput of `hf-elmo pretrain`: the code before the fast training path beside today's, in one run.

For each shape (the shipped ko-nsmc biLM's, and the `small` preset with the same data options) and thread count, the
real command trains a few steps on the NSMC training text, once with the code of `--baseline-rev` (taken from git),
once with this tree, and once with this tree and `--bf16` (mixed precision: bfloat16 autocast). Printed per run: the
Trainer's own `train_samples_per_second` (reviews/s), real positions per second (words and sentence markers, not
padding), the training arithmetic the path executes per second and its share of this machine's GEMM peak in the
path's dtype, and the ratios of each path to the old one and of bf16 to this tree's fp32. A CPU without bfloat16
instructions (avx512_bf16 or amx_bf16) is named as such: its bf16 rows have no goal there.

    python examples/nsmc/prepare_nsmc.py --input ../shared/data/nsmc/reviews.tsv.gz --output-dir outputs/nsmc/data \
        --extra-train-sizes 100000 0 --pretrain-size 0
    PYTHONPATH=$PWD python benchmarks/benchmark_pretrain.py --train-file outputs/nsmc/data/pretrain_train.txt

Executed arithmetic counts the matrix products as each path runs them (gate arithmetic left out): the LSTMs' input,
recurrent and projection products at every position they step through (the old path steps through padding too), the
character encoder once per distinct word of a batch, the sampled softmax at every target, each three times (forward,
and the two products of the backward).
"""

import argparse
import os
import random
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import torch
from benchmark_inference import gemm_peak
from common import cpu_has_bfloat16

from hf_elmo import ElmoTokenizer
from hf_elmo.configuration_elmo import ElmoConfig
from hf_elmo.kernels_cpu_products import cpu_model
from hf_elmo.pretraining import DataArguments, ModelArguments, SplitText, model_config, save_tokenizer
from hf_elmo.text_files import read_sentences

# The last commit before the training recurrence ran on valid positions alone.
BASELINE_REV = "ada9755"
# The shipped ko-nsmc biLM's options (examples/nsmc/README.md); the `small` preset keeps the data options.
DATA_OPTIONS = ["--pre-tokenizer", "whitespace", "--max-vocab-size", "100000", "--min-count", "3"]
DATA_OPTIONS += ["--char-vocab", "learned", "--max-characters-per-token", "20", "--n-negative-samples", "1024"]
SHAPES = {"ko-nsmc": {"preset": "tiny", "projection_dim": 128, "cell_dim": 512}, "small": {"preset": "small"}}
REPOSITORY = Path(__file__).resolve().parents[1]
# The runs of each shape and thread count: the old path in fp32, this tree in fp32 and under `--bf16`.
PATHS = (("old", False), ("new", False), ("new", True))
PEAK_DTYPES = (torch.float32, torch.bfloat16)


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--train-file", required=True, help="the pre-training text (one review per line)")
    parser.add_argument("--baseline-rev", default=BASELINE_REV, help="git revision of the old path")
    parser.add_argument("--shapes", nargs="+", default=list(SHAPES), choices=list(SHAPES))
    parser.add_argument("--threads", nargs="+", type=int, default=[1, 2])
    parser.add_argument("--batch-size", type=int, default=256)
    parser.add_argument("--max-length", type=int, default=40)
    parser.add_argument("--steps", type=int, default=12, help="training steps timed per run")
    parser.add_argument(
        "--train-lines", type=int, default=50_000, help="lines the runs train on (the vocabulary is of the whole file)"
    )
    return parser.parse_args()


def baseline_tree(revision: str, folder: Path) -> Path:
    """The package as it was at `revision`, extracted from git into `folder`."""
    archive = subprocess.run(
        ["git", "archive", revision, "hf_elmo"], cwd=REPOSITORY, check=True, capture_output=True
    ).stdout
    folder.mkdir(parents=True)
    subprocess.run(["tar", "-x", "-C", str(folder)], input=archive, check=True)
    return folder


def reviews_per_second(
    tree: Path, shape: str, threads: int, steps: int, args, tokenizer_dir: Path, workdir: Path, bf16: bool = False
) -> float:
    """
    `train_samples_per_second` of `hf-elmo pretrain` run with the package in `tree` (its vocabulary reused), with
    `--bf16` where `bf16`.
    """
    output_dir = workdir / f"run-{tree.name}-{shape}-{threads}-{'bf16' if bf16 else 'fp32'}"
    shutil.rmtree(output_dir, ignore_errors=True)
    # `--resume` keeps a vocabulary already there: in `OUTPUT.parts/` since runs work there (RunFolders), else in
    # the output folder itself, as the older trees read it.
    works_in_parts = "class RunFolders" in (tree / "hf_elmo" / "pretraining.py").read_text(encoding="utf-8")
    run_dir = output_dir.with_name(f"{output_dir.name}.parts") if works_in_parts else output_dir
    shutil.copytree(tokenizer_dir, run_dir)
    # `hf_elmo.cli pretrain`, which both trees run (`python -m hf_elmo.pretraining` runs nothing since the CLI moved).
    command = [sys.executable, "-m", "hf_elmo.cli", "pretrain", "--train-file", str(workdir / "train.txt")]
    command += ["--validation-file", str(workdir / "validation.txt"), "--output-dir", str(output_dir), "--resume"]
    shape_options = [item for name, value in SHAPES[shape].items() for item in (f"--{name.replace('_', '-')}", value)]
    command += [*map(str, shape_options), *DATA_OPTIONS, "--batch-size", str(args.batch_size)]
    command += ["--max-length", str(args.max_length), "--max-steps", str(steps), "--eval-strategy", "no"]
    command += ["--save-steps", "1000000", "--logging-steps", str(steps), "--disable-tqdm", "true"]
    command += ["--seed", "0", "--report-to", "none", "--bf16", str(bf16).lower()]
    if bf16 and not torch.cuda.is_available():  # the Trainer takes bf16 on the CPU only when told it trains there
        command += ["--use-cpu", "true"]
    environment = {**os.environ, "PYTHONPATH": str(tree), "OMP_NUM_THREADS": str(threads), "HF_HUB_OFFLINE": "1"}
    # Run from the work folder: `python -m` puts the working directory first on the path, before PYTHONPATH.
    result = subprocess.run(command, capture_output=True, text=True, env=environment, cwd=workdir)
    found = re.search(r"'train_samples_per_second': '([0-9.]+)'", result.stdout)
    if result.returncode != 0 or found is None:
        raise RuntimeError(f"{' '.join(command)} failed:\n{result.stderr[-3000:]}")
    shutil.rmtree(output_dir)
    return float(found.group(1))


def shipped_tokenizer(train_file: str, folder: Path) -> ElmoTokenizer:
    """The tokenizer `hf-elmo pretrain` builds from `train_file` with `DATA_OPTIONS`, saved in `folder`."""
    data_args = DataArguments(
        train_file=[train_file], validation_file=[], pre_tokenizer="whitespace", min_count=3, max_vocab_size=100_000,
        char_vocab="learned",
    )  # fmt: skip
    train_text = SplitText([train_file], data_args.pre_tokenizer)
    save_tokenizer(data_args, ModelArguments(max_characters_per_token=20), train_text, folder)
    return ElmoTokenizer.from_pretrained(folder)


def batch_statistics(tokenizer: ElmoTokenizer, lines: list[str], batch_size: int, max_length: int, batches: int = 50):
    """Mean real positions per review, and per batch: positions stepped through when padded, distinct words."""
    rng = random.Random(0)
    reviews = padded = distinct = 0.0
    for _ in range(batches):
        sample = rng.sample(lines, batch_size)
        encoded = tokenizer.word_tokenizer.encode_batch(sample, add_special_tokens=False)
        words = [encoding.tokens[: max_length - 2] for encoding in encoded]
        lengths = [len(sentence) + 2 for sentence in words]
        reviews += sum(lengths) / batch_size
        padded += batch_size * max(lengths)
        distinct += len({word for sentence in words for word in sentence}) + 2
    return reviews / batches, padded / batches, distinct / batches


def training_gflop(config: ElmoConfig, lstm_positions: float, targets: float, distinct_words: float) -> float:
    """Training arithmetic of one batch (see the module docstring), in GFLOP."""
    cell, projection = config.cell_dim, config.projection_dim
    projected = projection < cell
    lstm = 2 * projection * 4 * cell + 2 * (projection if projected else cell) * 4 * cell
    lstm += 2 * cell * projection if projected else 0
    chars = config.max_characters_per_token
    convolutions = sum(2 * config.char_embedding_dim * width * n * (chars - width + 1) for width, n in config.filters)
    encoder = convolutions + config.n_highway * 4 * config.n_filters**2 + 2 * config.n_filters * projection
    softmax = 2 * targets * (1 + config.n_negative_samples) * 2 * projection
    forward = 2 * config.n_layers * lstm * lstm_positions + encoder * distinct_words + softmax
    return 3 * forward / 1e9


def main():
    args = parse_args()
    with tempfile.TemporaryDirectory() as folder:
        workdir = Path(folder)
        lines = list(read_sentences([args.train_file]))
        (workdir / "validation.txt").write_text("\n".join(lines[:64]) + "\n", encoding="utf-8")
        # Each run reads its text and counts its <UNK> words before training: a part of the file keeps that short.
        (workdir / "train.txt").write_text("\n".join(lines[: args.train_lines]) + "\n", encoding="utf-8")
        tokenizer_dir = workdir / "tokenizer"
        tokenizer = shipped_tokenizer(args.train_file, tokenizer_dir)
        per_review, padded_positions, distinct_words = batch_statistics(
            tokenizer, lines, args.batch_size, args.max_length
        )
        real_positions = per_review * args.batch_size
        targets = 2 * (real_positions - args.batch_size)  # each direction: one target fewer than positions per row
        trees = {"old": baseline_tree(args.baseline_rev, workdir / "baseline"), "new": REPOSITORY}
        print(f"CPU: {cpu_model()}; torch {torch.__version__}; batch {args.batch_size} reviews, {args.steps} steps")
        print(f"{per_review:.2f} real positions per review, {padded_positions / args.batch_size:.1f} when padded\n")
        if not cpu_has_bfloat16():
            print("this CPU has no bfloat16 instructions (avx512_bf16, amx_bf16): its bf16 rows have no goal here\n")
        print(
            "| shape | threads | path | reviews/s | real positions/s | executed GFLOP/s | of its dtype's GEMM peak "
            "| vs old | bf16 vs fp32 |"
        )
        print("| --- | ---: | --- | ---: | ---: | ---: | ---: | ---: | ---: |")
        for shape in args.shapes:
            model_args = ModelArguments(**SHAPES[shape], max_characters_per_token=20, n_negative_samples=1024)
            config = model_config(model_args, tokenizer)
            for threads in args.threads:
                torch.set_num_threads(threads)
                # On a CUDA machine the Trainer trains on the GPU: the CPU's peaks say nothing there.
                peaks = {} if torch.cuda.is_available() else {dtype: gemm_peak(dtype=dtype) for dtype in PEAK_DTYPES}
                # The new path measures its product libraries on first use: an untimed run first.
                reviews_per_second(trees["new"], shape, threads, 2, args, tokenizer_dir, workdir)
                speeds = {
                    (path, bf16): reviews_per_second(
                        trees[path], shape, threads, args.steps, args, tokenizer_dir, workdir, bf16
                    )
                    for path, bf16 in PATHS
                }
                peaks = {dtype: max(peak, gemm_peak(dtype=dtype)) for dtype, peak in peaks.items()}
                for (path, bf16), speed in speeds.items():
                    lstm_positions = padded_positions if path == "old" else real_positions
                    gflop = training_gflop(config, lstm_positions, targets, distinct_words)
                    gflops = gflop * speed / args.batch_size
                    peak = peaks.get(torch.bfloat16 if bf16 else torch.float32)
                    versus_old = f"{speed / speeds['old', False]:.2f}x" if path == "new" else ""
                    versus_fp32 = f"{speed / speeds['new', False]:.2f}x" if bf16 else ""
                    print(
                        f"| {shape} | {threads} | {path}{' bf16' if bf16 else ''} | {speed:.1f} "
                        f"| {speed * per_review:,.0f} | {gflops:.1f} "
                        f"| {f'{gflops / peak:.0%} of {peak:.0f}' if peak else '-'} | {versus_old} | {versus_fp32} |",
                        flush=True,
                    )


if __name__ == "__main__":
    main()
