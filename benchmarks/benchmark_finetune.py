"""Seconds per `Trainer` fine-tuning step of `ElmoForSequenceClassification` of the original shapes, and peak memory.

    PYTHONPATH=$PWD python benchmarks/benchmark_finetune.py --device cuda --precision bf16

A randomly initialised model of the original shapes (93.6M parameters), all of it trained; ~25-word sentences with
random labels, tokenized beforehand; `--batch-size` sentences a step. The first step warms up and is not counted;
each step is timed from the Trainer's step-begin to its step-end callback (forward, backward, optimizer step).
Prints one markdown table row with the median step, words/s and the peak GPU memory allocated (CUDA only).
"""

import argparse
import random
import statistics
import tempfile
import time

import torch
from common import make_sentences
from datasets import Dataset, disable_progress_bars
from transformers import Trainer, TrainerCallback, TrainingArguments

from hf_elmo import ElmoConfig, ElmoForSequenceClassification, ElmoTokenizer


class StepTimer(TrainerCallback):
    """Seconds of each optimizer step, the device's queued work included."""

    def __init__(self, device: torch.device):
        self.device, self.seconds = device, []

    def _now(self) -> float:
        if self.device.type == "cuda":
            torch.cuda.synchronize(self.device)
        return time.perf_counter()

    def on_step_begin(self, args, state, control, **kwargs):
        self.began = self._now()

    def on_step_end(self, args, state, control, **kwargs):
        self.seconds.append(self._now() - self.began)


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--device", choices=["cpu", "cuda"], default="cuda", help="where to train (default cuda)")
    parser.add_argument(
        "--precision", choices=["fp32", "bf16", "fp16"], default="bf16", help="Trainer mixed precision (default bf16)"
    )
    parser.add_argument("--batch-size", type=int, default=32, help="sentences a step (default 32)")
    parser.add_argument("--steps", type=int, default=10, help="timed steps, after one warm-up step (default 10)")
    args = parser.parse_args()
    device = torch.device(args.device)
    if device.type == "cuda" and not torch.cuda.is_available():
        parser.error("--device cuda: CUDA is not available here")

    disable_progress_bars()  # of the tokenizing map: noise in the results
    torch.manual_seed(0)
    config = ElmoConfig(num_labels=2)
    model = ElmoForSequenceClassification(config)
    tokenizer = ElmoTokenizer(max_characters_per_token=config.max_characters_per_token)
    sentences = make_sentences(args.batch_size * (args.steps + 1), seed=0)
    rng = random.Random(0)
    dataset = Dataset.from_dict({"words": sentences, "label": [rng.randrange(2) for _ in sentences]}).map(
        lambda batch: tokenizer(batch["words"], is_split_into_words=True), batched=True, remove_columns=["words"]
    )
    timer = StepTimer(device)
    with tempfile.TemporaryDirectory() as output_dir:
        training_args = TrainingArguments(
            output_dir=output_dir,
            use_cpu=device.type == "cpu",
            bf16=args.precision == "bf16",
            fp16=args.precision == "fp16",
            per_device_train_batch_size=args.batch_size,
            max_steps=args.steps + 1,
            learning_rate=1e-4,
            report_to="none",
            save_strategy="no",
            logging_strategy="no",
            disable_tqdm=True,
            seed=0,
        )
        if device.type == "cuda":
            torch.cuda.reset_peak_memory_stats(device)
        trainer = Trainer(
            model=model, args=training_args, processing_class=tokenizer, train_dataset=dataset, callbacks=[timer]
        )
        trainer.train()
    step = statistics.median(timer.seconds[1:])
    words = sum(len(sentence) for sentence in sentences) / (args.steps + 1)  # per step, on average
    hardware = torch.cuda.get_device_name(device) if device.type == "cuda" else "CPU"
    peak = f"{torch.cuda.max_memory_allocated(device) / 2**20:.0f}" if device.type == "cuda" else "-"
    print(
        f"{hardware}, torch {torch.__version__}, Trainer, {args.precision}, batch {args.batch_size}, "
        f"{args.steps} timed steps\n"
    )
    print("| precision | batch | median step (s) | words/s | peak GPU memory allocated (MB) |")
    print("|---|---:|---:|---:|---:|")
    print(f"| {args.precision} | {args.batch_size} | {step:.3f} | {words / step:.0f} | {peak} |")


if __name__ == "__main__":
    main()
