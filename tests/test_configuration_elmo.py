import json

import pytest

from hf_elmo import ElmoConfig


def test_defaults_are_the_original_elmo_shapes():
    config = ElmoConfig()
    assert config.filters == [[1, 32], [2, 32], [3, 64], [4, 128], [5, 256], [6, 512], [7, 1024]]
    assert config.n_filters == 2048
    assert (config.n_layers, config.cell_dim, config.projection_dim, config.n_highway) == (2, 4096, 512, 2)
    assert (config.char_embedding_dim, config.max_characters_per_token, config.n_characters) == (16, 50, 262)
    assert config.use_skip_connections and config.cell_clip == 3 and config.proj_clip == 3
    assert config.hidden_size == 1024 and config.num_hidden_layers == 2 and config.num_representation_layers == 3


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


def test_run_time_options_are_saved_and_stay_out_of_the_original_options(tmp_path):
    config = ElmoConfig(forget_bias=0.0, recurrence_implementation="reference")
    assert ElmoConfig().forget_bias == 1.0 and ElmoConfig().recurrence_implementation == "auto"
    config.save_pretrained(tmp_path)
    saved = json.loads((tmp_path / "config.json").read_text())
    assert saved["forget_bias"] == 0.0 and saved["recurrence_implementation"] == "reference"
    loaded = ElmoConfig.from_pretrained(tmp_path)
    assert (loaded.forget_bias, loaded.recurrence_implementation) == (0.0, "reference")
    assert config.to_original_options() == ElmoConfig().to_original_options()
    with pytest.raises(ValueError, match="recurrence_implementation"):
        loaded.recurrence_implementation = "fast"


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
