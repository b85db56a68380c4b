"""
What saved folders hold beside transformers' files: the extras each class names (`folder_extras`), written by the one
`save_pretrained`; the sentence-transformers files of a biLM's folder, not of a head's.
"""

import json
from pathlib import Path

import pytest
from utils import tiny_config

from hf_elmo import ElmoForPreTraining, ElmoForSequenceClassification, ElmoModel, bundled_model_path
from hf_elmo.folder_layout import ENCODER_CONFIG_FILE, SENTENCE_TRANSFORMERS_FILES, FolderExtra
from hf_elmo.modeling_elmo import AUTO_CLASSES, ElmoPreTrainedModel


def written_files(folder: Path) -> dict[str, object]:
    """The sentence-transformers files found in `folder`, parsed."""
    paths = [folder / name for name in SENTENCE_TRANSFORMERS_FILES]
    return {path.name: json.loads(path.read_text()) for path in paths if path.exists()}


@pytest.mark.parametrize(
    "model_class, overrides",
    [(ElmoModel, {}), (ElmoForPreTraining, {"word_vocab_size": 30})],
    ids=["ElmoModel", "ElmoForPreTraining"],
)
def test_a_bilm_saves_the_files(tmp_path, model_class, overrides):
    model_class(tiny_config(**overrides)).save_pretrained(tmp_path)
    assert written_files(tmp_path) == SENTENCE_TRANSFORMERS_FILES
    modules = SENTENCE_TRANSFORMERS_FILES["modules.json"]
    assert [module["type"] for module in modules] == [
        "hf_elmo.sentence_transformers_elmo.ElmoSentenceTransformerModule"
    ]


def test_a_head_and_a_process_other_than_the_main_one_save_none(tmp_path):
    # A classifier's folder is its task model: a sentence-transformers model made of it would ignore the head.
    ElmoForSequenceClassification(tiny_config(num_labels=2)).save_pretrained(tmp_path / "head")
    assert written_files(tmp_path / "head") == {}
    ElmoModel(tiny_config()).save_pretrained(tmp_path / "other", is_main_process=False)
    assert written_files(tmp_path / "other") == {}


def test_the_bundled_bilm_carries_the_files_with_its_own_sentence_settings():
    """The files `save_pretrained` writes, the module's settings set by `examples/nsmc/bundle.py`: the same keys, with
    a reference text's mean and principal directions (`--sentence-reference-text`)."""
    written = written_files(Path(bundled_model_path("ko-nsmc")))
    settings = written.pop(ENCODER_CONFIG_FILE)
    assert written == {name: f for name, f in SENTENCE_TRANSFORMERS_FILES.items() if name != ENCODER_CONFIG_FILE}
    assert set(settings) == set(SENTENCE_TRANSFORMERS_FILES[ENCODER_CONFIG_FILE])
    hidden_size = ElmoModel.config_class.from_pretrained(bundled_model_path("ko-nsmc")).hidden_size
    assert len(settings["reference_mean"]) == hidden_size
    assert len(settings["common_component"]) > 1
    assert all(len(direction) == hidden_size for direction in settings["common_component"])
    assert written_files(Path(bundled_model_path("ko-nsmc-sentiment"))) == {}


def test_one_save_pretrained_writes_the_extras_each_class_names(tmp_path):
    """A class's `folder_extras` set their config fields before the config is saved and write their files after, in
    the main process alone; no ELMo class overrides `save_pretrained` but their base."""
    written = []
    extra = FolderExtra(lambda folder: written.append(Path(folder)), {"extra_field": 3})

    class ElmoWithAnExtra(ElmoForSequenceClassification):
        folder_extras = (extra,)

    ElmoWithAnExtra(tiny_config(num_labels=2)).save_pretrained(tmp_path / "main")
    assert written == [tmp_path / "main"]
    assert json.loads((tmp_path / "main" / "config.json").read_text())["extra_field"] == 3
    ElmoWithAnExtra(tiny_config(num_labels=2)).save_pretrained(tmp_path / "other", is_main_process=False)
    assert written == [tmp_path / "main"]
    assert [model.__name__ for model in AUTO_CLASSES.values() if "save_pretrained" in vars(model)] == []
    assert "save_pretrained" in vars(ElmoPreTrainedModel)
