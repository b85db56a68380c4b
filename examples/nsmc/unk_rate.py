"""The share of words a biLM's word vocabulary maps to `<UNK>`, per text file, as its tokenizer splits them.

    python examples/nsmc/unk_rate.py --model outputs/nsmc/elmo-ko \
        outputs/nsmc/data/pretrain_train.txt outputs/nsmc/data/pretrain_validation.txt

Words are what the pre-training labels hold (`hf_elmo.pretraining.count_unknown_words`, as `hf-elmo pretrain` counts
them): the tokenizer's pre-tokenizer splits each line, `<S>` and `</S>` are not counted. Prints one JSON
object: `{file: {"words": n, "unk": share}}`.
"""

import argparse
import json
import sys

from hf_elmo import ElmoTokenizer
from hf_elmo.errors import run_entry_point
from hf_elmo.loading import resolve_model_name
from hf_elmo.pretraining import SplitText, count_unknown_words


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], allow_abbrev=False)
    parser.add_argument(
        "--model",
        required=True,
        help="a folder (or bundled model's name) with an ElmoTokenizer holding a word vocabulary",
    )
    parser.add_argument("files", nargs="+", help="text files, one sentence per line")
    args = parser.parse_args(argv)
    tokenizer = ElmoTokenizer.from_pretrained(resolve_model_name(args.model))
    results = {}
    for path in args.files:
        words, unknown = count_unknown_words(tokenizer, SplitText([path], tokenizer.pre_tokenizer, in_memory=False))
        results[path] = {"words": words, "unk": round(unknown / words, 4)}
    print(json.dumps(results, indent=2))
    return results


if __name__ == "__main__":
    sys.exit(run_entry_point(main))
