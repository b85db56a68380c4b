"""The `korean_morphemes` pre-tokenizer: its units and words, what a saved tokenizer records, and the paths that use it
(pooling to words, token labels, pre-training, `hf-elmo embed`, sentence-transformers, ONNX)."""

import importlib.util
import json
import logging
import pickle
import sys
from pathlib import Path

import numpy as np
import pytest
import tomllib
import torch
from utils import FLOAT32_TOLERANCE, read_hdf5, reference_layers, require, tiny_config

from hf_elmo import ElmoForTokenClassification, ElmoModel, ElmoTokenizer
from hf_elmo.cli import main as cli_main
from hf_elmo.korean_morphemes import KoreanMorphemes, installed_versions
from hf_elmo.pretraining import main as pretraining_main
from hf_elmo.tokenization_elmo import pool_to_words

require("kiwipiepy", reason="the Korean tests need the korean extra (kiwipiepy)")

SENTENCE = "배를 타고 여행을 가다"
MORPHEMES = ["배", "를", "타", "고", "여행", "을", "가", "다"]


@pytest.fixture(scope="module")
def tokenizer() -> ElmoTokenizer:
    return ElmoTokenizer(max_characters_per_token=20, pre_tokenizer="korean_morphemes")


@pytest.fixture
def korean_folder(tmp_path, tokenizer):
    """A tiny random biLM saved with the Korean tokenizer, and the model."""
    torch.manual_seed(0)
    model = ElmoModel(tiny_config()).eval()
    model.save_pretrained(tmp_path / "model")
    tokenizer.save_pretrained(tmp_path / "model")
    return tmp_path / "model", model


# -- units, spans and words -------------------------------------------------------------------------------------------


def test_morphemes_are_the_positions_and_word_ids_their_whitespace_words(tokenizer):
    encoding = tokenizer([SENTENCE, "했다"], padding=True, return_offsets_mapping=True)
    assert tokenizer.tokenize(SENTENCE) == MORPHEMES
    assert encoding.word_ids(0) == [None, 0, 0, 1, 1, 2, 2, 3, 3, None]
    assert tokenizer.decode(encoding["input_ids"][0], skip_special_tokens=True) == " ".join(MORPHEMES)
    assert encoding["offset_mapping"][0][1:3] == [(0, 1), (1, 2)]
    # A contraction comes apart into forms that are not in the text; both are read from its one character.
    assert tokenizer.tokenize("했다") == ["하", "었", "다"]
    assert encoding.word_ids(1)[:5] == [None, 0, 0, 0, None]
    assert encoding["offset_mapping"][1][1:4] == [(0, 1), (0, 1), (1, 2)]


def test_no_unit_spans_whitespace():
    """The multi-word dictionary (시네마 천국) and serial numbers (2: 20) would join words across spaces."""
    text = "시네마천국 을 봤는데 2: 20 에  끝났다 진짜"
    words = text.split()
    for form, (start, end), word in KoreanMorphemes().analyse(text):
        assert not any(character.isspace() for character in form + text[start:end]), form
        assert text[start:end] in words[word], (form, word)
    # kiwipiepy reads \x1c, a space to str.split, as a symbol: it belongs to a word beside it.
    assert [word for *_, word in KoreanMorphemes().analyse("\x1c배 가\x1c 나")] == [0, 0, 1, 1, 2]


def test_pre_split_units_stay_positions(tokenizer):
    """The analyser splits raw strings: given units (as `hf-elmo embed --pretokenize` passes them) are positions."""
    assert tokenizer([["배를", "타고"]], is_split_into_words=True).word_ids(0) == [None, 0, 1, None]


def test_truncation_keeps_whole_positions_and_their_words(tokenizer):
    encoding = tokenizer(SENTENCE, max_length=5)
    assert encoding.word_ids() == [None, 0, 0, 1, None]


# -- saved with the tokenizer -----------------------------------------------------------------------------------------


def test_the_choice_and_the_analyser_versions_are_saved_and_reload(tokenizer, tmp_path):
    tokenizer.save_pretrained(tmp_path)
    saved = json.loads((tmp_path / "tokenizer_config.json").read_text(encoding="utf-8"))
    assert saved["pre_tokenizer"] == "korean_morphemes"
    assert saved["analyser_versions"] == installed_versions()
    assert set(installed_versions()) == {"kiwipiepy", "kiwipiepy_model"}
    reloaded = ElmoTokenizer.from_pretrained(tmp_path)
    assert reloaded.pre_tokenizer == "korean_morphemes" and reloaded.analyser_versions == installed_versions()
    assert reloaded([SENTENCE])["input_ids"] == tokenizer([SENTENCE])["input_ids"]
    assert ElmoTokenizer().analyser_versions is None
    with pytest.raises(ValueError, match="analyser_versions go with pre_tokenizer='korean_morphemes'"):
        ElmoTokenizer(analyser_versions=installed_versions())


def test_other_analyser_versions_warn_once_and_stay_recorded(tokenizer, tmp_path, caplog):
    tokenizer.save_pretrained(tmp_path / "old")
    config_file = tmp_path / "old" / "tokenizer_config.json"
    config = json.loads(config_file.read_text(encoding="utf-8"))
    old = {"kiwipiepy": "0.20.0", "kiwipiepy_model": "0.20.0"}  # below the extra's floor: never installed here
    config_file.write_text(json.dumps({**config, "analyser_versions": old}), encoding="utf-8")
    with caplog.at_level(logging.WARNING):
        first = ElmoTokenizer.from_pretrained(tmp_path / "old")
        ElmoTokenizer.from_pretrained(tmp_path / "old")
    warnings = [record.getMessage() for record in caplog.records if "morphemes were made with" in record.getMessage()]
    assert len(warnings) == 1 and "\n" not in warnings[0]
    assert "kiwipiepy 0.20.0" in warnings[0] and "pip install kiwipiepy==0.20.0 kiwipiepy_model==0.20.0" in warnings[0]
    assert first.analyser_versions == old  # what the model's units were made with, also once saved again
    first.save_pretrained(tmp_path / "again")
    again = json.loads((tmp_path / "again" / "tokenizer_config.json").read_text(encoding="utf-8"))
    assert again["analyser_versions"] == old


def test_a_folder_that_needs_the_extra_says_so_in_one_line(korean_folder, tmp_path, monkeypatch, capsys):
    folder, _ = korean_folder
    ElmoTokenizer().save_pretrained(tmp_path / "bytes")
    monkeypatch.setitem(sys.modules, "kiwipiepy", None)  # as where kiwipiepy is not installed
    with pytest.raises(
        ImportError,
        match=r'^the korean_morphemes pre-tokenizer needs kiwipiepy: pip install "kiwipiepy>=0\.21" '
        r"\(the korean extra\)$",
    ):
        ElmoTokenizer.from_pretrained(folder)
    assert ElmoTokenizer.from_pretrained(tmp_path / "bytes").pre_tokenizer == "whitespace_split"
    (tmp_path / "in.txt").write_text(SENTENCE + "\n", encoding="utf-8")
    embed = ["embed", str(folder), str(tmp_path / "in.txt"), str(tmp_path / "out.h5"), "--top", "--pretokenize"]
    assert cli_main(embed) == 1
    error = capsys.readouterr().err
    assert error.count("\n") == 1 and 'pip install "kiwipiepy>=0.21"' in error
    assert not (tmp_path / "out.h5").exists()


def test_a_folders_code_without_kiwipiepy_names_kiwipiepy_and_its_version(monkeypatch):
    """A saved folder's copy of this module, run with trust_remote_code=True where hf_elmo may not be installed: the
    korean extra means nothing there, so the error names kiwipiepy itself, at the versions the tokenizer recorded, or
    at the extra's requirement."""
    import hf_elmo.korean_morphemes

    spec = importlib.util.spec_from_file_location(
        "transformers_modules.model.korean_morphemes", hf_elmo.korean_morphemes.__file__
    )
    remote_code = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(remote_code)
    monkeypatch.setitem(sys.modules, "kiwipiepy", None)  # as where kiwipiepy is not installed
    recorded = {"kiwipiepy": "0.24.1", "kiwipiepy_model": "0.24.0"}
    needs = "the korean_morphemes pre-tokenizer needs kiwipiepy: pip install"
    with pytest.raises(ImportError, match=rf"^{needs} kiwipiepy==0\.24\.1 kiwipiepy_model==0\.24\.0$"):
        remote_code.installed_versions(recorded)
    with pytest.raises(ImportError, match=rf'^{needs} "kiwipiepy>=0\.21"$'):
        remote_code.installed_versions()
    pyproject = tomllib.loads((Path(__file__).resolve().parents[1] / "pyproject.toml").read_text(encoding="utf-8"))
    assert pyproject["project"]["optional-dependencies"]["korean"] == [remote_code.KIWIPIEPY_REQUIREMENT]
    with pytest.raises(ImportError, match=rf'^{needs} "kiwipiepy>=0\.21" \(the korean extra\)$'):
        installed_versions(recorded)  # hf_elmo's own module: the extra's requirement, named as the extra


def test_the_tokenizer_pickles_and_encodes_alike(tokenizer):
    """What `datasets.map(num_proc=...)` and `DataLoader` workers need: the analyser is not part of the tokenizer."""
    copy = pickle.loads(pickle.dumps(tokenizer))
    assert (
        copy([SENTENCE, "했다"], padding=True)["input_ids"] == tokenizer([SENTENCE, "했다"], padding=True)["input_ids"]
    )


# -- morphemes back to words ------------------------------------------------------------------------------------------


def test_pooled_vectors_are_the_mean_of_each_words_morphemes(korean_folder, tokenizer):
    _, model = korean_folder
    batch = tokenizer([SENTENCE, "했다"], padding=True, return_tensors="pt")
    with torch.no_grad():
        layers = torch.stack(model(**batch, output_hidden_states=True).hidden_states)
    pooled, word_mask = batch.pool_to_words(layers)
    assert pooled.shape == (3, 2, 4, 16) and word_mask.tolist() == [[True] * 4, [True] + [False] * 3]
    for row in range(2):
        ids = batch.word_ids(row)
        for word in range(word_mask[row].sum()):
            positions = [position for position, word_id in enumerate(ids) if word_id == word]
            expected = layers[:, row, positions].mean(dim=1)
            torch.testing.assert_close(pooled[:, row, word], expected, atol=FLOAT32_TOLERANCE, rtol=0)
    assert not pooled[:, 1, 1:].any()
    # A pair's two sentences stay apart though their word ids both start at 0.
    pair = tokenizer("배를 타고", "배가 고프다")
    single, _ = pool_to_words(torch.ones(1, len(pair.word_ids()), 2), [pair.word_ids()])
    assert single.shape == (1, 4, 2)


def test_token_labels_align_through_word_ids(korean_folder, tokenizer):
    """A word-labelled sentence: the label at each word's first morpheme, -100 elsewhere; predictions per word."""
    words, tags = SENTENCE.split(), [1, 0, 2, 0]
    torch.manual_seed(0)
    model = ElmoForTokenClassification(tiny_config(num_labels=3)).eval()
    batch = tokenizer([" ".join(words)], return_tensors="pt")
    ids = batch.word_ids(0)
    labels = [
        -100 if word is None or (position > 0 and ids[position - 1] == word) else tags[word]
        for position, word in enumerate(ids)
    ]
    assert labels == [-100, 1, -100, 0, -100, 2, -100, 0, -100, -100]
    output = model(**batch, labels=torch.tensor([labels]))
    assert torch.isfinite(output.loss)
    predicted = model.predict_word_labels(batch)[0]
    firsts = [1, 3, 5, 7]
    assert [label for label, _ in predicted] == [
        model.config.id2label[i] for i in output.logits[0, firsts].argmax(-1).tolist()
    ]


# -- the paths that use the tokenizer ---------------------------------------------------------------------------------


def test_embed_pretokenize_gives_a_vector_per_morpheme(korean_folder, tmp_path):
    folder, model = korean_folder
    (tmp_path / "in.txt").write_text(SENTENCE + "\n", encoding="utf-8")
    arguments = ["embed", str(folder), str(tmp_path / "in.txt"), str(tmp_path / "out.h5"), "--top", "--pretokenize"]
    assert cli_main(arguments) == 0
    written = read_hdf5(tmp_path / "out.h5")["0"]
    np.testing.assert_allclose(written, reference_layers(model, MORPHEMES)[-1], atol=FLOAT32_TOLERANCE)


def test_pretraining_counts_and_reads_morphemes(tmp_path):
    """Two steps of `hf-elmo pretrain --pre-tokenizer korean_morphemes`: the vocabulary holds morphemes."""
    text = ["배를 타고 여행을 가다", "배가 고프다", "집에 간다", "영화가 정말 재밌었어요"] * 4
    (tmp_path / "train.txt").write_text("\n".join(text) + "\n", encoding="utf-8")
    (tmp_path / "valid.txt").write_text("\n".join(text[:2]) + "\n", encoding="utf-8")
    output = tmp_path / "model"
    metrics = pretraining_main(
        [
            *["--train-file", str(tmp_path / "train.txt"), "--validation-file", str(tmp_path / "valid.txt")],
            *["--output-dir", str(output), "--pre-tokenizer", "korean_morphemes", "--char-vocab", "learned"],
            *["--preset", "tiny", "--projection-dim", "8", "--cell-dim", "16", "--max-characters-per-token", "10"],
            *["--n-negative-samples", "4", "--min-count", "1", "--batch-size", "4", "--max-steps", "2"],
            *["--eval-steps", "2", "--save-steps", "2", "--logging-steps", "2"],
        ]
    )
    tokenizer = ElmoTokenizer.from_pretrained(output)
    assert tokenizer.pre_tokenizer == "korean_morphemes" and tokenizer.analyser_versions == installed_versions()
    vocabulary = tokenizer.word_tokenizer.get_vocab()
    assert {"배", "를", "가", "었", "ᆫ다"} <= set(vocabulary) and "배를" not in vocabulary
    assert "ᆫ" in tokenizer.alphabet.symbols  # a character of the forms, not of the text
    assert metrics["train_unk_rate"] == metrics["eval_unk_rate"] == 0.0
    assert tokenizer([SENTENCE], return_word_labels=True)["labels"][0][1:-1] == [vocabulary[m] for m in MORPHEMES]


def test_sentence_transformers_reads_a_korean_folder(korean_folder, tokenizer, monkeypatch):
    require("sentence_transformers")
    from sentence_transformers import SentenceTransformer

    monkeypatch.setattr("huggingface_hub.constants.HF_HUB_OFFLINE", True)
    folder, model = korean_folder
    encoder = SentenceTransformer(str(folder), trust_remote_code=True, local_files_only=True, device="cpu")
    texts = [SENTENCE, "배가 고프다"]
    with torch.inference_mode():
        expected = model.sentence_embedding(**tokenizer(texts, padding=True, return_tensors="pt"))
    torch.testing.assert_close(encoder.encode(texts, convert_to_tensor=True), expected, atol=FLOAT32_TOLERANCE, rtol=0)


@pytest.mark.slow
def test_onnx_export_carries_the_korean_tokenizer(korean_folder, tmp_path):
    require("onnxruntime")
    require("onnxscript")
    from hf_elmo.onnx_elmo import ElmoOnnxSession, export_onnx

    folder, model = korean_folder
    export_onnx(folder, tmp_path / "onnx")
    tokenizer = ElmoTokenizer.from_pretrained(tmp_path / "onnx")
    assert tokenizer.pre_tokenizer == "korean_morphemes" and tokenizer.analyser_versions == installed_versions()
    batch = tokenizer([SENTENCE, "했다"], padding=True, return_tensors="np")
    outputs = ElmoOnnxSession(tmp_path / "onnx")(batch["input_ids"], batch["attention_mask"])
    with torch.no_grad():
        expected = model(**tokenizer([SENTENCE, "했다"], padding=True, return_tensors="pt")).last_hidden_state
    np.testing.assert_allclose(outputs["last_hidden_state"], expected.numpy(), atol=1e-4)
