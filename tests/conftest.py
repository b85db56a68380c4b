"""The fixtures tests share (the helpers are in `utils.py`)."""

import json
import os
from pathlib import Path

import pytest
import torch
from utils import FIXTURE_DIR, converted_tiny_model, has_fixture, running_in_ci, tiny_config

from hf_elmo import ElmoModel, ElmoTokenizer, bundled_model_path


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
        if running_in_ci():
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


@pytest.fixture(scope="module")
def base_model(tmp_path_factory) -> Path:
    """A random tiny `ElmoModel` folder with its tokenizer (bytes, 20 per word), one per module."""
    folder = tmp_path_factory.mktemp("base")
    torch.manual_seed(0)
    ElmoModel(tiny_config()).save_pretrained(folder)
    ElmoTokenizer(max_characters_per_token=20).save_pretrained(folder)
    return folder


@pytest.fixture(scope="module")
def ko_nsmc_bilm() -> ElmoModel:
    """The bundled Korean biLM, `ko-nsmc`, in eval mode (do not modify it in a test)."""
    return ElmoModel.from_pretrained(bundled_model_path("ko-nsmc")).eval()


@pytest.fixture(scope="module")
def ko_nsmc_tokenizer() -> ElmoTokenizer:
    """The bundled biLM's tokenizer (Korean morphemes: needs kiwipiepy)."""
    return ElmoTokenizer.from_pretrained(bundled_model_path("ko-nsmc"))


@pytest.fixture
def stand_in_hub(tmp_path, monkeypatch):
    """
    The stand-in Hub (`hub_stand_in.StandInHub`, a test double of the Hub, which cannot be reached here) serving
    on 127.0.0.1 for one test, with this process and its subprocesses pointed at it: `HF_ENDPOINT`, a Hub cache
    and `HF_HOME` of the test's own, a dummy `HF_TOKEN`, and offline mode off. Stopped after the test.
    """
    import transformers.utils.hub
    from hub_stand_in import StandInHub
    from huggingface_hub import constants

    hub = StandInHub(tmp_path / "stand_in_hub").start()
    home = tmp_path / "hf_home"
    settings = {"HF_ENDPOINT": hub.endpoint, "HF_HOME": str(home), "HF_HUB_CACHE": str(home / "hub")}
    for name, value in {**settings, "HF_TOKEN": "hf_stand_in_token"}.items():
        monkeypatch.setenv(name, value)
    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
    monkeypatch.delenv("TRANSFORMERS_OFFLINE", raising=False)
    # huggingface_hub reads these variables once, when it is imported (already done here), into `constants`, where
    # its functions read them at each call: the environment reaches subprocesses, `constants` this process.
    monkeypatch.setattr(constants, "ENDPOINT", hub.endpoint)
    monkeypatch.setattr(
        constants, "HUGGINGFACE_CO_URL_TEMPLATE", hub.endpoint + "/{repo_id}/resolve/{revision}/{filename}"
    )
    monkeypatch.setattr(constants, "HF_HOME", settings["HF_HOME"])
    monkeypatch.setattr(constants, "HF_HUB_CACHE", settings["HF_HUB_CACHE"])
    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", False)
    # transformers' shared client (`hf_api()`, made on first use) keeps the endpoint it was made with: made anew
    # for this stand-in, and dropped after it.
    monkeypatch.setattr(transformers.utils.hub, "_hf_api", None)
    yield hub
    hub.stop()
