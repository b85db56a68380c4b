"""Shared pieces of the benchmarks: a random checkpoint of the original shapes, deterministic sentences, meters."""

import json
import random
import threading
import time
from pathlib import Path

import torch

from hf_elmo import ElmoConfig, ElmoModel
from hf_elmo.weight_mapping import state_dict_to_original


def write_random_original_checkpoint(folder: Path, config: ElmoConfig, seed: int = 0) -> tuple[Path, Path]:
    """
    `options.json` and `weights.hdf5` in the original layout, holding an `ElmoModel` initialised as bilm-tf does
    (realistic scales, so that LSTM gates are not saturated and differences between paths stay visible).
    """
    import h5py

    folder.mkdir(parents=True, exist_ok=True)
    options_file, weight_file = folder / "options.json", folder / "weights.hdf5"
    if options_file.is_file() and weight_file.is_file():
        return options_file, weight_file
    torch.manual_seed(seed)
    arrays = state_dict_to_original(ElmoModel(config).state_dict(), config)
    options_file.write_text(json.dumps(config.to_original_options()), encoding="utf-8")
    with h5py.File(weight_file, "w") as handle:
        for name, array in arrays.items():
            handle.create_dataset(name, data=array)
    return options_file, weight_file


def cpu_has_bfloat16() -> bool:
    """Whether this CPU multiplies in bfloat16 natively (avx512_bf16 or amx_bf16 among its /proc/cpuinfo flags)."""
    try:
        flags = Path("/proc/cpuinfo").read_text().split()
    except OSError:
        return False
    return "avx512_bf16" in flags or "amx_bf16" in flags


def make_sentences(count: int, seed: int = 0, mean_words: int = 25) -> list[list[str]]:
    """`count` sentences of `mean_words - 5` to `mean_words + 5` words from a Zipf-distributed made-up vocabulary."""
    rng = random.Random(seed)
    letters = "abcdefghijklmnopqrstuvwxyz"
    vocabulary = ["".join(rng.choices(letters, k=rng.randint(1, 10))) for _ in range(5000)] + [",", ".", "'s"]
    weights = [1.0 / (rank + 1) for rank in range(len(vocabulary))]
    return [
        rng.choices(vocabulary, weights=weights, k=rng.randint(mean_words - 5, mean_words + 5)) for _ in range(count)
    ]


def rss_bytes() -> int:
    with open("/proc/self/statm") as handle:
        return int(handle.read().split()[1]) * 4096


class PeakRss:
    """Context manager sampling this process's resident memory every millisecond; `delta` is the peak above entry."""

    def __enter__(self):
        self.start = self.peak = rss_bytes()
        self._running = True
        self._thread = threading.Thread(target=self._sample, daemon=True)
        self._thread.start()
        return self

    def _sample(self):
        while self._running:
            self.peak = max(self.peak, rss_bytes())
            time.sleep(0.001)

    def __exit__(self, *exc):
        self._running = False
        self._thread.join()
        self.peak = max(self.peak, rss_bytes())
        self.delta = self.peak - self.start
