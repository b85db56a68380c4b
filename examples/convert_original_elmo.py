"""Converts the released original English ELMo (by default downloaded from its public URLs) and embeds a few sentences.

    python examples/convert_original_elmo.py     # needs network; writes outputs/elmo-original
    python examples/convert_original_elmo.py --options-file options.json --weight-file weights.hdf5  # offline

The next step after `examples/quickstart.py` on a machine online. Without network, fetch the two files elsewhere and
pass their local paths; a download that fails stops the script with one line saying which. An output folder that
exists is replaced only with `--overwrite`.
"""

import argparse
import sys

import torch

from hf_elmo import ElmoModel, ElmoTokenizer
from hf_elmo.conversion_original import ORIGINAL_OPTIONS_URL, ORIGINAL_WEIGHTS_URL, convert_original
from hf_elmo.errors import ElmoConversionError, first_line, run_entry_point

SENTENCES = [
    ["The", "bank", "raised", "its", "interest", "rates", "."],
    ["We", "sat", "on", "the", "river", "bank", "."],
    ["She", "went", "to", "the", "bank", "to", "deposit", "money", "."],
]


def parse_arguments(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        description="Convert the original English ELMo (bilm-tf / AllenNLP) and compare the word 'bank' in context.",
        allow_abbrev=False,
    )
    parser.add_argument(
        "--options-file",
        default=ORIGINAL_OPTIONS_URL,
        help="options.json: a local path or a URL (default: %(default)s)",
    )
    parser.add_argument(
        "--weight-file",
        default=ORIGINAL_WEIGHTS_URL,
        help="weights.hdf5: a local path or a URL (default: %(default)s)",
    )
    parser.add_argument("--output-dir", default="outputs/elmo-original", help="the model folder to write")
    parser.add_argument("--overwrite", action="store_true", help="replace a non-empty output folder")
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse_arguments(argv)
    try:
        convert_original(args.options_file, args.weight_file, args.output_dir, overwrite=args.overwrite)
    except ElmoConversionError as error:
        print(f"convert_original_elmo.py: error: {first_line(error)}", file=sys.stderr)
        return 1
    tokenizer = ElmoTokenizer.from_pretrained(args.output_dir)
    model = ElmoModel.from_pretrained(args.output_dir).eval()
    batch = tokenizer(SENTENCES, is_split_into_words=True, padding=True, return_tensors="pt")
    with torch.inference_mode():
        top = model(**batch).last_hidden_state
    print(f"converted to {args.output_dir}; top layer {tuple(top.shape)} (batch, words + 2, 2 * projection_dim)")
    bank = [top[i, 1 + words.index("bank")] for i, words in enumerate(SENTENCES)]
    cosine = torch.nn.functional.cosine_similarity
    print(f"cos(bank: finance, bank: river)   = {cosine(bank[0], bank[1], dim=0):.3f}")
    print(f"cos(bank: finance, bank: deposit) = {cosine(bank[0], bank[2], dim=0):.3f}")
    return 0


if __name__ == "__main__":
    sys.exit(run_entry_point(main))
