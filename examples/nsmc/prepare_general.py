"""Splits the general Korean text of `../shared/data/ko-general/` into pre-training and validation lines.

    python examples/nsmc/prepare_general.py --input-dir ../shared/data/ko-general --output-dir outputs/nsmc/data

Reads every `*.txt.gz` of the folder (one sentence or short paragraph a line), shuffles the lines of all sources
together (`--seed`) and writes the first `--validation-size` to `general_validation.txt`, the rest to
`general_train.txt`, with `general_splits.json` counting each source's lines in each file. Pre-training reads the
training lines beside NSMC's `pretrain_train.txt`; naming `general_train.txt` more than once after `--train-file`
up-weights it (each name is one more pass over it per epoch).
"""

import argparse
import gzip
import json
import random
import sys
from collections import Counter
from pathlib import Path

from hf_elmo.errors import run_entry_point


def read_sources(folder: Path) -> list[tuple[str, str]]:
    """`[(source, line), ...]` of every `*.txt.gz` in `folder`, whitespace normalised, empty lines skipped."""
    paths = sorted(folder.glob("*.txt.gz"))
    if not paths:
        raise ValueError(f"{folder} holds no *.txt.gz file")
    lines = []
    for path in paths:
        source = path.name.removesuffix(".txt.gz")
        with gzip.open(path, "rt", encoding="utf-8") as handle:
            lines.extend((source, text) for text in (" ".join(line.split()) for line in handle) if text)
    return lines


def write_lines(path: Path, lines: list[tuple[str, str]]) -> None:
    path.write_text("".join(f"{text}\n" for _, text in lines), encoding="utf-8")


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], allow_abbrev=False)
    parser.add_argument("--input-dir", type=Path, default=Path("../shared/data/ko-general"))
    parser.add_argument("--output-dir", type=Path, default=Path("outputs/nsmc/data"))
    parser.add_argument("--validation-size", type=int, default=2000, help="lines held out for validation")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)

    lines = read_sources(args.input_dir)
    if not 0 < args.validation_size < len(lines):
        parser.error(f"--validation-size must be between 1 and {len(lines) - 1}, got {args.validation_size}")
    random.Random(args.seed).shuffle(lines)
    splits = {"validation": lines[: args.validation_size], "train": lines[args.validation_size :]}
    args.output_dir.mkdir(parents=True, exist_ok=True)
    for name, split in splits.items():
        write_lines(args.output_dir / f"general_{name}.txt", split)
    counts = {
        name: {"lines": len(split), "by_source": dict(sorted(Counter(source for source, _ in split).items()))}
        for name, split in splits.items()
    }
    (args.output_dir / "general_splits.json").write_text(json.dumps(counts, indent=2, ensure_ascii=False) + "\n")
    print(json.dumps({name: count["lines"] for name, count in counts.items()}))
    return counts


if __name__ == "__main__":
    sys.exit(run_entry_point(main))
