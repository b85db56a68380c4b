"""The models shipped inside the package: paths, loading (own and Auto classes), outputs, `embed`, the quickstart."""

import os
import subprocess
import sys
from pathlib import Path

import h5py
import pytest
import torch
from conftest import FLOAT32_TOLERANCE
from transformers import AutoModel, AutoModelForSequenceClassification, AutoTokenizer, pipeline

import hf_elmo
from hf_elmo import BUNDLED_MODELS, ElmoForSequenceClassification, ElmoModel, ElmoTokenizer, bundled_model_path
from hf_elmo.cli import main as cli_main

ROOT = Path(__file__).resolve().parents[1]
SENTENCES = ["배가 고프다", "배를 타고 여행을 가다", "이 영화 정말 재미있다 ㅋㅋ"]
# Reviews written for this test (not from NSMC), each clear in its sentiment.
REVIEWS = {
    "정말 재미있고 감동적인 영화였어요": "positive",
    "배우들 연기가 최고다 또 보고 싶다": "positive",
    "시간 낭비, 돈 아깝다": "negative",
    "지루하고 스토리도 엉망이다": "negative",
}


@pytest.fixture(scope="module")
def bilm():
    return ElmoModel.from_pretrained(bundled_model_path("ko-nsmc")).eval()


@pytest.fixture(scope="module")
def tokenizer():
    return ElmoTokenizer.from_pretrained(bundled_model_path("ko-nsmc"))


def test_bundled_model_path_gives_folders_and_names_the_choices():
    assert BUNDLED_MODELS == ("ko-nsmc", "ko-nsmc-sentiment")
    for name in BUNDLED_MODELS:
        folder = Path(bundled_model_path(name))
        assert folder.parent == Path(hf_elmo.__file__).resolve().parent / "bundled"
        files = {f.name for f in folder.iterdir()}
        assert {"config.json", "model.safetensors", "README.md", "word_vocab.json"} <= files
        assert sum(f.stat().st_size for f in folder.iterdir()) <= 25 * 2**20
    with pytest.raises(
        ValueError,
        match="^no bundled model named 'ko-nsmc-large'; the bundled models are: ko-nsmc, ko-nsmc-sentiment$",
    ):
        bundled_model_path("ko-nsmc-large")


def test_code_files_of_the_bundled_folders_are_the_package_code():
    # trust_remote_code loads these copies: they must be the code the weights were checked with. After changing
    # hf_elmo, rebuild the folders with examples/nsmc/bundle.py (see examples/nsmc/README.md).
    for name in BUNDLED_MODELS:
        for copy in Path(bundled_model_path(name)).glob("*.py"):
            assert copy.read_text(encoding="utf-8") == (ROOT / "hf_elmo" / copy.name).read_text(encoding="utf-8"), (
                f"{name}/{copy.name} differs from hf_elmo/{copy.name}"
            )


def test_bilm_loads_in_float32_with_own_and_auto_classes(bilm, tokenizer):
    assert all(parameter.dtype == torch.float32 for parameter in bilm.parameters())
    auto = AutoModel.from_pretrained(bundled_model_path("ko-nsmc")).eval()
    assert type(auto) is ElmoModel
    assert isinstance(AutoTokenizer.from_pretrained(bundled_model_path("ko-nsmc")), ElmoTokenizer)
    # The folder holds the biLM alone (its pre-training softmax would not fit the 25 MB budget), every weight of it.
    _, loading_info = ElmoModel.from_pretrained(bundled_model_path("ko-nsmc"), output_loading_info=True)
    assert not loading_info["unexpected_keys"]
    assert not loading_info["missing_keys"]
    assert bilm.config.architectures == ["ElmoModel"]
    assert bilm.config.char_vocab_size is not None  # the learned character vocabulary, not bytes
    batch = tokenizer(SENTENCES, padding=True, return_tensors="pt")
    with torch.inference_mode():
        first = bilm(**batch, output_hidden_states=True)
        second = auto(**batch, output_hidden_states=True)
    words = max(len(sentence.split()) for sentence in SENTENCES)
    assert first.last_hidden_state.shape == (3, words + 2, 2 * bilm.config.projection_dim)
    assert len(first.hidden_states) == bilm.config.n_layers + 1
    torch.testing.assert_close(second.last_hidden_state, first.last_hidden_state, atol=0, rtol=0)


def test_bilm_is_deterministic_and_rows_do_not_depend_on_the_batch(bilm, tokenizer):
    batch = tokenizer(SENTENCES, padding=True, return_tensors="pt")
    with torch.inference_mode():
        first = bilm(**batch).last_hidden_state
        again = bilm(**batch).last_hidden_state
        alone = bilm(**tokenizer(SENTENCES[:1], return_tensors="pt")).last_hidden_state
    torch.testing.assert_close(again, first, atol=0, rtol=0)
    positions = alone.shape[1]
    torch.testing.assert_close(alone[0], first[0, :positions], atol=FLOAT32_TOLERANCE, rtol=FLOAT32_TOLERANCE)


def test_classifier_predicts_clear_reviews_with_own_auto_and_pipeline():
    folder = bundled_model_path("ko-nsmc-sentiment")
    model = ElmoForSequenceClassification.from_pretrained(folder).eval()
    auto = AutoModelForSequenceClassification.from_pretrained(folder).eval()
    assert type(auto) is ElmoForSequenceClassification
    assert model.config.id2label == {0: "negative", 1: "positive"}
    tokenizer = AutoTokenizer.from_pretrained(folder)
    batch = tokenizer(list(REVIEWS), padding=True, return_tensors="pt")
    with torch.inference_mode():
        logits = model(**batch).logits
        torch.testing.assert_close(auto(**batch).logits, logits, atol=0, rtol=0)
    assert logits.shape == (len(REVIEWS), 2)
    assert [model.config.id2label[i] for i in logits.argmax(-1).tolist()] == list(REVIEWS.values())
    classifier = pipeline("text-classification", model=folder)
    assert [result["label"] for result in classifier(list(REVIEWS))] == list(REVIEWS.values())


def test_embed_accepts_a_bundled_name(bilm, tokenizer, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)  # no local folder named ko-nsmc: the name means the bundled model
    (tmp_path / "in.txt").write_text("\n".join(SENTENCES) + "\n", encoding="utf-8")
    assert cli_main(["embed", "ko-nsmc", "in.txt", "out.h5", "--top"]) == 0
    with h5py.File(tmp_path / "out.h5", "r") as handle, torch.inference_mode():
        for index, sentence in enumerate(SENTENCES):
            expected = bilm(**tokenizer([sentence], return_tensors="pt")).last_hidden_state[0, 1:-1]
            torch.testing.assert_close(
                torch.from_numpy(handle[str(index)][()]), expected, atol=FLOAT32_TOLERANCE, rtol=FLOAT32_TOLERANCE
            )


def test_quickstart_runs_offline_on_the_bundled_models():
    environment = {
        **os.environ,
        "HF_HUB_OFFLINE": "1",
        "TRANSFORMERS_OFFLINE": "1",
        "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]),
    }
    result = subprocess.run(
        [sys.executable, str(ROOT / "examples" / "quickstart.py")],
        capture_output=True,
        text=True,
        env=environment,
        timeout=300,
        cwd=ROOT,
    )
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    assert "cosine similarity, layer 0 (context-free character CNN):" in lines
    # Layer 0 reads the word alone: 배가 in "배가 고프다" and "배가 아프다" get the same vector.
    assert lines[lines.index("cosine similarity, layer 0 (context-free character CNN):") + 2].split()[1:3] == [
        "1.000",
        "1.000",
    ]
    for review, label in REVIEWS.items():
        assert any(line.split()[:1] == [label] and line.endswith(review) for line in lines), review
