"""Inference and a pre-training step, the package of `--baseline-rev` beside this tree's, taking turns, in one run.

For a change that should move no figure (a restructuring): each round runs one process per tree, alternately, and
each process times the same work in-process after a warm-up, so that load from other processes falls on both alike.
Printed: each figure's median over the rounds for both trees and the median of the per-round ratios (this tree /
baseline for throughput: above 1 is faster).

    PYTHONPATH=$PWD python benchmarks/benchmark_revisions.py --baseline-rev HEAD~3 --threads 1

The work, at the shape of the bundled `ko-nsmc` biLM (its config, random weights, the byte alphabet):
- inference: words/s of `ElmoModel` on 64 sentences of ~25 made-up words, batches of 32, under `inference_mode`;
- pre-training: words/s of `ElmoForPreTraining` forward and backward in training mode (sampled softmax of 8,192
  candidates over 30,000 words), batches of 64 sentences.
"""

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPOSITORY = Path(__file__).resolve().parents[1]


def worker(threads: int, repeats: int) -> dict[str, float]:
    """The figures of this process's `hf_elmo` (whichever tree PYTHONPATH puts first)."""
    import torch
    from common import make_sentences

    import hf_elmo
    from hf_elmo import ElmoConfig, ElmoForPreTraining, ElmoModel, ElmoTokenizer, bundled_model_path

    torch.set_num_threads(threads)
    torch.manual_seed(0)
    shape = ElmoConfig.from_pretrained(bundled_model_path("ko-nsmc")).to_dict()
    for learned in ("char_vocab_size", "char_markers"):
        shape.pop(learned, None)
    config = ElmoConfig(**{**shape, "word_vocab_size": 30000, "n_negative_samples": 8192})
    tokenizer = ElmoTokenizer(config.max_characters_per_token)
    sentences = make_sentences(64)
    words = sum(len(sentence) for sentence in sentences)
    figures = {"package": hf_elmo.__file__}

    model = ElmoModel(config).eval()
    batches = [
        tokenizer(sentences[first : first + 32], is_split_into_words=True, padding=True, return_tensors="pt")
        for first in range(0, len(sentences), 32)
    ]

    def infer():
        with torch.inference_mode():
            for batch in batches:
                model(batch["input_ids"], attention_mask=batch["attention_mask"])

    pretraining = ElmoForPreTraining(config).train()
    batch = tokenizer(sentences, is_split_into_words=True, padding=True, return_tensors="pt")
    labels = torch.randint(0, config.word_vocab_size, batch["attention_mask"].shape)

    def train_step():
        pretraining.zero_grad(set_to_none=True)
        pretraining(batch["input_ids"], batch["attention_mask"], labels=labels).loss.backward()

    for name, work in (("inference words/s", infer), ("pre-training words/s", train_step)):
        work()  # warm-up: the CPU products' library choices, allocations
        start = time.perf_counter()
        for _ in range(repeats):
            work()
        figures[name] = words * repeats / (time.perf_counter() - start)
    return figures


def baseline_tree(revision: str, folder: Path) -> Path:
    """The package as it was at `revision`, extracted from git into `folder` (the worker imports nothing else)."""
    archive = subprocess.run(["git", "archive", revision, "hf_elmo"], cwd=REPOSITORY, check=True, capture_output=True)
    folder.mkdir(parents=True)
    subprocess.run(["tar", "-x", "-C", str(folder)], input=archive.stdout, check=True)
    return folder


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--baseline-rev", help="git revision of the baseline package (required)")
    parser.add_argument("--rounds", type=int, default=5, help="processes per tree, alternating")
    parser.add_argument("--repeats", type=int, default=5, help="timed repetitions of each work in a process")
    parser.add_argument("--threads", type=int, default=1, help="torch intra-op threads")
    parser.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        print(json.dumps(worker(args.threads, args.repeats)))
        return
    if args.baseline_rev is None:
        parser.error("--baseline-rev is required")

    with tempfile.TemporaryDirectory() as workdir:
        trees = {"baseline": baseline_tree(args.baseline_rev, Path(workdir) / "baseline"), "this tree": REPOSITORY}
        figures = {name: [] for name in trees}
        for _ in range(args.rounds):
            for name, tree in trees.items():
                command = [sys.executable, __file__, "--worker", "--threads", str(args.threads)]
                command += ["--repeats", str(args.repeats)]
                paths = f"{tree}:{REPOSITORY / 'benchmarks'}"
                env = {**os.environ, "PYTHONPATH": paths}
                result = subprocess.run(command, env=env, capture_output=True, text=True)
                if result.returncode != 0:
                    sys.exit(f"the {name} worker failed: {result.stderr.strip().splitlines()[-1]}")
                run = json.loads(result.stdout.strip().splitlines()[-1])
                if not run.pop("package").startswith(str(tree)):  # an installed hf_elmo would shadow the tree
                    sys.exit(f"the {name} worker did not import the package of {tree}")
                figures[name].append(run)
    heading = f"figure ({args.threads} thread(s), {args.rounds} rounds)"
    print(f"| {heading} | baseline {args.baseline_rev} | this tree | ratio |")
    print("| --- | ---: | ---: | ---: |")
    for figure in figures["this tree"][0]:
        old = [run[figure] for run in figures["baseline"]]
        new = [run[figure] for run in figures["this tree"]]
        ratio = statistics.median(n / o for n, o in zip(new, old))
        print(f"| {figure} | {statistics.median(old):,.0f} | {statistics.median(new):,.0f} | {ratio:.3f} |")


if __name__ == "__main__":
    main()
