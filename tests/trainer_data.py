"""Small learnable tasks for the Trainer tests (shared by the in-process tests and the torchrun worker)."""

import random

from datasets import Dataset

POSITIVE = ["good", "great", "fine", "nice", "happy", "superb"]
NEGATIVE = ["bad", "awful", "poor", "sad", "grim", "vile"]
FILLER = ["the", "movie", "was", "a", "plot", "and", "it", "felt"]
ENTITY_LABELS = ["O", "B-LOC"]
PLACES = ["Paris", "Rome", "Oslo", "Lima", "Cairo", "Quito"]


def sentence_dataset(tokenizer, n: int, seed: int) -> Dataset:
    """Sentences labelled 1 when they hold positive words, 0 when negative ones; tokenized, not padded."""
    rng = random.Random(seed)
    texts, labels = [], []
    for _ in range(n):
        label = rng.randrange(2)
        words = rng.sample(FILLER, 1) + rng.sample(POSITIVE if label else NEGATIVE, 3)
        rng.shuffle(words)
        texts.append(" ".join(words))
        labels.append(label)
    dataset = Dataset.from_dict({"text": texts, "label": labels})
    return dataset.map(lambda batch: tokenizer(batch["text"]), batched=True, remove_columns=["text"])


def align_labels(encoding, word_labels: list[list[int]]) -> list[list[int]]:
    """Per-position labels from per-word ones through `word_ids()`; -100 at `<S>`, `</S>` and padding."""
    aligned = []
    for i, labels in enumerate(word_labels):
        aligned.append([-100 if word is None else labels[word] for word in encoding.word_ids(i)])
    return aligned


def entity_dataset(tokenizer, n: int, seed: int) -> Dataset:
    """Sentences whose place names are tagged B-LOC; tokenized with labels aligned to positions."""
    rng = random.Random(seed)
    sentences, tags = [], []
    for _ in range(n):
        words = rng.sample(FILLER, 4) + rng.sample(PLACES, 2)
        rng.shuffle(words)
        sentences.append(words)
        tags.append([int(word in PLACES) for word in words])

    def tokenize(batch):
        encoding = tokenizer(batch["words"], is_split_into_words=True)
        encoding["labels"] = align_labels(encoding, batch["tags"])
        return encoding

    dataset = Dataset.from_dict({"words": sentences, "tags": tags})
    return dataset.map(tokenize, batched=True, remove_columns=["words", "tags"])
