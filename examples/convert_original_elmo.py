"""Converts the released original English ELMo (downloaded from its public URLs) and embeds a few sentences.

    python examples/convert_original_elmo.py     # needs network; writes outputs/elmo-original

The next step after `examples/quickstart.py` on a machine online. Without network it stops with a one-line message
saying which download failed.
"""

import sys

import torch

from hf_elmo import ElmoModel, ElmoTokenizer
from hf_elmo.conversion_original import ORIGINAL_OPTIONS_URL, ORIGINAL_WEIGHTS_URL, convert_original
from hf_elmo.errors import ElmoConversionError

OUTPUT_DIR = "outputs/elmo-original"
SENTENCES = [
    ["The", "bank", "raised", "its", "interest", "rates", "."],
    ["We", "sat", "on", "the", "river", "bank", "."],
    ["She", "went", "to", "the", "bank", "to", "deposit", "money", "."],
]


def main() -> int:
    try:
        convert_original(ORIGINAL_OPTIONS_URL, ORIGINAL_WEIGHTS_URL, OUTPUT_DIR, overwrite=True)
    except ElmoConversionError as error:
        print(f"error: {error}", file=sys.stderr)
        return 1
    tokenizer = ElmoTokenizer.from_pretrained(OUTPUT_DIR)
    model = ElmoModel.from_pretrained(OUTPUT_DIR).eval()
    batch = tokenizer(SENTENCES, is_split_into_words=True, padding=True, return_tensors="pt")
    with torch.inference_mode():
        top = model(**batch).last_hidden_state
    print(f"converted to {OUTPUT_DIR}; top layer {tuple(top.shape)} (batch, words + 2, 2 * projection_dim)")
    bank = [top[i, 1 + words.index("bank")] for i, words in enumerate(SENTENCES)]
    cosine = torch.nn.functional.cosine_similarity
    print(f"cos(bank: finance, bank: river)   = {cosine(bank[0], bank[1], dim=0):.3f}")
    print(f"cos(bank: finance, bank: deposit) = {cosine(bank[0], bank[2], dim=0):.3f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
