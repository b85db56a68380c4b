"""Words per second of ONNX Runtime on the exported graph beside PyTorch's fast path, on one random checkpoint.

Prints the export's time and one markdown table: throughput at each batch size (1 and 32 by default) from words
(tokenizer included) to the top layer, the ratio to PyTorch's fast path, the top layer's max |diff| and minimum cosine
against it. The graph is exported once, at batch 2 and 5 positions; every batch here has other sizes. With `--int8`,
the graph quantised by `hf_elmo.onnx_elmo.quantize_int8` (ONNX Runtime's dynamic int8 quantisation) is a third
path. The paths take turns batch by batch on the same sentences, with the same number of threads.

    PYTHONPATH=$PWD python benchmarks/benchmark_onnx.py --threads 2 --int8
"""

import argparse
import os
import tempfile
import time
from pathlib import Path

import torch
from benchmark_inference import add_batches_argument, max_diff, measure, min_cosine
from common import make_sentences, write_random_original_checkpoint

from hf_elmo import ElmoConfig, ElmoTokenizer
from hf_elmo.conversion_original import convert_original
from hf_elmo.modeling_elmo import ElmoModel
from hf_elmo.onnx_elmo import ONNX_FILE, ElmoOnnxSession, export_onnx, quantize_int8


def pytorch_path(model, tokenizer):
    """From words to `(seconds, top layer, mask)` with PyTorch's fast path (the default)."""

    def run(batch):
        began = time.perf_counter()
        encoded = tokenizer(batch, is_split_into_words=True, padding=True, return_tensors="pt")
        top = model(input_ids=encoded["input_ids"], attention_mask=encoded["attention_mask"]).last_hidden_state
        return time.perf_counter() - began, top, encoded["attention_mask"].bool()

    return run


def onnx_path(session: ElmoOnnxSession, tokenizer):
    """From words to `(seconds, top layer, mask)` with ONNX Runtime on the exported graph."""

    def run(batch):
        began = time.perf_counter()
        encoded = tokenizer(batch, is_split_into_words=True, padding=True, return_tensors="np")
        top = session(encoded["input_ids"], encoded["attention_mask"])["last_hidden_state"]
        seconds = time.perf_counter() - began
        return seconds, torch.from_numpy(top), torch.from_numpy(encoded["attention_mask"].astype(bool))

    return run


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    add_batches_argument(parser)
    parser.add_argument("--threads", type=int, default=None, help="threads of both runtimes (default: torch's choice)")
    parser.add_argument("--int8", action="store_true", help="also run the graph quantised to int8 by ONNX Runtime")
    parser.add_argument("--checkpoint-dir", type=Path, default=Path(tempfile.gettempdir()) / "hf_elmo_bench_ckpt")
    args = parser.parse_args()
    if args.threads is not None:
        torch.set_num_threads(args.threads)
    import onnxruntime

    config = ElmoConfig()
    options_file, weight_file = write_random_original_checkpoint(args.checkpoint_dir, config)
    model_dir, onnx_dir = args.checkpoint_dir / "hf", args.checkpoint_dir / "onnx"
    if not model_dir.is_dir():
        convert_original(options_file, weight_file, model_dir)
    export_seconds = None
    if not (onnx_dir / ONNX_FILE).is_file():
        began = time.perf_counter()
        export_onnx(model_dir, onnx_dir)
        export_seconds = time.perf_counter() - began
    model = ElmoModel.from_pretrained(model_dir).eval()
    tokenizer = ElmoTokenizer.from_pretrained(model_dir)
    options = onnxruntime.SessionOptions()
    options.intra_op_num_threads = torch.get_num_threads()
    paths = {
        "PyTorch fast path (default)": pytorch_path(model, tokenizer),
        "ONNX Runtime, exported graph": onnx_path(ElmoOnnxSession(onnx_dir, options), tokenizer),
    }
    if args.int8:
        int8_dir = quantize_int8(onnx_dir, args.checkpoint_dir / "onnx-int8", overwrite=True)
        paths["ONNX Runtime, int8 (quantize_dynamic)"] = onnx_path(ElmoOnnxSession(int8_dir, options), tokenizer)

    load_before = f"{os.getloadavg()[0]:.2f}"
    sentences = make_sentences(max(count for _, count in args.batches), seed=0)
    rows = []
    with torch.inference_mode():
        for run in paths.values():  # warm-up: first-call allocations, the product libraries' choice per shape
            run(sentences[:2])
        for batch_size, count in args.batches:
            batch_sentences = sentences[:count]
            for run in paths.values():
                run(batch_sentences[:batch_size])
            words = sum(len(sentence) for sentence in batch_sentences)
            results = measure(paths, batch_sentences, batch_size, torch.device("cpu"))
            reference_seconds, _, reference = results["PyTorch fast path (default)"]
            for name, (seconds, _, outputs) in results.items():
                rows.append(
                    f"| {name} | {batch_size} | {words / seconds:,.0f} | {reference_seconds / seconds:.2f}x "
                    f"| {max_diff(outputs, reference):.1e} | {min_cosine(outputs, reference):.6f} |"
                )
    print(
        f"torch {torch.__version__}, onnxruntime {onnxruntime.__version__}, {torch.get_num_threads()} threads, "
        f"load average {load_before} before / {os.getloadavg()[0]:.2f} after"
    )
    if export_seconds is not None:
        print(f"export (hf-elmo export --format onnx, original shapes): {export_seconds:.0f} s")
    size = (onnx_dir / ONNX_FILE).stat().st_size + sum(p.stat().st_size for p in onnx_dir.glob("*.data"))
    print(f"model.onnx: {size / 2**20:.0f} MiB\n")
    print("| path | batch | words/s | speed vs PyTorch | top layer max abs diff | min cosine |")
    print("|---|---:|---:|---:|---:|---:|")
    print("\n".join(rows))


if __name__ == "__main__":
    main()
