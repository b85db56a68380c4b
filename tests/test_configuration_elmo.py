import dataclasses
import json
import logging
import re
import subprocess
import sys

import numpy as np
import pytest
import torch
from transformers import AutoConfig, PreTrainedConfig
from utils import tiny_config

from hf_elmo import ElmoConfig, ElmoModel
from hf_elmo.alphabet_elmo import MARKER_ROLES
from hf_elmo.configuration_elmo import MACHINE_SETTINGS, field_rule


def test_defaults_are_the_original_elmo_shapes():
    config = ElmoConfig()
    assert config.filters == [[1, 32], [2, 32], [3, 64], [4, 128], [5, 256], [6, 512], [7, 1024]]
    assert config.n_filters == 2048
    assert (config.n_layers, config.cell_dim, config.projection_dim, config.n_highway) == (2, 4096, 512, 2)
    assert (config.char_embedding_dim, config.max_characters_per_token, config.n_characters) == (16, 50, 262)
    assert config.use_skip_connections and config.cell_clip == 3 and config.proj_clip == 3
    assert config.hidden_size == 1024 and config.num_hidden_layers == 2 and config.num_representation_layers == 3


def test_alphabet_is_built_once_follows_its_fields_and_is_not_saved(tmp_path):
    config = ElmoConfig()
    assert config.alphabet is config.alphabet and not config.alphabet.learned
    markers = {role: i for i, role in enumerate(MARKER_ROLES)}
    learned = ElmoConfig(char_vocab_size=10, char_markers=markers)
    assert learned.alphabet is learned.alphabet is ElmoConfig(char_vocab_size=10, char_markers=markers).alphabet
    assert (learned.alphabet.learned, learned.alphabet.size, learned.alphabet.table_rows) == (True, 10, 11)
    learned.char_vocab_size = 12  # as from_pretrained(..., char_vocab_size=12) sets it after __init__
    assert learned.alphabet.table_rows == 13
    learned.char_markers = {**markers, "unknown": 11}
    assert learned.alphabet.markers["unknown"] == 11
    learned.save_pretrained(tmp_path)
    saved = json.loads((tmp_path / "config.json").read_text())
    assert not any("alphabet" in key for key in saved)
    loaded = ElmoConfig.from_pretrained(tmp_path)
    assert loaded.alphabet == learned.alphabet and loaded.alphabet is loaded.alphabet


def test_original_options_round_trip(fixture_dir):
    options = json.loads((fixture_dir / "options.json").read_text())
    config = ElmoConfig.from_original_options(options)
    assert config.to_original_options() == options


def test_options_without_clipping_or_skip_connections_round_trip():
    options = ElmoConfig(cell_clip=None, proj_clip=None, use_skip_connections=False).to_original_options()
    assert "cell_clip" not in options["lstm"] and "proj_clip" not in options["lstm"]
    config = ElmoConfig.from_original_options(options)
    assert config.cell_clip is None and config.proj_clip is None and config.use_skip_connections is False


def test_save_and_load(tmp_path):
    config = ElmoConfig(filters=[[1, 4], [3, 6]], activation="tanh", n_characters=261, max_characters_per_token=30)
    config.save_pretrained(tmp_path)
    loaded = ElmoConfig.from_pretrained(tmp_path)
    assert loaded.to_original_options() == config.to_original_options()


def test_forget_bias_is_saved_and_stays_out_of_the_original_options(tmp_path):
    config = ElmoConfig(forget_bias=0.0, recurrence_implementation="reference")
    assert ElmoConfig().forget_bias == 1.0 and ElmoConfig().recurrence_implementation == "auto"
    config.save_pretrained(tmp_path)
    saved = json.loads((tmp_path / "config.json").read_text())
    assert saved["forget_bias"] == 0.0
    loaded = ElmoConfig.from_pretrained(tmp_path)
    assert loaded.forget_bias == 0.0
    assert config.to_original_options() == ElmoConfig().to_original_options()
    with pytest.raises(ValueError, match="recurrence_implementation"):
        loaded.recurrence_implementation = "fast"


@pytest.mark.parametrize("setting, value", [("recurrence_implementation", "reference"), ("cpu_matmul", "int8")])
def test_machine_settings_are_chosen_at_load_and_never_saved(tmp_path, setting, value):
    config = ElmoConfig(**{setting: value})
    assert getattr(config, setting) == value
    for written in (config.to_dict(), json.loads(config.to_json_string()), json.loads(config.to_json_string(False))):
        assert setting not in written
    config.save_pretrained(tmp_path)
    assert setting not in json.loads((tmp_path / "config.json").read_text())
    assert getattr(ElmoConfig.from_pretrained(tmp_path), setting) == "auto"
    for loader in (ElmoConfig, AutoConfig):
        assert getattr(loader.from_pretrained(tmp_path, **{setting: value}), setting) == value
    with pytest.raises(ValueError, match=f"^{setting} must be one of .*, got 'fast'$"):
        ElmoConfig.from_pretrained(tmp_path, **{setting: "fast"})
    loaded = ElmoConfig.from_pretrained(tmp_path)
    setattr(loaded, setting, value)  # on a loaded config, checked likewise
    assert getattr(loaded, setting) == value and setting not in loaded.to_dict()
    with pytest.raises(ValueError, match=f"^{setting} must be one of .*, got 'fast'$"):
        setattr(loaded, setting, "fast")


@pytest.mark.parametrize(
    "options, message",
    [
        (dict(activation="gelu"), "activation"),
        (dict(n_characters=300), "n_characters"),
        (dict(filters=[]), "filters"),
        (dict(filters=[[3]]), "filters"),
        (dict(filters=[[60, 4]]), "wider"),
        (dict(n_layers=0), "n_layers"),
        (dict(max_characters_per_token=2), "max_characters_per_token"),
        (dict(projection_dim=64, cell_dim=32), "projection_dim"),
        (dict(recurrence_implementation="fast"), "recurrence_implementation"),
        (dict(lstm_dropout=1.0), r"^lstm_dropout must be in \[0, 1\), got 1.0$"),
        (dict(lstm_dropout=-0.1), "lstm_dropout"),
    ],
)
def test_bad_options_are_refused(options, message):
    with pytest.raises(ValueError, match=message):
        ElmoConfig(**options)


def test_incomplete_original_options_are_refused():
    with pytest.raises(ValueError, match="lacks a required entry"):
        ElmoConfig.from_original_options({"lstm": {"dim": 8}})


def test_crf_options_are_saved_and_checked(tmp_path):
    assert (ElmoConfig().use_crf, ElmoConfig().crf_constraint) == (False, None)
    config = ElmoConfig(use_crf=True, crf_constraint="BIOES")
    config.save_pretrained(tmp_path)
    loaded = ElmoConfig.from_pretrained(tmp_path)
    assert (loaded.use_crf, loaded.crf_constraint) == (True, "BIOES")
    assert config.to_original_options() == ElmoConfig().to_original_options()
    message = r"^crf_constraint must be one of \('BIO', 'BIOES'\) or None, got 'BIOUL'$"
    with pytest.raises(ValueError, match=message):
        ElmoConfig(crf_constraint="BIOUL")
    with pytest.raises(ValueError, match=message):
        loaded.crf_constraint = "BIOUL"  # as from_pretrained(..., crf_constraint=...) sets it


def test_word_vector_fields_go_together_and_are_saved(tmp_path):
    assert (ElmoConfig().word_vector_dim, ElmoConfig().word_vector_vocab_size) == (0, None)
    ElmoConfig(word_vector_dim=12, word_vector_vocab_size=40).save_pretrained(tmp_path)
    loaded = ElmoConfig.from_pretrained(tmp_path)
    assert (loaded.word_vector_dim, loaded.word_vector_vocab_size) == (12, 40)
    message = r"^word_vector_dim \(above 0\) and word_vector_vocab_size go together \(a head's word vectors\)$"
    for fields in (
        dict(word_vector_dim=12),
        dict(word_vector_vocab_size=40),
        dict(word_vector_dim=0, word_vector_vocab_size=40),
    ):
        with pytest.raises(ValueError, match=message):
            ElmoConfig(**fields)
    loaded.word_vector_vocab_size = None  # as from_pretrained(..., word_vector_vocab_size=None) sets it
    with pytest.raises(ValueError, match=message):
        loaded.save_pretrained(tmp_path / "again")  # checked together before it is written


@pytest.mark.parametrize(
    "field, value, allowed",
    [
        ("n_layers", "two", "an integer >= 1"),
        ("n_layers", 2.0, "an integer >= 1"),
        ("projection_dim", 0, "an integer >= 1"),
        ("n_highway", -1, "an integer >= 0"),
        ("task_lstm_dim", True, "an integer >= 0"),
        ("filters", [[3, 0]], "a non-empty list of [width, n_filters] pairs of integers >= 1"),
        ("cell_clip", 0.0, "None or a number > 0"),
        ("forget_bias", "1", "a number"),
        ("mix_dropout", 1.5, "in [0, 1)"),
        ("mix_weights", ["a", "b", "c"], "None or a list of numbers, one per layer"),
        ("mix_l2_coefficient", -1, "a number >= 0"),
        ("use_skip_connections", "yes", "True or False"),
        ("freeze_bilm", 1, "True or False"),
        ("word_vocab_size", 1, "None or an integer >= 2"),
        ("char_markers", ["padding"], "None or a dict of marker roles to ids"),
        ("pooling", "sum", "'mean', 'max' or 'mean_max'"),
        ("word_vector_dim", -1, "an integer >= 0"),
        ("word_vector_vocab_size", 0, "None or an integer >= 1"),
        ("crf_constraint", [], "one of ('BIO', 'BIOES') or None"),
        # transformers' own fields, which its loading reads (see TRANSFORMERS_FIELD_RULES)
        ("dtype", "no_such_dtype", "None or the name of a torch dtype, such as 'float32'"),
        ("dtype", [None, {}], "None or the name of a torch dtype, such as 'float32'"),
        ("architectures", True, "None or a list of names"),
        ("id2label", [[0]], "None or a dict of label ids (integers >= 0) to labels"),
        ("id2label", {"first": "A"}, "None or a dict of label ids (integers >= 0) to labels"),
        ("label2id", {"A": -1}, "None or a dict of labels to label ids (integers >= 0)"),
    ],
)
def test_each_field_is_checked_for_its_type_and_range_by_name(tmp_path, field, value, allowed):
    """In `__init__`, on a loaded config (as `from_pretrained(..., field=value)` sets it) and from a config.json,
    there naming the file."""
    refusal = f"{field} must be {allowed}, got {value!r}"
    message = f"^{re.escape(refusal)}$"
    with pytest.raises(ValueError, match=message):
        ElmoConfig(**{field: value})
    config = ElmoConfig()
    with pytest.raises(ValueError, match=message):
        setattr(config, field, value)
    config.save_pretrained(tmp_path)
    path = tmp_path / "config.json"
    path.write_text(json.dumps({**json.loads(path.read_text()), field: value}))
    with pytest.raises(ValueError) as raised:
        ElmoConfig.from_pretrained(tmp_path)
    assert str(raised.value) == f"{path}: {refusal}; copy or download the model folder again"
    with pytest.raises(ValueError, match=message):  # transformers reads the file itself
        AutoConfig.from_pretrained(tmp_path)


def test_transformers_fields_that_hold_what_they_must_are_kept(tmp_path):
    config = ElmoConfig(
        dtype="bfloat16", architectures=["ElmoModel"], id2label={"0": "A", "1": 7}, label2id={"A": 0, "7": "1"}
    )
    assert config.dtype is torch.bfloat16 and config.id2label == {0: "A", 1: 7}
    config.save_pretrained(tmp_path)
    loaded = ElmoConfig.from_pretrained(tmp_path)
    assert (loaded.dtype, loaded.architectures, loaded.id2label) == (torch.bfloat16, ["ElmoModel"], {0: "A", 1: 7})


def test_a_config_file_that_holds_no_object_is_refused_naming_the_file(tmp_path):
    path = tmp_path / "config.json"
    path.write_text("[1, 2]")
    message = f"^{re.escape(f'{path}: the file is a list of 2 items, not an object; ')}"
    with pytest.raises(ValueError, match=message):
        ElmoConfig.from_json_file(path)
    with pytest.raises(ValueError, match=message):
        ElmoConfig.from_pretrained(tmp_path)


def test_every_field_has_a_rule_and_is_stored_as_plain_python():
    transformers_fields = {field.name for field in dataclasses.fields(PreTrainedConfig)}
    fields = [field for field in dataclasses.fields(ElmoConfig) if field.name not in transformers_fields]
    assert fields and all(field_rule(field) is not None for field in fields)
    assert set(MACHINE_SETTINGS) == {"recurrence_implementation", "cpu_matmul"} <= {field.name for field in fields}
    config = ElmoConfig(n_layers=np.int64(3), filters=((1, 4), (2, 8)), forget_bias=0, mix_weights=(0, 1, 2, 3))
    assert type(config.n_layers) is int and config.filters == [[1, 4], [2, 8]]
    assert type(config.forget_bias) is float and config.mix_weights == [0.0, 1.0, 2.0, 3.0]
    config.num_hidden_layers = 2  # transformers' name for n_layers, checked as n_layers
    with pytest.raises(ValueError, match="^n_layers must be an integer >= 1, got 0$"):
        config.num_hidden_layers = 0


def test_a_misspelt_field_is_kept_and_named_in_one_warning_with_the_field(tmp_path, caplog):
    ElmoModel(tiny_config()).save_pretrained(tmp_path)
    path = tmp_path / "config.json"
    path.write_text(json.dumps({**json.loads(path.read_text()), "projection_dimm": 64, "colour": "red"}))
    expected = (
        "ElmoConfig does not know 'projection_dimm' (did you mean 'projection_dim'?): kept as plain attributes, unused"
    )
    for load in (ElmoConfig.from_pretrained, AutoConfig.from_pretrained, ElmoModel.from_pretrained):
        caplog.clear()
        with caplog.at_level(logging.WARNING):
            loaded = load(tmp_path)
        assert [record.getMessage() for record in caplog.records] == [expected]
        config = getattr(loaded, "config", loaded)
        assert (config.projection_dimm, config.projection_dim, config.colour) == (64, 8, "red")
    with caplog.at_level(logging.WARNING):
        caplog.clear()
        ElmoConfig(n_layerz=3, cell_dimm=4)
    assert [record.getMessage() for record in caplog.records] == [
        "ElmoConfig does not know 'n_layerz' (did you mean 'n_layers'?), 'cell_dimm' (did you mean 'cell_dim'?): kept "
        "as plain attributes, unused"
    ]


# Keys that configs written by transformers 4 and by tools carry, which transformers 5 declares nowhere.
OLDER_KEYS = dict(
    task_specific_params={},
    tie_word_embeddings=False,
    pad_token_id=0,
    use_cache=False,
    torch_dtype=None,
    _attn_implementation_autoset=True,
    _commit_hash="0" * 40,
    torchscript=False,
    use_bfloat16=False,
    is_decoder=False,
    pruned_heads={},
    quantization_config=None,
    custom_pipelines={},
)


def test_the_keys_transformers_writes_and_reads_are_no_misspelt_fields(tmp_path, caplog):
    labels = dict(id2label={0: "a", 1: "b", 2: "c"}, label2id={"a": 0, "b": 1, "c": 2})
    standard = dict(problem_type="single_label_classification", architectures=["ElmoForSequenceClassification"])
    with caplog.at_level(logging.WARNING):
        config = ElmoConfig(
            **labels, **standard, **OLDER_KEYS, auto_map={"AutoConfig": "configuration_elmo.ElmoConfig"}
        )
        ElmoConfig(num_hidden_layers=3, hidden_size=1)  # transformers' names: n_layers, and 2 * projection_dim
        config.save_pretrained(tmp_path)
        ElmoConfig.from_pretrained(tmp_path, num_labels=3, num_hidden_layers=3)
        AutoConfig.from_pretrained(tmp_path, dtype="float32")
    assert not caplog.records


def test_checks_across_fields_refuse_a_config_where_it_is_read(tmp_path):
    """What a model's constructor would refuse is refused by the config: made, or read with fields set after it."""
    with pytest.raises(ValueError, match="^crf_constraint='BIO' constrains the CRF: set use_crf=True too$"):
        ElmoConfig(crf_constraint="BIO")
    with pytest.raises(ValueError, match=r"^ElmoForPreTraining needs word_vocab_size \(the words of its softmax\)$"):
        ElmoConfig(architectures=["ElmoForPreTraining"])
    ElmoConfig(use_crf=True).save_pretrained(tmp_path)
    with pytest.raises(ValueError, match="^crf_constraint='BIO' constrains the CRF: set use_crf=True too$"):
        ElmoConfig.from_pretrained(tmp_path, use_crf=False, crf_constraint="BIO")
    with pytest.raises(ValueError, match=r"^word_vector_dim \(above 0\) and word_vector_vocab_size go together"):
        AutoConfig.from_pretrained(tmp_path, word_vector_dim=8)
    config, unused = ElmoConfig.from_pretrained(tmp_path, return_unused_kwargs=True, colour="red")
    assert config.use_crf and unused == {"colour": "red"}


WITHOUT_TORCH = """
import json, sys
sys.modules["torch"] = None  # `import torch` raises ImportError, as where torch is not installed
try:
    import torch
except ImportError:
    pass
else:
    raise SystemExit("torch imported")
from hf_elmo.configuration_elmo import ElmoConfig
config = ElmoConfig.from_pretrained(sys.argv[1])
config.validate()
try:
    ElmoConfig.from_pretrained(sys.argv[2])
except ValueError as error:
    refused = str(error)
print(json.dumps({"n_layers": config.n_layers, "hidden_size": config.hidden_size, "refused": refused}))
"""


def test_the_config_is_read_and_checked_where_torch_cannot_be_imported(tmp_path):
    """`import hf_elmo.configuration_elmo` needs no torch (the package's names are read lazily): a config.json is
    read and checked, and a bad one refused with its one-line reason, in a Python where `import torch` fails."""
    tiny_config(n_layers=3).save_pretrained(tmp_path / "good")
    (tmp_path / "bad").mkdir()
    saved = json.loads((tmp_path / "good" / "config.json").read_text())
    (tmp_path / "bad" / "config.json").write_text(json.dumps({**saved, "mix_weights": [0.5, 0.5]}))
    result = subprocess.run(
        [sys.executable, "-c", WITHOUT_TORCH, str(tmp_path / "good"), str(tmp_path / "bad")],
        capture_output=True,
        text=True,
        check=False,
    )
    assert result.returncode == 0, result.stderr[-2000:]
    assert json.loads(result.stdout.splitlines()[-1]) == {
        "n_layers": 3,
        "hidden_size": 16,
        "refused": "mix_weights needs one value per layer (4), got [0.5, 0.5]",
    }


@pytest.mark.parametrize(
    "overrides",
    [
        {},
        {"projection_dim": 16},  # no LSTM projection: the memory is the output
        {"filters": [[1, 4], [2, 4]]},  # no character projection: the filters' outputs are projection_dim wide
        {"always_project": True, "filters": [[1, 4], [2, 4]], "n_highway": 0},
        {"char_vocab_size": 30, "char_markers": {role: i for i, role in enumerate(MARKER_ROLES)}},
        {
            "char_vocab_size": 30,
            "char_markers": {role: i for i, role in enumerate(MARKER_ROLES)},
            "word_input_vocab_size": 11,
            "word_input_dim": 3,
        },
    ],
)
def test_the_parameters_counted_from_the_fields_are_the_models(overrides):
    """What the config's bound counts, before anything is allocated, is what the model then holds."""
    from hf_elmo import ElmoForPreTraining, ElmoForSequenceClassification

    config = tiny_config(**overrides)
    assert sum(config.parameters_by_field().values()) == sum(p.numel() for p in ElmoModel(config).parameters())
    pretraining = tiny_config(**overrides, word_vocab_size=13, architectures=["ElmoForPreTraining"])
    model = ElmoForPreTraining(pretraining)
    assert sum(pretraining.parameters_by_field().values()) == sum(p.numel() for p in model.parameters())
    # A head: its mix and classifier aside, the word vectors and the task BiLSTM are counted.
    head_config = tiny_config(**overrides, word_vector_dim=5, word_vector_vocab_size=9, task_lstm_dim=6)
    head = ElmoForSequenceClassification(head_config)
    uncounted = sum(
        p.numel() for name, p in head.named_parameters() if name.startswith(("task_encoder.mix.", "classifier."))
    )
    assert sum(head_config.parameters_by_field().values()) == sum(p.numel() for p in head.parameters()) - uncounted


def test_sizes_that_would_not_fit_in_memory_are_refused_in_one_line_with_the_size(tmp_path):
    """`n_layers` 10^6 ran 180 s under an 8 GB cap, a 10^9 row of characters filled the memory: a config.json that
    would make a model of more than 2**32 parameters, or a word of more than 2**24 character-CNN values, is refused
    where it is read, before anything is allocated, naming the field and the size."""
    from hf_elmo.loading import load_model

    tiny_config().save_pretrained(tmp_path)
    saved = json.loads((tmp_path / "config.json").read_text())
    # 2 directions x 10^6 layers x (4 x 4096 x (2 x 512 + 1) + 4096 x 512), and 12,836 for tiny_config's CNN.
    cases = {
        "n_layers": (
            {"n_layers": 1_000_000, "cell_dim": 4096, "projection_dim": 512},
            "the sizes make a model of 37,781,504,012,836 parameters (140,747 GiB in float32), 37,781,504,000,000 "
            "of them from n_layers, over the 4,294,967,296 allowed",
        ),
        "filters": (
            {"filters": [[1, 1_000_000]], "n_highway": 0, "projection_dim": 1, "cell_dim": 1},
            "max_characters_per_token x the filters' outputs is 20,000,000 values per word (76 MiB in float32), over "
            "the 16,777,216 allowed",
        ),
        "max_characters_per_token": (
            {"max_characters_per_token": 1_000_000_000},
            f"{tmp_path / 'config.json'}: max_characters_per_token must be an integer from 3 to 1000, got 1000000000; "
            "copy or download the model folder again",  # one field's refusal, as the file is read
        ),
    }
    for name, (fields, message) in cases.items():
        (tmp_path / "config.json").write_text(json.dumps({**saved, **fields}))
        with pytest.raises(ValueError) as refused:
            ElmoConfig.from_pretrained(tmp_path)
        assert str(refused.value) == message, name
        with pytest.raises(ValueError) as refused:
            load_model(tmp_path)
        assert str(refused.value) == f"cannot load {tmp_path} as an hf_elmo model: {message}", name
