"""Contextual word vectors and sentiment from the Korean ELMo shipped inside hf_elmo: runs offline.

    python examples/quickstart.py

The biLM `ko-nsmc` was pre-trained on Korean movie reviews (NSMC); `ko-nsmc-sentiment` is a sentiment classifier.
The word 배 means belly, boat or pear: the context-free layer 0 (the character CNN) gives a unit the same vector
wherever it stands, the LSTM layers give it one that depends on the sentence. ko-nsmc's units are morphemes: 배 is a
unit of its own, its particle (가, 를) the next one, and the word 배를 is the mean of the two. Next step, on a
machine online: `python examples/convert_original_elmo.py` converts the original English ELMo.
"""

import torch
from transformers import pipeline
from transformers.utils import logging

from hf_elmo import ElmoModel, ElmoTokenizer, bundled_model_path

SENTENCES = [
    ("배가 고프다", "belly: hungry"),
    ("배가 아프다", "belly: it aches"),
    ("배를 타고 여행을 가다", "boat: travel by"),
    ("배를 깎아 먹었다", "pear: peeled, eaten"),
]
REVIEWS = [
    "정말 재미있고 감동적인 영화였어요",
    "시간 낭비, 돈 아깝다",
    "배우들 연기가 최고다 또 보고 싶다",
    "지루하고 스토리도 엉망이다",
]


def main() -> None:
    logging.disable_progress_bar()
    tokenizer = ElmoTokenizer.from_pretrained(bundled_model_path("ko-nsmc"))
    model = ElmoModel.from_pretrained(bundled_model_path("ko-nsmc")).eval()
    batch = tokenizer([text for text, _ in SENTENCES], padding=True, return_tensors="pt")
    with torch.inference_mode():
        layers = model(**batch, output_hidden_states=True).hidden_states  # n_layers + 1 of (batch, positions, dim)
    # The first word of each sentence holds 배: its vector is the mean of its morphemes (배 and its particle).
    words, _ = batch.pool_to_words(torch.stack(layers))  # (n_layers + 1, batch, words, dim)
    units = tokenizer.split_words(SENTENCES[0][0])
    print(f"ko-nsmc: {len(layers)} layers of {layers[0].shape[-1]} dimensions over morphemes ({' / '.join(units)})")
    print("the word holding 배 (the mean of its morphemes) in:")
    for index, (text, sense) in enumerate(SENTENCES):
        print(f"  [{index}] {text}  ({sense})")
    for number, layer in enumerate(words):
        vectors = torch.nn.functional.normalize(layer[:, 0], dim=-1)
        similarity = vectors @ vectors.T
        kind = "context-free character CNN" if number == 0 else f"LSTM layer {number}, contextual"
        print(f"\ncosine similarity, layer {number} ({kind}):")
        print("      " + "".join(f"{f'[{j}]':>7}" for j in range(len(SENTENCES))))
        for i, row in enumerate(similarity.tolist()):
            print(f"  [{i}] " + "".join(f"{value:7.3f}" for value in row))
        cross = similarity[:2, 2:]
        print(
            f"belly pair {similarity[0, 1]:.3f}, boat vs pear {similarity[2, 3]:.3f}, "
            f"belly vs boat or pear {cross.min():.3f} to {cross.max():.3f}"
        )
    print("(layer 0 reads each morpheme alone: 배를 is one vector for the boat and the pear; the first word's forward")
    print(" half has read only <S> and that word, so the contexts differ in the backward half)")

    classifier = pipeline("text-classification", model=bundled_model_path("ko-nsmc-sentiment"))
    print("\nko-nsmc-sentiment:")
    for review, result in zip(REVIEWS, classifier(REVIEWS)):
        print(f"  {result['label']:>8} {result['score']:.3f}  {review}")


if __name__ == "__main__":
    main()
