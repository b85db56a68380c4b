"""The name rules of `hf_elmo.model_names`: what a model name on a command line can stand for, from the disk alone."""

import pytest

from hf_elmo.model_names import BUNDLED_DIR, is_path_only, local_model_folder, original_checkpoint


@pytest.mark.parametrize(
    ("name", "path_only"),
    [
        ("ko-nsmc", False),
        ("allenai/elmo", False),
        ("./elmo", True),
        ("../elmo", True),
        ("/models/elmo", True),
        ("~/elmo", True),
        ("outputs/nsmc/elmo", True),
    ],
)
def test_a_hub_id_has_at_most_one_slash_and_no_leading_dot_slash_or_tilde(name, path_only):
    assert is_path_only(name) is path_only


def test_local_model_folder_prefers_the_path_then_a_bundled_model(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    assert local_model_folder("ko-nsmc") == BUNDLED_DIR / "ko-nsmc"
    assert (BUNDLED_DIR / "ko-nsmc" / "config.json").is_file()
    (tmp_path / "ko-nsmc").mkdir()
    assert local_model_folder("ko-nsmc").resolve() == (tmp_path / "ko-nsmc").resolve()
    for name in ("someone/elmo", "./missing", "no-such-bundled-model", "bundled"):
        assert local_model_folder(name) is None, name


def test_an_original_checkpoint_is_a_folder_of_options_and_weights_without_a_config(tmp_path):
    """`options.json` and a `.hdf5` make an original checkpoint, named with the `hf-elmo convert` that makes a model
    folder of it; a folder that also holds `config.json` is a model folder, and a file or a folder missing either part
    is neither (the loader says what it is)."""
    folder = tmp_path / "elmo"
    folder.mkdir()
    (folder / "options.json").write_text("{}")
    assert original_checkpoint(str(folder)) is None  # no weights
    (folder / "weights.hdf5").write_bytes(b"")
    assert original_checkpoint(str(folder)) == (
        f"{folder} holds an original (bilm-tf) checkpoint, not an hf_elmo model folder: convert it with hf-elmo "
        f"convert --options-file {folder / 'options.json'} --weight-file {folder / 'weights.hdf5'} "
        f"--output-dir {folder}-hf"
    )
    (folder / "config.json").write_text("{}")
    assert original_checkpoint(str(folder)) is None  # a model folder with an export beside its files
    (folder / "config.json").unlink()
    (folder / "options.json").unlink()
    (folder / "options.json").mkdir()
    assert original_checkpoint(str(folder)) is None
    assert original_checkpoint(str(folder / "weights.hdf5")) is None
