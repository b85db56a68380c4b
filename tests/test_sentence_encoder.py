"""`ElmoSentenceEmbedder`: a folder's own sentence vector in one call, as `SentenceTransformer(folder)` gives it."""

import json
from pathlib import Path

import numpy as np
import pytest
import torch
from utils import FLOAT32_TOLERANCE, require, save_with_word_counts

import hf_elmo.loading
from hf_elmo import ElmoModel, ElmoSentenceEmbedder, ElmoTokenizer, bundled_model_path
from hf_elmo.folder_layout import ENCODER_CONFIG_FILE
from hf_elmo.sentence_weighting import WordCounts

TEXTS = ["the cat sat on the mat", "a", "hello,  world  again !", "", "one two three four five six seven", "x y"]
KOREAN = ["배가 너무 고프다", "큰 배가 항구에 들어왔다", "가게에서 산 배가 달다"]


@pytest.fixture
def set_folder(tmp_path, tiny_model) -> Path:
    """A tiny biLM folder with word counts of `TEXTS` and settings of every kind in its `sentence_bert_config.json`."""
    folder = save_with_word_counts(tmp_path / "set", tiny_model, TEXTS)
    dim = tiny_model.config.hidden_size
    generator = torch.Generator().manual_seed(0)
    settings = {
        "layer_weights": [0.2, 0.3, 0.5],
        "max_seq_length": None,
        "sif_a": 1e-2,
        "common_component": torch.randn(2, dim, generator=generator).tolist(),
        "reference_mean": torch.randn(dim, generator=generator).tolist(),
    }
    (folder / ENCODER_CONFIG_FILE).write_text(json.dumps(settings), encoding="utf-8")
    return folder


def test_from_pretrained_reads_every_setting_of_the_folder(set_folder):
    """The vectors are `sentence_embedding`'s given the folder's SIF weights, layer weights and reference statistics:
    nothing the folder holds is left out."""
    embedder = ElmoSentenceEmbedder.from_pretrained(set_folder)
    settings = json.loads((set_folder / ENCODER_CONFIG_FILE).read_text())
    model, tokenizer = ElmoModel.from_pretrained(set_folder).eval(), ElmoTokenizer.from_pretrained(set_folder)
    batch = tokenizer(TEXTS, padding=True, return_word_labels=True, return_tensors="pt")
    weights = WordCounts.from_pretrained(set_folder).sif_weights(batch.pop("labels"), settings["sif_a"])
    with torch.inference_mode():
        expected = model.sentence_embedding(
            **batch,
            word_weights=weights,
            layer_weights=settings["layer_weights"],
            common_component=settings["common_component"],
            reference_mean=settings["reference_mean"],
        )
        plain = model.sentence_embedding(**tokenizer(TEXTS, padding=True, return_tensors="pt"))
    vectors = embedder.encode(TEXTS)
    assert vectors.shape == (len(TEXTS), model.config.hidden_size)
    torch.testing.assert_close(vectors, expected, atol=FLOAT32_TOLERANCE, rtol=0)
    assert not torch.allclose(vectors, plain, atol=1e-3)
    assert embedder.settings == settings


def test_a_vector_does_not_depend_on_its_batch(set_folder):
    embedder = ElmoSentenceEmbedder.from_pretrained(set_folder)
    one_by_one = embedder.encode(TEXTS, batch_size=1)
    torch.testing.assert_close(embedder.encode(TEXTS, batch_size=4), one_by_one, atol=FLOAT32_TOLERANCE, rtol=0)
    halves = embedder.encode(TEXTS, batch_size=np.int64(len(TEXTS)) // 2)  # numpy's integers are whole numbers too
    torch.testing.assert_close(halves, one_by_one, atol=FLOAT32_TOLERANCE, rtol=0)
    torch.testing.assert_close(embedder.encode(TEXTS[::-1]).flip(0), one_by_one, atol=FLOAT32_TOLERANCE, rtol=0)


def test_a_folder_without_settings_takes_the_defaults(tmp_path, tiny_model, tiny_tokenizer):
    """No `sentence_bert_config.json` and no word counts: the plain mean of the layers, `sentence_embedding`'s
    defaults."""
    tiny_model.save_pretrained(tmp_path / "plain")
    tiny_tokenizer.save_pretrained(tmp_path / "plain")
    (tmp_path / "plain" / ENCODER_CONFIG_FILE).unlink()
    embedder = ElmoSentenceEmbedder.from_pretrained(tmp_path / "plain")
    with torch.inference_mode():
        expected = tiny_model.sentence_embedding(**tiny_tokenizer(TEXTS, padding=True, return_tensors="pt"))
    torch.testing.assert_close(embedder.encode(TEXTS), expected, atol=FLOAT32_TOLERANCE, rtol=0)
    assert embedder.encode([]).shape == (0, tiny_model.config.hidden_size)


def test_the_bundled_biLM_gives_the_vector_of_its_sentence_transformers_folder():
    """One call gives what `SentenceTransformer(folder)` gives, and not `sentence_embedding`'s plain mean."""
    require("sentence_transformers")
    from sentence_transformers import SentenceTransformer

    folder = bundled_model_path("ko-nsmc")
    vectors = ElmoSentenceEmbedder.from_pretrained("ko-nsmc").encode(KOREAN)
    through_folder = SentenceTransformer(folder, trust_remote_code=True, local_files_only=True, device="cpu")
    torch.testing.assert_close(
        vectors, through_folder.encode(KOREAN, convert_to_tensor=True), atol=FLOAT32_TOLERANCE, rtol=0
    )
    model, tokenizer = ElmoModel.from_pretrained(folder).eval(), ElmoTokenizer.from_pretrained(folder)
    with torch.inference_mode():
        plain = model.sentence_embedding(**tokenizer(KOREAN, padding=True, return_tensors="pt"))
    assert not torch.allclose(vectors, plain, atol=1e-2)


@pytest.mark.parametrize(
    ("texts", "batch_size", "message"),
    [
        ("one text", 8, r"^ElmoSentenceEmbedder embeds a list of texts; for one text, pass \[text\]$"),
        (["a", 3], 8, r"^ElmoSentenceEmbedder embeds texts \(str\), one per input, got int$"),
        (None, 8, r"^ElmoSentenceEmbedder embeds a list of texts, got NoneType$"),
        (["a"], 0, r"^batch_size must be a whole number >= 1, got 0$"),
        (["a"], True, r"^batch_size must be a whole number >= 1, got True$"),  # Python's int 1, a flag by mistake
    ],
)
def test_bad_input_is_one_line(set_folder, texts, batch_size, message):
    with pytest.raises(ValueError, match=message):
        ElmoSentenceEmbedder.from_pretrained(set_folder).encode(texts, batch_size=batch_size)


def test_settings_hf_elmo_does_not_know_are_refused(set_folder):
    settings = json.loads((set_folder / ENCODER_CONFIG_FILE).read_text())
    (set_folder / ENCODER_CONFIG_FILE).write_text(json.dumps({**settings, "pooling": "max"}), encoding="utf-8")
    with pytest.raises(
        ValueError, match=r"names settings hf_elmo does not know: pooling; copy or download the model folder again$"
    ):
        ElmoSentenceEmbedder.from_pretrained(set_folder)


def test_a_missing_model_is_one_line(tmp_path):
    with pytest.raises(ValueError, match=r"^no such model folder: "):
        ElmoSentenceEmbedder.from_pretrained(tmp_path / "absent")


def test_a_bundled_name_is_resolved_once_and_its_settings_and_counts_read_from_its_folder(monkeypatch):
    """`from_pretrained("ko-nsmc")` resolves the name once, in the loader, and reads the settings and word counts from
    the folder it resolved to."""
    resolved = []
    resolve = hf_elmo.loading.resolve_model_name
    monkeypatch.setattr(hf_elmo.loading, "resolve_model_name", lambda *args: resolved.append(args) or resolve(*args))
    embedder = ElmoSentenceEmbedder.from_pretrained("ko-nsmc")
    folder = bundled_model_path("ko-nsmc")
    assert resolved == [("ko-nsmc", True)]
    assert embedder.settings == json.loads((Path(folder) / ENCODER_CONFIG_FILE).read_text(encoding="utf-8"))
    assert embedder.word_counts is not None and len(embedder.word_counts) == embedder.tokenizer.word_vocab_size
