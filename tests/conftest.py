"""The fixtures tests share (the helpers are in `utils.py`)."""

import json
import os
from pathlib import Path

import pytest
import torch
from utils import FIXTURE_DIR, converted_tiny_model, has_fixture, tiny_config

from hf_elmo import ElmoModel, ElmoTokenizer


@pytest.fixture(scope="session", autouse=True)
def matmul_choices_in_a_temporary_folder(tmp_path_factory):
    """`cpu_matmul="auto"` keeps what it measures in `$HF_ELMO_CACHE`: the suite's own, never the user's cache."""
    previous = os.environ.get("HF_ELMO_CACHE")
    os.environ["HF_ELMO_CACHE"] = str(tmp_path_factory.mktemp("hf_elmo_cache"))
    yield
    if previous is None:
        del os.environ["HF_ELMO_CACHE"]
    else:
        os.environ["HF_ELMO_CACHE"] = previous


@pytest.fixture(scope="session")
def fixture_dir() -> Path:
    """`../shared/fixtures/allennlp-elmo`: a small original checkpoint with activations from bilm-tf.

    Skipped where it is absent, except in CI (`CI=true`), where the parity tests must run: there it fails."""
    if not has_fixture():
        message = f"the original test checkpoint is not at {FIXTURE_DIR} (../shared beside the project)"
        if os.environ.get("CI", "").lower() in ("true", "1"):
            pytest.fail(f"CI=true and {message}", pytrace=False)
        pytest.skip(message)
    return FIXTURE_DIR


@pytest.fixture(scope="session")
def fixture_model(fixture_dir) -> ElmoModel:
    """The original test checkpoint as an `ElmoModel` in eval mode (do not modify it in a test)."""
    from hf_elmo.conversion_original import load_original

    return load_original(fixture_dir / "options.json", fixture_dir / "lm_weights.hdf5")


@pytest.fixture(scope="session")
def fixture_sentences(fixture_dir) -> list[list[str]]:
    """The 3 lists of 10 sentences of the fixture, as given (words separated by single spaces)."""
    return json.loads((fixture_dir / "sentences.json").read_text(encoding="utf-8"))


@pytest.fixture
def tiny_model() -> ElmoModel:
    """A randomly initialised tiny `ElmoModel` in eval mode."""
    torch.manual_seed(0)
    return ElmoModel(tiny_config()).eval()


@pytest.fixture
def tiny_tokenizer() -> ElmoTokenizer:
    return ElmoTokenizer(max_characters_per_token=20)


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory) -> Path:
    """A tiny original checkpoint converted by `hf-elmo convert` (`utils.converted_tiny_model`), one per module."""
    return converted_tiny_model(tmp_path_factory.mktemp("converted"))


@pytest.fixture(scope="module")
def model(model_dir) -> ElmoModel:
    """`model_dir` loaded as an `ElmoModel` in eval mode (do not modify it in a test)."""
    return ElmoModel.from_pretrained(model_dir).eval()
