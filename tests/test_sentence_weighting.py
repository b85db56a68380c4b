"""Word counts and SIF weights of sentence vectors, and the common component (`hf_elmo.sentence_weighting`)."""

import gzip
import json
from collections import Counter

import numpy as np
import pytest
import torch
from utils import FLOAT32_TOLERANCE

from hf_elmo import ElmoTokenizer
from hf_elmo.pretraining import build_word_vocab
from hf_elmo.sentence_weighting import WORD_COUNTS_FILE, WordCounts, common_component, reference_directions

TEXT = ["the cat sat on the mat", "the dog sat", "a cat, a dog and the bird!"]


@pytest.fixture
def counted_tokenizer(tmp_path) -> ElmoTokenizer:
    """A tokenizer splitting punctuation off words, with a vocabulary of the words of `TEXT` seen twice or more."""
    build_word_vocab(TEXT, min_count=2, pre_tokenizer="whitespace").save(str(tmp_path / "word_vocab.json"))
    return ElmoTokenizer(
        max_characters_per_token=20, pre_tokenizer="whitespace", vocab_file=str(tmp_path / "word_vocab.json")
    )


def test_counts_are_the_vocabularys_words_in_the_text_split_as_the_tokenizer_splits(counted_tokenizer, tmp_path):
    (tmp_path / "one.txt").write_text("\n".join(TEXT[:2]) + "\n\n", encoding="utf-8")
    with gzip.open(tmp_path / "two.txt.gz", "wt", encoding="utf-8") as handle:
        handle.write(TEXT[2] + "\n")
    counts = WordCounts.of_text(counted_tokenizer, [tmp_path / "one.txt", tmp_path / "two.txt.gz"])
    seen = Counter(word for line in TEXT for word in counted_tokenizer.split_words(line))
    vocab = counted_tokenizer.word_tokenizer.get_vocab()
    assert len(counts) == len(vocab) == counted_tokenizer.word_vocab_size
    # <S>, </S> and <UNK> count 0; a word outside the vocabulary ("bird", "!") counts in `words` alone.
    assert {word: int(counts.counts[i]) for word, i in vocab.items()} == {
        "<S>": 0,
        "</S>": 0,
        "<UNK>": 0,
        **{word: seen[word] for word in vocab if word not in ("<S>", "</S>", "<UNK>")},
    }
    assert counts.words == sum(seen.values()) == 18
    with pytest.raises(ValueError, match="word vocabulary"):
        WordCounts.of_text(ElmoTokenizer(), [tmp_path / "one.txt"])


def test_probabilities_and_sif_weights_of_labels(counted_tokenizer):
    vocab = counted_tokenizer.word_tokenizer.get_vocab()
    counts = WordCounts([0, 0, 0] + [3] * (len(vocab) - 3), words=40)
    batch = counted_tokenizer(["the cat purred", "a"], padding=True, return_word_labels=True, return_tensors="pt")
    labels = batch["labels"]  # <S> the cat <UNK> </S>; <S> a </S> -100 -100
    expected_p = torch.tensor([[0, 3 / 40, 3 / 40, 0, 0], [0, 3 / 40, 0, 0, 0]])
    torch.testing.assert_close(counts.probabilities(labels), expected_p)
    torch.testing.assert_close(counts.sif_weights(labels, 0.1), 0.1 / (0.1 + expected_p))
    with pytest.raises(ValueError, match="a must be a number > 0"):
        counts.sif_weights(labels, 0.0)
    with pytest.raises(ValueError, match=f"beyond the {len(vocab)} words counted"):
        counts.probabilities(torch.tensor([[len(vocab)]]))


def test_counts_save_and_load_with_a_folder(tmp_path):
    assert WordCounts.from_pretrained(tmp_path) is None
    WordCounts([0, 0, 0, 5, 2], words=9).save_pretrained(tmp_path)
    assert json.loads((tmp_path / WORD_COUNTS_FILE).read_text()) == {"words": 9, "counts": [0, 0, 0, 5, 2]}
    loaded = WordCounts.from_pretrained(tmp_path)
    assert loaded.counts.tolist() == [0, 0, 0, 5, 2] and loaded.words == 9
    (tmp_path / WORD_COUNTS_FILE).write_text('{"words": 3, "counts": [2, 2]}')
    with pytest.raises(ValueError, match=r"word_counts.json holds no word counts: words must be .* at least the sum"):
        WordCounts.from_pretrained(tmp_path)
    with pytest.raises(ValueError, match="whole numbers >= 0"):
        WordCounts([1, -1], words=3)
    with pytest.raises(ValueError, match="words must be a whole number at least the sum of the counts, got True"):
        WordCounts([1, 0], words=True)
    # A total counted with numpy (`counts.sum()`) is a whole number, and saves as one.
    WordCounts([0, 0, 0, 5, 2], words=np.int64(9)).save_pretrained(tmp_path)
    assert json.loads((tmp_path / WORD_COUNTS_FILE).read_text()) == {"words": 9, "counts": [0, 0, 0, 5, 2]}


def test_common_component_is_the_first_singular_vector_signed_by_the_vectors():
    torch.manual_seed(0)
    shared = torch.nn.functional.normalize(torch.randn(6), dim=0)
    vectors = 5 * shared + 0.1 * torch.randn(50, 6)
    component = common_component(vectors)
    assert component.shape == (6,)
    assert component.norm().item() == pytest.approx(1.0, abs=FLOAT32_TOLERANCE)
    assert component @ shared > 0.99  # the shared direction, signed as the vectors point
    torch.testing.assert_close(common_component(-vectors), -component, atol=FLOAT32_TOLERANCE, rtol=0)
    with pytest.raises(ValueError, match=r"\(n, dim\) with n >= 2"):
        common_component(vectors[:1])


def test_reference_directions_are_the_mean_and_the_principal_directions_of_the_centred_vectors():
    torch.manual_seed(0)
    offset = 3 * torch.randn(6)
    spread = torch.tensor([4.0, 2.0, 0.5, 0.1, 0.1, 0.1])  # variance along each axis of a random rotation
    rotation = torch.linalg.qr(torch.randn(6, 6)).Q
    vectors = offset + (torch.randn(400, 6) * spread) @ rotation.T
    mean, directions = reference_directions(vectors, 2)
    torch.testing.assert_close(mean, vectors.mean(dim=0), atol=FLOAT32_TOLERANCE, rtol=0)
    assert directions.shape == (2, 6)
    torch.testing.assert_close(directions @ directions.T, torch.eye(2), atol=FLOAT32_TOLERANCE, rtol=0)
    # The two axes of largest spread, in order, whatever the offset; each signed by its largest entry.
    assert (directions @ rotation[:, :2]).diagonal().abs().min() > 0.99
    assert (directions.gather(1, directions.abs().argmax(dim=1, keepdim=True)) > 0).all()
    again_mean, again = reference_directions(-vectors, 2)
    torch.testing.assert_close(again, directions, atol=FLOAT32_TOLERANCE, rtol=0)
    torch.testing.assert_close(again_mean, -mean, atol=FLOAT32_TOLERANCE, rtol=0)
    with pytest.raises(ValueError, match=r"count must be a whole number from 1 to 6, got 7"):
        reference_directions(vectors, 7)
    with pytest.raises(ValueError, match=r"count must be a whole number from 1 to 6, got True"):
        reference_directions(vectors, True)
    torch.testing.assert_close(reference_directions(vectors, np.int64(2))[1], directions, atol=0, rtol=0)
    with pytest.raises(ValueError, match=r"\(n, dim\) with n >= 2"):
        reference_directions(vectors[:1], 1)


def test_sif_sentence_vectors_of_a_tiny_model_are_the_hand_computation(counted_tokenizer, tiny_model):
    """Hand-made counts: each word weighs a / (a + count / words) in the mean over its sentence's words."""
    vocab = counted_tokenizer.word_tokenizer.get_vocab()
    by_word = {"the": 6, "cat": 2, "sat": 1, "a": 0}
    words, a = 20, 0.05
    counts = WordCounts([by_word.get(word, 0) for word in sorted(vocab, key=vocab.get)], words=words)
    sentences = ["the cat sat", "a cat , the mat"]  # "mat" and "," are outside the vocabulary: weight 1
    batch = counted_tokenizer(sentences, padding=True, return_word_labels=True, return_tensors="pt")
    weights = counts.sif_weights(batch.pop("labels"), a)
    with torch.no_grad():
        vectors = tiny_model.sentence_embedding(**batch, word_weights=weights)
        layers = tiny_model(**batch, output_hidden_states=True).hidden_states
    for row, sentence in enumerate(sentences):
        split = sentence.split()
        expected = sum(
            a / (a + by_word.get(word, 0) / words) * sum(layer[row, 1 + k] for layer in layers) / len(layers)
            for k, word in enumerate(split)
        ) / len(split)
        torch.testing.assert_close(vectors[row], expected, atol=FLOAT32_TOLERANCE, rtol=0)
