"""The share of words a biLM's word vocabulary maps to `<UNK>`, per text file, as its tokenizer splits them.

    python examples/nsmc/unk_rate.py --model outputs/nsmc/elmo-ko \
        outputs/nsmc/data/pretrain_train.txt outputs/nsmc/data/pretrain_validation.txt

Words are what the pre-training labels hold: the tokenizer's pre-tokenizer splits each line, `<S>` and `</S>` are
not counted. Prints one JSON object: `{file: {"words": n, "unk": share}}`.
"""

import argparse
import json

from tokenizers import Tokenizer

from hf_elmo import ElmoTokenizer
from hf_elmo.pretraining import read_lines
from hf_elmo.tokenization_elmo import UNK_TOKEN


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", required=True, help="a folder with an ElmoTokenizer holding a word vocabulary")
    parser.add_argument("files", nargs="+", help="text files, one sentence per line")
    args = parser.parse_args(argv)
    tokenizer = ElmoTokenizer.from_pretrained(args.model)
    vocabulary = Tokenizer.from_file(f"{args.model}/word_vocab.json")
    unk = vocabulary.token_to_id(UNK_TOKEN)
    results = {}
    for path in args.files:
        words = unknown = 0
        for line in read_lines([path]):
            ids = [vocabulary.token_to_id(word) for word in tokenizer.split_words(line)]
            words += len(ids)
            unknown += sum(i is None or i == unk for i in ids)
        results[path] = {"words": words, "unk": round(unknown / words, 4)}
    print(json.dumps(results, indent=2))
    return results


if __name__ == "__main__":
    main()
