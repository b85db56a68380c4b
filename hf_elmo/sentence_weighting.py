"""What a sentence vector weighs beyond the biLM: word counts for smooth inverse frequency, and a common component.

Smooth inverse frequency (SIF; Arora, Liang and Ma, "A Simple but Tough-to-Beat Baseline for Sentence Embeddings",
2017) weighs each word `a / (a + p(w))` in a sentence's mean, `p(w)` the word's probability in a large text, so that
frequent words, which say little about any one sentence, count less. hf_elmo takes `p(w)` from the text a biLM was
pre-trained on, counted with the word vocabulary of its folder and saved beside it as `word_counts.json`
(`hf-elmo pretrain` writes it). [`WordCounts`] reads it and weighs the word-vocabulary ids the tokenizer gives as
`labels` (`return_word_labels=True`). A word outside the vocabulary (`<UNK>`) is rarer than any in it: it counts as
never seen, `p(w) = 0`, weight 1.

The common component (Arora et al.'s second step) is the first singular vector of the sentence vectors of a text,
a direction they all share ([`common_component`]). "All-but-the-top" (Mu and Viswanath, "All-but-the-Top: Simple and
Effective Postprocessing for Word Representations", 2018) goes further: it subtracts the mean vector of a text and
projects out its first few principal directions ([`reference_directions`]), the few directions along which most
vectors of any sentence vary alike. `ElmoModel.sentence_embedding` removes what it is given; estimate either on a
reference text, never on the sentences to be compared, so that a vector depends on its sentence alone.
"""

import json
import os
from collections.abc import Iterable, Sequence
from pathlib import Path

import numpy as np
import torch
from transformers.utils import cached_file

from .errors import FileContentError, JsonFields, first_line, is_integer
from .text_files import read_sentences
from .tokenization_elmo import BOS_TOKEN, EOS_TOKEN, UNK_TOKEN, ElmoTokenizer

WORD_COUNTS_FILE = "word_counts.json"


class WordCounts:
    """
    How often each word of a word vocabulary occurs in a text, by word-vocabulary id, and how many words the text
    holds.

    Args:
        counts (sequence of `int`): `counts[i]`, the occurrences of word id `i`; `<S>`, `</S>` and `<UNK>` count 0.
        words (`int`): the words of the text, those outside the vocabulary included: `p(w) = counts[w] / words`.
    """

    def __init__(self, counts: Sequence[int] | np.ndarray, words: int):
        counts = np.asarray(counts)
        if counts.ndim != 1 or counts.dtype.kind not in "iu" or (counts < 0).any():
            raise ValueError("counts must be a list of whole numbers >= 0, one per word-vocabulary id")
        if not is_integer(words) or words < counts.sum():
            raise ValueError(f"words must be a whole number at least the sum of the counts, got {words!r}")
        self.counts = counts.astype(np.int64)
        self.words = int(words)  # numpy's integer too, which JSON cannot write

    def __len__(self) -> int:
        """The size of the word vocabulary counted."""
        return len(self.counts)

    @classmethod
    def of_text(cls, tokenizer: ElmoTokenizer, paths: Iterable[str | Path]) -> "WordCounts":
        """
        The counts of the words of text files, one sentence a line (plain or `.gz`, read as pre-training reads
        them), split and looked up as the tokenizer splits and labels text.
        """
        return cls.of_sentences(tokenizer, map(tokenizer.split_words, read_sentences(paths)))

    @classmethod
    def of_sentences(cls, tokenizer: ElmoTokenizer, sentences: Iterable[Sequence[str]]) -> "WordCounts":
        """The counts of the words of sentences already split into the tokenizer's units (`pretraining.SplitText`)."""
        if tokenizer.word_vocab_size is None:
            raise ValueError("counting words needs a tokenizer with a word vocabulary (vocab_file=...)")
        ids = np.fromiter((tokenizer.word_to_id(unit) for units in sentences for unit in units), dtype=np.int64)
        counts = np.bincount(ids, minlength=tokenizer.word_vocab_size)
        words = int(counts.sum())
        for special in (BOS_TOKEN, EOS_TOKEN, UNK_TOKEN):
            counts[tokenizer.word_to_id(special)] = 0
        return cls(counts, words)

    @classmethod
    def from_pretrained(cls, name_or_path: str | os.PathLike, **hub_kwargs) -> "WordCounts | None":
        """
        The counts saved in a folder or Hub repository (`word_counts.json`), or `None` where it has none.
        `hub_kwargs` (`subfolder`, `revision`, `token`, `cache_dir`, `local_files_only`) go to transformers'
        `cached_file`.
        """
        path = cached_file(name_or_path, WORD_COUNTS_FILE, _raise_exceptions_for_missing_entries=False, **hub_kwargs)
        if path is None:
            return None
        fix = "copy or download the model folder again"
        saved = JsonFields.of_file(path, fix)
        counts, words = saved.take("counts", list), saved.take("words", int)
        try:
            return cls(counts, words)
        except ValueError as error:
            raise FileContentError(f"{path} holds no word counts: {first_line(error)}; {fix}") from error

    def save_pretrained(self, folder: str | os.PathLike) -> Path:
        """Writes `word_counts.json` in `folder` (one line: the counts in vocabulary order)."""
        path = Path(folder) / WORD_COUNTS_FILE
        saved = {"words": self.words, "counts": self.counts.tolist()}
        path.write_text(json.dumps(saved, separators=(",", ":")) + "\n", encoding="utf-8")
        return path

    def probabilities(self, labels: torch.Tensor) -> torch.Tensor:
        """
        `p(w)` of each position, `labels` `(batch, positions)` of word-vocabulary ids (from the tokenizer's
        `return_word_labels=True`) -> float32 of the same shape; 0 for `<S>`, `</S>`, `<UNK>` and padding (-100).
        """
        if labels.numel() and int(labels.max()) >= len(self):
            raise ValueError(f"labels hold word id {int(labels.max())}, beyond the {len(self)} words counted")
        counts = torch.as_tensor(self.counts, device=labels.device)
        found = counts[labels.clamp(min=0)]
        return torch.where(labels >= 0, found, 0).to(torch.float64).div(max(self.words, 1)).to(torch.float32)

    def sif_weights(self, labels: torch.Tensor, a: float) -> torch.Tensor:
        """`a / (a + p(w))` of each position of `labels` `(batch, positions)`: float32 of the same shape."""
        if not a > 0:
            raise ValueError(f"a must be a number > 0, got {a!r}")
        return a / (a + self.probabilities(labels))


def weighted_encoding(
    tokenizer: ElmoTokenizer, texts: list[str], word_counts: "WordCounts | None", sif_a: float | None, **encoding
) -> dict[str, torch.Tensor]:
    """
    The padded tensors of `texts` for `ElmoModel.sentence_embedding`, with `word_weights` `(batch, positions)`, each
    word's SIF weight, where both `word_counts` and `sif_a` are given (without, the plain mean). `encoding` goes to the
    tokenizer (`truncation`, `max_length`).
    """
    weighted = word_counts is not None and sif_a is not None
    features = dict(tokenizer(texts, padding=True, return_word_labels=weighted, return_tensors="pt", **encoding))
    if weighted:
        features["word_weights"] = word_counts.sif_weights(features.pop("labels"), sif_a)
    return features


def common_component(vectors: torch.Tensor) -> torch.Tensor:
    """
    The first right singular vector of `vectors` `(n, dim)`, not centred (as Arora et al. compute it): `(dim,)` of
    norm 1, signed so that the vectors' mean projection on it is positive, the same direction on every run. Estimate
    it on a reference text and save it with the model (`ElmoSentenceEmbedder`'s `common_component`), never on the
    sentences to be compared: a vector then depends on its sentence alone.
    """
    if vectors.dim() != 2 or len(vectors) < 2:
        raise ValueError(f"vectors must be (n, dim) with n >= 2, got shape {tuple(vectors.shape)}")
    matrix = vectors.detach().to(torch.float64)
    component = torch.linalg.svd(matrix, full_matrices=False).Vh[0]
    if (matrix @ component).sum() < 0:
        component = -component
    return component.to(vectors.dtype)


def reference_directions(vectors: torch.Tensor, count: int) -> tuple[torch.Tensor, torch.Tensor]:
    """
    The mean `(dim,)` of `vectors` `(n, dim)`, the sentence vectors of a reference text, and its first `count`
    principal directions `(count, dim)` (orthonormal rows: the right singular vectors of the centred vectors, each
    signed so that its largest entry is positive, the same on every run): `sentence_embedding`'s `reference_mean` and
    `common_component` for all-but-the-top.
    """
    if vectors.dim() != 2 or len(vectors) < 2:
        raise ValueError(f"vectors must be (n, dim) with n >= 2, got shape {tuple(vectors.shape)}")
    if not is_integer(count) or not 1 <= count <= min(vectors.shape):
        raise ValueError(f"count must be a whole number from 1 to {min(vectors.shape)}, got {count!r}")
    matrix = vectors.detach().to(torch.float64)
    mean = matrix.mean(dim=0)
    directions = torch.linalg.svd(matrix - mean, full_matrices=False).Vh[:count]
    largest = directions.gather(1, directions.abs().argmax(dim=1, keepdim=True))
    directions = directions * largest.sign()
    return mean.to(vectors.dtype), directions.to(vectors.dtype)
