import json
import logging

import pytest
from transformers import AutoConfig

from hf_elmo import ElmoConfig
from hf_elmo.alphabet_elmo import MARKER_ROLES


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


def test_config_json_of_earlier_versions_loads_without_its_machine_settings(tmp_path, caplog):
    """Earlier versions wrote both settings into every config.json ("auto" unless changed): the loading machine
    chooses instead, and a stored value other than "auto" is named in a warning."""
    ElmoConfig(forget_bias=0.0).save_pretrained(tmp_path)
    path = tmp_path / "config.json"
    saved = json.loads(path.read_text())
    path.write_text(json.dumps({**saved, "recurrence_implementation": "auto", "cpu_matmul": "auto"}))
    with caplog.at_level(logging.WARNING):
        loaded = AutoConfig.from_pretrained(tmp_path)
    assert (loaded.recurrence_implementation, loaded.cpu_matmul, loaded.forget_bias) == ("auto", "auto", 0.0)
    assert not caplog.records

    path.write_text(json.dumps({**saved, "recurrence_implementation": "reference", "cpu_matmul": "int8"}))
    with caplog.at_level(logging.WARNING):
        loaded = ElmoConfig.from_pretrained(tmp_path)
    assert (loaded.recurrence_implementation, loaded.cpu_matmul) == ("auto", "auto")
    assert [record.getMessage() for record in caplog.records] == [
        "this config.json sets recurrence_implementation='reference', a machine setting no longer read from saved "
        "configs: pass recurrence_implementation='reference' to from_pretrained to use it",
        "this config.json sets cpu_matmul='int8', a machine setting no longer read from saved configs: pass "
        "cpu_matmul='int8' to from_pretrained to use it",
    ]
    caplog.clear()
    with caplog.at_level(logging.WARNING):
        chosen = ElmoConfig.from_pretrained(tmp_path, recurrence_implementation="reference", cpu_matmul="int8")
    assert (chosen.recurrence_implementation, chosen.cpu_matmul) == ("reference", "int8") and not caplog.records
    assert "cpu_matmul" not in chosen.to_dict()


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
