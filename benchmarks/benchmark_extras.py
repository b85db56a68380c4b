"""The other figures of the speed goals, as one markdown table: tokenizer, converter, long-document memory, training.

    PYTHONPATH=$PWD python benchmarks/benchmark_extras.py

- tokenizer: words/s of `ElmoTokenizer` from pre-split words to padded tensors, 32 sentences a call;
- converter: seconds of `hf_elmo.conversion_original.convert_original` on a random checkpoint of the original shapes
  (~374 MB);
- memory: peak resident memory of the process while embedding a 2,000-word document, in windows with the state
  carried from one to the next, and in one piece;
- training: words/s of one step (forward, scalar loss through a linear head, backward, SGD step) at batch 32, with
  the biLM frozen (the fast recurrence applies) and unfrozen, through the hand-written backward of
  `ElmoLstmLayerFunction` and through autograd over the exact loop, the three taking turns at every step.
"""

import argparse
import os
import shutil
import tempfile
import time
from pathlib import Path

import torch
from common import PeakRss, make_sentences, rss_bytes, write_random_original_checkpoint

from hf_elmo import ElmoConfig, ElmoTokenizer
from hf_elmo.conversion_original import convert_original, load_original
from hf_elmo.kernels_cpu_products import cpu_model


def tokenizer_words_per_second(tokenizer, sentences) -> float:
    words = sum(len(sentence) for sentence in sentences)
    began = time.perf_counter()
    for start in range(0, len(sentences), 32):
        tokenizer(sentences[start : start + 32], is_split_into_words=True, padding=True, return_tensors="pt")
    return words / (time.perf_counter() - began)


def document_peak_memory(model, tokenizer, document, window: int | None) -> tuple[float, float]:
    """Peak RSS (absolute, added) in MB while embedding `document` in windows of `window` words (None: whole)."""
    window = window or len(document)
    with torch.inference_mode(), PeakRss() as peak:
        state = None
        for start in range(0, len(document), window):
            encoded = tokenizer([document[start : start + window]], is_split_into_words=True, return_tensors="pt")
            output = model(**encoded, initial_state=state, return_final_state=True)
            state = output.final_state
    return peak.peak / 2**20, peak.delta / 2**20


# Training settings: (biLM frozen, `config.recurrence_implementation`). Unfrozen, "reference" runs the exact loop
# under autograd; "auto" runs `ElmoLstmLayerFunction` and its hand-written backward.
TRAINING_SETTINGS = {
    "biLM frozen": (True, "auto"),
    "biLM unfrozen, exact autograd loop": (False, "reference"),
    "biLM unfrozen, hand-written backward": (False, "auto"),
}


def training_words_per_second(model, tokenizer, sentences, steps: int) -> dict[str, float]:
    """Words/s of each of `TRAINING_SETTINGS`, which take turns at every step so that they share the machine alike."""
    model.train()
    heads = {name: torch.nn.Linear(model.config.hidden_size, 1) for name in TRAINING_SETTINGS}
    optimizers = {
        name: torch.optim.SGD([*heads[name].parameters(), *([] if frozen else model.parameters())], lr=1e-6)
        for name, (frozen, _) in TRAINING_SETTINGS.items()
    }
    words, seconds = dict.fromkeys(TRAINING_SETTINGS, 0), dict.fromkeys(TRAINING_SETTINGS, 0.0)
    for step in range(steps + 1):  # the first step warms up and is not counted
        batch = sentences[32 * step : 32 * (step + 1)]
        for name, (frozen, recurrence_implementation) in TRAINING_SETTINGS.items():
            model.requires_grad_(not frozen)
            model.config.recurrence_implementation = recurrence_implementation
            began = time.perf_counter()
            encoded = tokenizer(batch, is_split_into_words=True, padding=True, return_tensors="pt")
            output = model(input_ids=encoded["input_ids"], attention_mask=encoded["attention_mask"])
            loss = heads[name](output.last_hidden_state).mean()
            loss.backward()
            optimizers[name].step()
            optimizers[name].zero_grad()
            if step:
                seconds[name] += time.perf_counter() - began
                words[name] += sum(len(sentence) for sentence in batch)
    model.config.recurrence_implementation = "auto"
    model.eval().requires_grad_(True)
    return {name: words[name] / seconds[name] for name in TRAINING_SETTINGS}


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--checkpoint-dir", type=Path, default=Path(tempfile.gettempdir()) / "hf_elmo_bench_ckpt")
    parser.add_argument("--threads", type=int, default=None, help="torch intra-op threads (default: torch's choice)")
    parser.add_argument("--training-steps", type=int, default=2, help="timed steps of 32 sentences per setting")
    args = parser.parse_args()
    if args.threads is not None:
        torch.set_num_threads(args.threads)
    load_before = f"{os.getloadavg()[0]:.2f}"

    config = ElmoConfig()
    options_file, weight_file = write_random_original_checkpoint(args.checkpoint_dir, config)
    tokenizer = ElmoTokenizer(max_characters_per_token=config.max_characters_per_token)
    rows = []

    sentences = make_sentences(4000, seed=1)
    tokenizer_words_per_second(tokenizer, sentences[:64])  # warm-up
    speed = tokenizer_words_per_second(tokenizer, sentences)
    rows.append(
        ("tokenizer, 32 pre-split sentences a call, 4,000 sentences", f"{speed:,.0f} words/s", ">= 200,000 words/s")
    )

    output_dir = Path(tempfile.mkdtemp()) / "converted"
    began = time.perf_counter()
    convert_original(options_file, weight_file, output_dir)
    seconds = time.perf_counter() - began
    size = weight_file.stat().st_size / 2**20
    rows.append((f"convert_original() on a {size:.0f} MB original-layout checkpoint", f"{seconds:.1f} s", "<= 15 s"))
    shutil.rmtree(output_dir.parent)

    model = load_original(options_file, weight_file)
    model_mb = sum(p.numel() * p.element_size() for p in model.parameters()) / 2**20
    document = [word for sentence in make_sentences(200, seed=2) for word in sentence][:2000]
    for window in (200, None):
        peak, added = document_peak_memory(model, tokenizer, document, window)
        what = f"windows of {window} words, state carried" if window else "one piece"
        rows.append(
            (
                f"2,000-word document, {what}: peak RSS (added)",
                f"{peak:,.0f} MB ({added:,.0f} MB)",
                f"< {model_mb + 1024:,.0f} MB (model {model_mb:.0f} MB + 1 GB)",
            )
        )

    train_sentences = make_sentences(32 * (args.training_steps + 1), seed=3)
    speeds = training_words_per_second(model, tokenizer, train_sentences, args.training_steps)
    for name, speed in speeds.items():
        rows.append((f"training step, batch 32, {name}", f"{speed:.1f} words/s", "reported"))

    print(
        f"{cpu_model()}, {torch.get_num_threads()} threads, torch {torch.__version__}, fp32; process RSS at the end "
        f"{rss_bytes() / 2**20:,.0f} MB; load average before / after: {load_before} / {os.getloadavg()[0]:.2f}\n"
    )
    print("| measure | result | goal |")
    print("|---|---:|---|")
    for measure, result, goal in rows:
        print(f"| {measure} | {result} | {goal} |")


if __name__ == "__main__":
    main()
