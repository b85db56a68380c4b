"""The name rules of `hf_elmo.model_names`: what a model name on a command line can stand for, from the disk alone."""

import pytest

from hf_elmo.model_names import BUNDLED_DIR, is_path_only, local_model_folder


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
