"""What `config.cpu_matmul` costs besides time: the top layer's fidelity under "int8", and resident memory.

    PYTHONPATH=$PWD python benchmarks/cpu_matmul_check.py --korean-text outputs/nsmc/data/pretrain_validation.txt

Cosine: the top layer's minimum cosine similarity, over valid positions, between `cpu_matmul="int8"` and the float32
fast path held to `torch.mm` ("blas"), on the original-format test checkpoint in ../shared (its 30 sentences, where
present), and on the bundled Korean biLM `ko-nsmc` (the first 500 lines of `--korean-text`, where given).

Memory: for each of "blas", "auto" and "int8", a fresh process loads the random checkpoint of the original shapes
(`benchmark_inference.py`'s), runs one batch of 32 ~25-word sentences twice and reports its resident memory.
"""

import argparse
import json
import subprocess
import sys
import tempfile
from pathlib import Path

import torch
from benchmark_inference import min_cosine
from common import make_sentences, rss_bytes, write_random_original_checkpoint

from hf_elmo import ElmoConfig, ElmoModel, ElmoTokenizer, bundled_model_path, kernels_cpu_products
from hf_elmo.conversion_original import load_original

FIXTURE_DIR = Path(__file__).resolve().parents[2] / "shared" / "fixtures" / "allennlp-elmo"
CHECKPOINT_DIR = Path(tempfile.gettempdir()) / "hf_elmo_bench_ckpt"


def use_products(model, matmul: str):
    """`matmul` "auto" or "int8" as `config.cpu_matmul`; "blas": "auto" held to `torch.mm` for every shape (no
    prepacked copies), the float32 baseline of this comparison."""
    if matmul == "blas":
        kernels_cpu_products.fastest_library = lambda *shape: "blas"
    model.config.cpu_matmul = "auto" if matmul == "blas" else matmul


def int8_min_cosine(model, tokenizer, sentences: list[list[str]]) -> float:
    encoded = tokenizer(sentences, is_split_into_words=True, padding=True, return_tensors="pt")
    tops = {}
    with torch.inference_mode():
        for matmul in ("blas", "int8"):
            use_products(model, matmul)
            tops[matmul] = model(**encoded).last_hidden_state
    valid = encoded["attention_mask"].bool()
    return min_cosine([(tops["int8"], valid)], [(tops["blas"], valid)])


def resident_mb_after_batch(matmul: str) -> float:
    config = ElmoConfig()
    model = load_original(*write_random_original_checkpoint(CHECKPOINT_DIR, config)).eval()
    use_products(model, matmul)
    tokenizer = ElmoTokenizer(max_characters_per_token=config.max_characters_per_token)
    encoded = tokenizer(make_sentences(32, seed=0), is_split_into_words=True, padding=True, return_tensors="pt")
    with torch.inference_mode():
        model(**encoded)
        model(**encoded)
    return rss_bytes() / 2**20


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--korean-text", type=Path, help="Korean reviews, one per line, for the bundled ko-nsmc")
    parser.add_argument("--memory-of", choices=["blas", "auto", "int8"], help=argparse.SUPPRESS)  # one child process
    args = parser.parse_args()
    if args.memory_of:
        print(resident_mb_after_batch(args.memory_of))
        return

    print(f"torch {torch.__version__}, {torch.get_num_threads()} threads\n")
    print("| model | sentences | top layer's min cosine, int8 vs float32 |\n|---|---:|---:|")
    if (FIXTURE_DIR / "lm_weights.hdf5").is_file():
        model = load_original(FIXTURE_DIR / "options.json", FIXTURE_DIR / "lm_weights.hdf5").eval()
        tokenizer = ElmoTokenizer(max_characters_per_token=model.config.max_characters_per_token)
        groups = json.loads((FIXTURE_DIR / "sentences.json").read_text(encoding="utf-8"))
        sentences = [sentence.split() for group in groups for sentence in group]
        print(
            f"| original-format test checkpoint (../shared) | {len(sentences)} | "
            f"{int8_min_cosine(model, tokenizer, sentences):.5f} |"
        )
    if args.korean_text:
        path = bundled_model_path("ko-nsmc")
        model = ElmoModel.from_pretrained(path, dtype=torch.float32).eval()
        tokenizer = ElmoTokenizer.from_pretrained(path)
        lines = args.korean_text.read_text(encoding="utf-8").splitlines()[:500]
        print(
            f"| bundled ko-nsmc | {len(lines)} | "
            f"{int8_min_cosine(model, tokenizer, [line.split() for line in lines]):.5f} |"
        )

    print("\n| cpu_matmul | resident memory after a batch of 32, original shapes (MB) |\n|---|---:|")
    for matmul in ("blas", "auto", "int8"):
        child = subprocess.run(
            [sys.executable, __file__, "--memory-of", matmul], capture_output=True, text=True, check=True
        )
        print(f"| {matmul} | {float(child.stdout.split()[-1]):.0f} |")


if __name__ == "__main__":
    main()
