"""The models shipped inside the package: paths, loading (own and Auto classes), outputs, `embed`,
copies saved for `trust_remote_code`, and `examples/nsmc/bundle.py` rebuilding them."""

import json
import sys
from pathlib import Path

import h5py
import pytest
import torch
from transformers import AutoModel, AutoModelForSequenceClassification, AutoTokenizer, pipeline
from utils import FLOAT32_TOLERANCE, load_without_hf_elmo

import hf_elmo
from hf_elmo import (
    BUNDLED_MODELS,
    ElmoForSequenceClassification,
    ElmoModel,
    ElmoTokenizer,
    bundled_model_path,
)
from hf_elmo.cli import main as cli_main
from hf_elmo.loading import resolve_model_name
from hf_elmo.onnx_elmo import load_for_export

ROOT = Path(__file__).resolve().parents[1]
SENTENCES = ["배가 고프다", "배를 타고 여행을 가다", "이 영화 정말 재미있다 ㅋㅋ"]
# Reviews written for this test (not from NSMC), each clear in its sentiment.
REVIEWS = {
    "정말 재미있고 감동적인 영화였어요": "positive",
    "배우들 연기가 최고다 또 보고 싶다": "positive",
    "시간 낭비, 돈 아깝다": "negative",
    "지루하고 스토리도 엉망이다": "negative",
}


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


# The bundled folders, each with its Auto class and the package class that loads it.
MODEL_CLASSES = {
    "ko-nsmc": (AutoModel, ElmoModel),
    "ko-nsmc-sentiment": (AutoModelForSequenceClassification, ElmoForSequenceClassification),
}


def test_bundled_folders_hold_no_code_and_name_none():
    """They load through the classes `import hf_elmo` registers; no `auto_map` points at code files that are absent,
    so `trust_remote_code=True` on them reads no missing file and gets the registered classes too."""
    for name, (auto_class, model_class) in MODEL_CLASSES.items():
        folder = Path(bundled_model_path(name))
        assert not list(folder.glob("*.py"))
        for file in ("config.json", "tokenizer_config.json"):
            assert "auto_map" not in json.loads((folder / file).read_text(encoding="utf-8")), f"{name}/{file}"
        assert type(auto_class.from_pretrained(folder, trust_remote_code=True)) is model_class
        assert type(AutoTokenizer.from_pretrained(folder, trust_remote_code=True)) is ElmoTokenizer
    extractor = pipeline("feature-extraction", model=bundled_model_path("ko-nsmc"), trust_remote_code=True)
    assert type(extractor.model) is ElmoModel


def test_copy_saved_from_a_bundled_folder_loads_with_remote_code_without_hf_elmo(tmp_path):
    """`save_pretrained` writes the code files and `auto_map` a folder needs to leave the package: the copy gives the
    package's outputs in a process that never imports hf_elmo."""
    jobs, expected = [], {}
    for name, (auto_class, model_class) in MODEL_CLASSES.items():
        model = model_class.from_pretrained(bundled_model_path(name)).eval()
        tokenizer = ElmoTokenizer.from_pretrained(bundled_model_path(name))
        copy = tmp_path / name
        model.save_pretrained(copy)
        tokenizer.save_pretrained(copy)
        written = {file.name for file in copy.iterdir()}
        assert {"configuration_elmo.py", "modeling_elmo.py", "kernels_elmo.py", "tokenization_elmo.py"} <= written
        with torch.inference_mode():
            expected[str(copy)] = model(**tokenizer(SENTENCES, padding=True, return_tensors="pt"))[0]
        jobs.append([str(copy), auto_class.__name__])
    loaded = load_without_hf_elmo(jobs, SENTENCES, tmp_path)
    for copy, output in expected.items():
        assert all(
            loaded[copy][name].startswith("transformers_modules.") for name in ("model_class", "tokenizer_class")
        )
        torch.testing.assert_close(loaded[copy]["output"], output, atol=FLOAT32_TOLERANCE, rtol=FLOAT32_TOLERANCE)


@pytest.mark.parametrize("name", BUNDLED_MODELS)
def test_bundle_script_rebuilds_the_shipped_folder(name, tmp_path, monkeypatch):
    """`examples/nsmc/bundle.py` on a bundled folder gives it back: the same weights, bit for bit, and the same
    config, tokenizer files and card, with no code files."""
    sys.path.insert(0, str(ROOT / "examples" / "nsmc"))
    try:
        import bundle
    finally:
        sys.path.remove(str(ROOT / "examples" / "nsmc"))
    monkeypatch.setattr(bundle, "BUNDLED_DIR", tmp_path)
    shipped = Path(bundled_model_path(name))
    labels = ["--label-names", "negative", "positive"] if name == "ko-nsmc-sentiment" else []
    bundle.main(["--model", str(shipped), "--name", name, *labels])
    rebuilt = tmp_path / name
    assert sorted(f.name for f in rebuilt.iterdir()) == sorted(f.name for f in shipped.iterdir())
    for file in shipped.iterdir():
        if file.suffix == ".json":
            # `transformers_version` records the installed transformers that wrote the file, not the model.
            rebuilt_json, shipped_json = (json.loads(f.read_text()) for f in (rebuilt / file.name, file))
            for saved in (rebuilt_json, shipped_json):
                if isinstance(saved, dict):
                    saved.pop("transformers_version", None)
            assert rebuilt_json == shipped_json, file.name
        else:
            assert (rebuilt / file.name).read_bytes() == file.read_bytes(), file.name


def test_bilm_loads_in_float32_with_own_and_auto_classes(ko_nsmc_bilm, ko_nsmc_tokenizer):
    assert all(parameter.dtype == torch.float32 for parameter in ko_nsmc_bilm.parameters())
    auto = AutoModel.from_pretrained(bundled_model_path("ko-nsmc")).eval()
    assert type(auto) is ElmoModel
    assert isinstance(AutoTokenizer.from_pretrained(bundled_model_path("ko-nsmc")), ElmoTokenizer)
    # The folder holds the biLM alone (its pre-training softmax would not fit the 25 MB budget), every weight of it.
    _, loading_info = ElmoModel.from_pretrained(bundled_model_path("ko-nsmc"), output_loading_info=True)
    assert not loading_info["unexpected_keys"]
    assert not loading_info["missing_keys"]
    assert ko_nsmc_bilm.config.architectures == ["ElmoModel"]
    assert ko_nsmc_bilm.config.char_vocab_size is not None  # the learned character vocabulary, not bytes
    batch = ko_nsmc_tokenizer(SENTENCES, padding=True, return_tensors="pt")
    with torch.inference_mode():
        first = ko_nsmc_bilm(**batch, output_hidden_states=True)
        second = auto(**batch, output_hidden_states=True)
    units = max(
        len(ko_nsmc_tokenizer.split_words(sentence)) for sentence in SENTENCES
    )  # morphemes: more than the words
    assert first.last_hidden_state.shape == (3, units + 2, 2 * ko_nsmc_bilm.config.projection_dim)
    assert len(first.hidden_states) == ko_nsmc_bilm.config.n_layers + 1
    torch.testing.assert_close(second.last_hidden_state, first.last_hidden_state, atol=0, rtol=0)


def test_bilm_is_deterministic_and_rows_do_not_depend_on_the_batch(ko_nsmc_bilm, ko_nsmc_tokenizer):
    batch = ko_nsmc_tokenizer(SENTENCES, padding=True, return_tensors="pt")
    with torch.inference_mode():
        first = ko_nsmc_bilm(**batch).last_hidden_state
        again = ko_nsmc_bilm(**batch).last_hidden_state
        alone = ko_nsmc_bilm(**ko_nsmc_tokenizer(SENTENCES[:1], return_tensors="pt")).last_hidden_state
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


def test_embed_accepts_a_bundled_name(ko_nsmc_bilm, ko_nsmc_tokenizer, tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)  # no local folder named ko-nsmc: the name means the bundled model
    (tmp_path / "in.txt").write_text("\n".join(SENTENCES) + "\n", encoding="utf-8")
    assert cli_main(["embed", "ko-nsmc", "in.txt", "out.h5", "--top", "--pretokenize"]) == 0
    with h5py.File(tmp_path / "out.h5", "r") as handle, torch.inference_mode():
        for index, sentence in enumerate(SENTENCES):
            expected = ko_nsmc_bilm(**ko_nsmc_tokenizer([sentence], return_tensors="pt")).last_hidden_state[0, 1:-1]
            torch.testing.assert_close(
                torch.from_numpy(handle[str(index)][()]), expected, atol=FLOAT32_TOLERANCE, rtol=FLOAT32_TOLERANCE
            )
    # Its units are morphemes: whitespace words would be units it never read.
    capsys.readouterr()
    assert cli_main(["embed", "ko-nsmc", "in.txt", "whitespace.h5", "--top"]) == 1
    assert capsys.readouterr().err == (
        "hf-elmo: error: ko-nsmc reads Korean morphemes (pre_tokenizer korean_morphemes), not whitespace words: pass "
        "--pretokenize (one vector per morpheme)\n"
    )
    assert not (tmp_path / "whitespace.h5").exists()


def test_embed_of_a_head_folder_says_which_biLM_it_uses(tmp_path, monkeypatch, capsys):
    """ko-nsmc-sentiment's biLM (v8) was fine-tuned with its head: embed gives that biLM's vectors, not those of a
    pre-trained biLM, and says so; ko-nsmc (v10, another biLM) gets no note."""
    monkeypatch.chdir(tmp_path)
    (tmp_path / "in.txt").write_text("\n".join(SENTENCES) + "\n", encoding="utf-8")
    assert cli_main(["embed", "ko-nsmc-sentiment", "in.txt", "head.h5", "--top", "--pretokenize"]) == 0
    notes = [line for line in capsys.readouterr().err.splitlines() if line.startswith("hf-elmo: note: ")]
    assert notes == [
        "hf-elmo: note: ko-nsmc-sentiment holds a task head (ElmoForSequenceClassification): embed uses its biLM, "
        "fine-tuned with its head; for the pre-trained biLM, embed the model it was fine-tuned from"
    ]
    assert cli_main(["embed", "ko-nsmc", "in.txt", "bilm.h5", "--top", "--pretokenize"]) == 0
    assert "note:" not in capsys.readouterr().err
    head_bilm = ElmoForSequenceClassification.from_pretrained(bundled_model_path("ko-nsmc-sentiment")).elmo.eval()
    tokenizer = ElmoTokenizer.from_pretrained(bundled_model_path("ko-nsmc-sentiment"))
    with h5py.File(tmp_path / "head.h5", "r") as head, torch.inference_mode():
        for index, sentence in enumerate(SENTENCES):
            expected = head_bilm(**tokenizer([sentence], return_tensors="pt")).last_hidden_state[0, 1:-1]
            torch.testing.assert_close(
                torch.from_numpy(head[str(index)][()]), expected, atol=FLOAT32_TOLERANCE, rtol=FLOAT32_TOLERANCE
            )


def test_resolve_model_name_prefers_a_local_folder_then_a_bundled_model(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    assert resolve_model_name("ko-nsmc") == bundled_model_path("ko-nsmc")
    (tmp_path / "ko-nsmc").mkdir()  # a local folder of that name wins, and must be a model
    with pytest.raises(ValueError, match=r"^ko-nsmc is not an hf_elmo model folder \(no config.json\)$"):
        resolve_model_name("ko-nsmc")
    (tmp_path / "model.txt").write_text("not a folder", encoding="utf-8")
    with pytest.raises(ValueError, match="^model.txt is a file; a model is a folder, a bundled model or a Hub id$"):
        resolve_model_name("model.txt")
    with pytest.raises(ValueError, match="^no such model folder: ./missing$"):
        resolve_model_name("./missing")
    with pytest.raises(ValueError, match=r"^no such model folder or bundled model \(ko-nsmc, ko-nsmc-sentiment\): k$"):
        resolve_model_name("k", hub=False)


def test_from_pretrained_takes_a_bundled_name_without_asking_the_hub(tmp_path, monkeypatch):
    """`ElmoModel.from_pretrained("ko-nsmc")` loads the bundled folder where no local folder has that name, as the
    command line reads the name (offline here, so that asking the Hub would fail at once); a local folder of that
    name wins."""
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr("huggingface_hub.constants.HF_HUB_OFFLINE", True)
    bundled = ElmoModel.from_pretrained(bundled_model_path("ko-nsmc"))
    by_name = ElmoModel.from_pretrained("ko-nsmc")
    for name, parameter in bundled.state_dict().items():
        assert torch.equal(by_name.state_dict()[name], parameter), name
    head = ElmoForSequenceClassification.from_pretrained("ko-nsmc-sentiment")
    assert head.config.id2label == {0: "negative", 1: "positive"}
    torch.manual_seed(0)
    ElmoModel(bundled.config).save_pretrained(tmp_path / "ko-nsmc")  # a local folder of that name, other weights
    local = ElmoModel.from_pretrained("ko-nsmc")
    assert any(not torch.equal(local.state_dict()[name], value) for name, value in bundled.state_dict().items())


def test_an_unknown_name_offline_fails_at_once_naming_hf_hub_offline(tmp_path, monkeypatch):
    monkeypatch.setattr("huggingface_hub.constants.HF_HUB_OFFLINE", True)
    monkeypatch.setattr("huggingface_hub.constants.HF_HUB_CACHE", str(tmp_path))
    with pytest.raises(ValueError) as raised:
        resolve_model_name("someone/elmo")
    assert str(raised.value) == (
        "no such model folder or bundled model (ko-nsmc, ko-nsmc-sentiment): someone/elmo; as a Hub id it is not in "
        "the Hub cache, and HF_HUB_OFFLINE=1 is set (unset it to download it)"
    )


def test_every_command_takes_a_bundled_name(ko_nsmc_bilm, tmp_path, monkeypatch, capsys):
    """`info`, `export` (both formats) and `pretrain --model-name-or-path`; `embed` above. Nothing here is named
    ko-nsmc, so the name means the bundled model."""
    monkeypatch.chdir(tmp_path)
    assert cli_main(["info", "ko-nsmc"]) == 0
    assert f"parameters: {ko_nsmc_bilm.num_parameters():,}" in capsys.readouterr().out
    # The name is found; what bilm-tf's format cannot hold is the reason, not the name.
    assert cli_main(["export", "--model-dir", "ko-nsmc", "--output-dir", "original"]) == 1
    assert capsys.readouterr().err == (
        "hf-elmo: error: bilm-tf's format cannot hold this model: it has a learned character vocabulary (bilm-tf "
        "reads UTF-8 bytes)\n"
    )
    forward, _ = load_for_export("ko-nsmc-sentiment")  # what `export --format onnx` exports (slow: test below)
    assert forward.config.id2label == {0: "negative", 1: "positive"}

    (tmp_path / "train.txt").write_text("\n".join(SENTENCES) + "\n", encoding="utf-8")
    argv = ["pretrain", "--model-name-or-path", "ko-nsmc", "--train-file", "train.txt", "--validation-file"]
    argv += ["train.txt", "--output-dir", "trained", "--max-steps", "1", "--batch-size", "2", "--use_cpu"]
    assert cli_main(argv) == 0
    trained = ElmoModel.from_pretrained(tmp_path / "trained").config  # ko-nsmc trained one step further
    assert (trained.n_layers, trained.word_vocab_size) == (
        ko_nsmc_bilm.config.n_layers,
        ko_nsmc_bilm.config.word_vocab_size,
    )


@pytest.mark.slow
def test_onnx_export_takes_a_bundled_name(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    assert cli_main(["export", "--format", "onnx", "--model-dir", "ko-nsmc", "--output-dir", "onnx"]) == 0
    assert (tmp_path / "onnx" / "model.onnx").is_file()
