"""Auto classes: `import hf_elmo` registers ELMo; saved folders carry `auto_map` and the code for remote loading."""

import ast
import json
from pathlib import Path

import pytest
import torch
import transformers
from transformers import AutoConfig, AutoModel, AutoModelForPreTraining, AutoTokenizer
from transformers.pipelines import PIPELINE_REGISTRY
from utils import FLOAT32_TOLERANCE, load_without_hf_elmo, tiny_config, write_original_checkpoint

from hf_elmo import (
    ElmoConfig,
    ElmoForPreTraining,
    ElmoForSequenceClassification,
    ElmoForTokenClassification,
    ElmoModel,
    ElmoTokenizer,
)

SENTENCES = [["The", "cat", "sat", "."], ["Dogs", "bark", "loudly", "at", "night", "!"]]


def tiny_head(cls):
    torch.manual_seed(0)
    return cls(tiny_config(num_labels=3, task_lstm_dim=4)).eval()


@pytest.fixture(scope="module")
def remote(tmp_path_factory):
    """Saved folders of every kind, and what the subprocess without hf_elmo computed from each (one interpreter)."""
    from hf_elmo.conversion_original import convert_original, load_original

    root = tmp_path_factory.mktemp("remote")
    tokenizer = ElmoTokenizer(max_characters_per_token=20)
    torch.manual_seed(0)
    models = {
        "base": ElmoModel(tiny_config()).eval(),
        "sequence": tiny_head(ElmoForSequenceClassification),
        "token": tiny_head(ElmoForTokenClassification),
    }
    for name, model in models.items():
        model.save_pretrained(root / name)
        tokenizer.save_pretrained(root / name)
    options, weights = write_original_checkpoint(root / "original", tiny_config(), seed=3)
    convert_original(options, weights, root / "converted")
    models["converted"] = load_original(options, weights)

    jobs = [
        [str(root / "base"), "AutoModel"],
        [str(root / "converted"), "AutoModel"],
        [str(root / "sequence"), "AutoModelForSequenceClassification"],
        [str(root / "token"), "AutoModelForTokenClassification"],
    ]
    outputs = load_without_hf_elmo(jobs, SENTENCES, root)
    remote = {name: (root / name, models[name], outputs[str(root / name)]) for name in models}
    remote["pipeline"] = outputs["pipeline"]
    return remote


PACKAGE = Path(__file__).resolve().parents[1] / "hf_elmo"
REGISTERING = {"register", "register_for_auto_class", "register_pipeline"}


def registering_calls(tree: ast.AST) -> int:
    """The calls in `tree` of a method that registers with transformers (`REGISTERING`)."""
    return sum(
        isinstance(node, ast.Call) and getattr(node.func, "attr", None) in REGISTERING for node in ast.walk(tree)
    )


def test_registration_happens_in_register_auto_classes_alone():
    """Every registration with transformers is in one function, `register_auto_classes`, which `import hf_elmo` runs
    (the first `ElmoConfig` made registered the model classes)."""
    initialiser = ast.parse((PACKAGE / "__init__.py").read_text(encoding="utf-8"))
    register = next(node for node in initialiser.body if getattr(node, "name", None) == "register_auto_classes")
    total = sum(registering_calls(ast.parse(path.read_text(encoding="utf-8"))) for path in PACKAGE.rglob("*.py"))
    assert registering_calls(register) == total >= 6
    assert initialiser.body[-1].value.func.id == "register_auto_classes"  # the package's last statement


def test_making_a_config_registers_nothing(monkeypatch):
    def refuse(*args, **kwargs):
        raise AssertionError("a config registered something with transformers")

    for auto_class in ("AutoConfig", "AutoTokenizer", "AutoModel"):
        monkeypatch.setattr(getattr(transformers, auto_class), "register", refuse)
    monkeypatch.setattr(PIPELINE_REGISTRY, "register_pipeline", refuse)
    monkeypatch.setattr(ElmoConfig, "register_for_auto_class", refuse)
    ElmoConfig.from_dict(tiny_config().to_dict())
    ElmoConfig(n_layers=3)


def test_import_registers_the_auto_classes(tmp_path, tiny_model, tiny_tokenizer):
    tiny_model.save_pretrained(tmp_path)
    tiny_tokenizer.save_pretrained(tmp_path)
    assert isinstance(AutoConfig.for_model("elmo"), ElmoConfig)
    assert type(AutoModel.from_pretrained(tmp_path)) is ElmoModel
    assert type(AutoTokenizer.from_pretrained(tmp_path)) is ElmoTokenizer
    assert type(AutoModelForPreTraining.from_config(tiny_config(word_vocab_size=5))) is ElmoForPreTraining


@pytest.mark.parametrize("name", ["base", "converted", "sequence", "token"])
def test_saved_folders_carry_auto_map_and_code(remote, name):
    folder = remote[name][0]
    auto_map = json.loads((folder / "config.json").read_text())["auto_map"]
    assert auto_map == {
        "AutoConfig": "configuration_elmo.ElmoConfig",
        "AutoModel": "modeling_elmo.ElmoModel",
        "AutoModelForSequenceClassification": "modeling_elmo.ElmoForSequenceClassification",
        "AutoModelForTokenClassification": "modeling_elmo.ElmoForTokenClassification",
        "AutoModelForQuestionAnswering": "modeling_elmo.ElmoForQuestionAnswering",
        "AutoModelForPreTraining": "modeling_elmo.ElmoForPreTraining",
    }
    tokenizer_config = json.loads((folder / "tokenizer_config.json").read_text())
    assert tokenizer_config["auto_map"]["AutoTokenizer"][0] == "tokenization_elmo.ElmoTokenizer"
    for file in ("configuration_elmo.py", "modeling_elmo.py", "kernels_elmo.py", "tokenization_elmo.py"):
        assert (folder / file).is_file(), file


@pytest.mark.parametrize(
    "name,class_name",
    [
        ("base", "ElmoModel"),
        ("converted", "ElmoModel"),
        ("sequence", "ElmoForSequenceClassification"),
        ("token", "ElmoForTokenClassification"),
    ],
)
def test_remote_code_without_hf_elmo_gives_identical_outputs(remote, tiny_tokenizer, name, class_name):
    _, model, loaded = remote[name]
    assert loaded["model_class"].startswith("transformers_modules.") and loaded["model_class"].endswith(class_name)
    assert loaded["tokenizer_class"].startswith("transformers_modules.")
    batch = tiny_tokenizer(SENTENCES, is_split_into_words=True, padding=True, return_tensors="pt")
    assert torch.equal(loaded["input_ids"], batch["input_ids"])
    with torch.no_grad():
        assert torch.equal(loaded["output"], model(**batch)[0])
    # The path choice reaches remote code: the reference code, chosen at from_pretrained, agrees with the kernels.
    assert loaded["recurrence_implementation"] == "reference"
    assert (loaded["reference_output"] - loaded["output"]).abs().max().item() <= FLOAT32_TOLERANCE


def test_feature_extraction_pipeline_without_hf_elmo(remote, tiny_tokenizer):
    """`pipeline("feature-extraction", model=folder, trust_remote_code=True)` works without importing hf_elmo; its
    output keeps the `<S>` and `</S>` positions (words + 2), unlike `hf-elmo embed`."""
    _, model, _ = remote["base"]
    with torch.no_grad():
        expected = model(**tiny_tokenizer([SENTENCES[0]], is_split_into_words=True, return_tensors="pt"))[0]
    assert remote["pipeline"].shape == (1, len(SENTENCES[0]) + 2, model.config.hidden_size)
    assert torch.equal(remote["pipeline"], expected)
