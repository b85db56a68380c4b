"""
Korean text split into morphemes here, for a pre-training run on a machine without kiwipiepy (a lent GPU).

`split` writes each line of the input files as its `korean_morphemes` units joined by one space (gzip), which the
`whitespace_split` pre-tokenizer reads back as the same units: a run on that text builds the vocabularies and sees the
batches a `korean_morphemes` run on the raw text would. `restore` then gives the trained folder back its
`korean_morphemes` tokenizer (the pre-tokenizer and the analyser's versions in `tokenizer_config.json`, nothing else
changes) and checks that it reads the raw text exactly as the run read the pre-split text: the same character rows and
word labels, line by line.

    python examples/nsmc/presplit.py split --input RAW.txt ... --output SPLIT.txt.gz
    python examples/nsmc/presplit.py restore --model FOLDER --raw RAW.txt --split SPLIT.txt.gz
"""

import argparse
import gzip
import json
import sys
from itertools import islice
from pathlib import Path

from hf_elmo import ElmoTokenizer
from hf_elmo.errors import run_entry_point
from hf_elmo.korean_morphemes import installed_versions
from hf_elmo.pretraining import SplitText
from hf_elmo.text_files import read_sentences


def split(inputs: list[str], output: Path) -> None:
    """Writes the morphemes of every line of `inputs`, in order, one line each, to `output` (gzip)."""
    lines = empty = 0
    with gzip.open(output, "wt", encoding="utf-8") as out:
        for input_path in inputs:
            for units in SplitText([input_path], "korean_morphemes", in_memory=False):
                if any(unit.split() != [unit] for unit in units):  # whitespace_split would cut such a unit in two
                    raise ValueError(f"{input_path}: a morpheme holds whitespace: {units}")
                # A line of no morphemes is a blank line, which every reader skips, as it skips the raw line's units.
                out.write(" ".join(units) + "\n")
                lines, empty = lines + 1, empty + (not units)
    print(f"{output}: {lines:,} lines of morphemes ({empty:,} of none)")


def restore(model: Path, raw: Path, split_text: Path, lines: int) -> None:
    """Makes `model`'s tokenizer a `korean_morphemes` one, then checks it on the first `lines` lines of both texts."""
    config_path = model / "tokenizer_config.json"
    config = json.loads(config_path.read_text(encoding="utf-8"))
    if config["pre_tokenizer"] != "whitespace_split":
        raise ValueError(f"{model} was not trained on pre-split text (pre_tokenizer {config['pre_tokenizer']!r})")
    read_as_split = ElmoTokenizer.from_pretrained(model)
    config["pre_tokenizer"] = "korean_morphemes"
    config["analyser_versions"] = installed_versions(None)
    config_path.write_text(json.dumps(config, indent=2, ensure_ascii=False) + "\n", encoding="utf-8")
    read_raw = ElmoTokenizer.from_pretrained(model)
    # Raw lines of no morphemes were written blank, and reading skips blank lines: skip them here too.
    raw_lines = (line for line in read_sentences([str(raw)]) if read_raw.split_words(line))
    pairs = zip(islice(raw_lines, lines), islice(read_sentences([str(split_text)]), lines))
    for number, (raw_line, split_line) in enumerate(pairs, 1):
        expected, got = read_as_split(split_line, return_word_labels=True), read_raw(raw_line, return_word_labels=True)
        if expected["input_ids"] != got["input_ids"] or expected["labels"] != got["labels"]:
            raise ValueError(f"line {number} reads otherwise raw than pre-split: {raw_line!r} / {split_line!r}")
    print(f"{model}: korean_morphemes; the first {number:,} raw lines read as their pre-split lines were")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], allow_abbrev=False)
    commands = parser.add_subparsers(dest="command", required=True)
    split_parser = commands.add_parser("split", help="write the morphemes of raw text, one line each (gzip)")
    split_parser.add_argument("--input", nargs="+", required=True, help="raw text files, one sentence a line")
    split_parser.add_argument("--output", type=Path, required=True, help="the pre-split text, a .gz file")
    restore_parser = commands.add_parser("restore", help="give a folder trained on pre-split text its tokenizer")
    restore_parser.add_argument("--model", type=Path, required=True, help="the folder the run wrote")
    restore_parser.add_argument("--raw", type=Path, required=True, help="a raw text file")
    restore_parser.add_argument("--split", type=Path, required=True, help="the same text as `split` wrote it")
    restore_parser.add_argument("--lines", type=int, default=5000, help="lines of both compared")
    args = parser.parse_args()
    if args.command == "split":
        split(args.input, args.output)
    else:
        restore(args.model, args.raw, args.split, args.lines)


if __name__ == "__main__":
    sys.exit(run_entry_point(main))
