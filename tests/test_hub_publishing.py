"""Hub publishing up to the upload call (the Hub is not reachable here): the calls are recorded, not sent."""

import importlib.util
import json
from pathlib import Path

import pytest
from huggingface_hub import HfApi
from utils import convert_args, tiny_config, write_original_checkpoint

SCRIPT = Path(__file__).resolve().parents[1] / "conversion" / "convert_allennlp_elmo.py"


@pytest.fixture
def recorded_hub(monkeypatch):
    """Replaces the Hub calls with recorders; `upload_folder` snapshots the folder it was asked to upload."""
    calls = []

    def create_repo(self, repo_id, **kwargs):
        calls.append(("create_repo", repo_id, kwargs))

    def upload_folder(self, folder_path, repo_id, **kwargs):
        folder = Path(folder_path)
        files = {p.name: p.read_bytes() for p in folder.iterdir() if p.is_file()}
        calls.append(("upload_folder", repo_id, files))
        return "https://huggingface.co/recorded/commit"

    monkeypatch.setattr(HfApi, "create_repo", create_repo)
    monkeypatch.setattr(HfApi, "upload_folder", upload_folder)
    # `hf-elmo convert` checks that the Hub can be reached before uploading, unless offline mode is on; the recorders
    # make no request, so offline mode skips that check without changing what is recorded.
    monkeypatch.setattr("huggingface_hub.constants.HF_HUB_OFFLINE", True)
    return calls


def test_converter_push_to_hub_uploads_a_complete_folder(tmp_path, recorded_hub):
    spec = importlib.util.spec_from_file_location("convert_allennlp_elmo", SCRIPT)
    script = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(script)
    options, weights = write_original_checkpoint(tmp_path / "original", tiny_config(), seed=1)
    code = script.main(
        [
            *convert_args(options, weights, tmp_path / "out"),
            "--push-to-hub",
            "someone/elmo-tiny",
        ]
    )
    assert code == 0
    assert [call[:2] for call in recorded_hub] == [
        ("create_repo", "someone/elmo-tiny"),
        ("upload_folder", "someone/elmo-tiny"),
    ]
    files = recorded_hub[1][2]
    for name in (
        "config.json",
        "model.safetensors",
        "tokenizer_config.json",
        "README.md",
        "modeling_elmo.py",
        "configuration_elmo.py",
        "tokenization_elmo.py",
    ):
        assert name in files, name
    assert "AutoModel" in json.loads(files["config.json"])["auto_map"]
    card = files["README.md"].decode()
    assert card.startswith("---\n") and "library_name:" in card and "trust_remote_code=True" in card


def test_converter_without_push_makes_no_hub_call(tmp_path, recorded_hub):
    spec = importlib.util.spec_from_file_location("convert_allennlp_elmo", SCRIPT)
    script = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(script)
    options, weights = write_original_checkpoint(tmp_path / "original", tiny_config(), seed=1)
    assert script.main(convert_args(options, weights, tmp_path / "out")) == 0
    assert recorded_hub == []


def test_model_and_tokenizer_push_to_hub_through_the_standard_api(monkeypatch, tiny_tokenizer):
    from types import SimpleNamespace

    from hf_elmo import ElmoForSequenceClassification

    commits = []

    def create_repo(self, repo_id, **kwargs):
        return SimpleNamespace(repo_id=repo_id)

    def create_commit(self, repo_id, operations, **kwargs):
        files = {op.path_in_repo: Path(op.path_or_fileobj).read_bytes() for op in operations}
        commits.append((repo_id, files))
        return "https://huggingface.co/recorded/commit"

    monkeypatch.setattr(HfApi, "create_repo", create_repo)
    monkeypatch.setattr(HfApi, "create_commit", create_commit)
    # push_to_hub also looks for an existing model card on the Hub: offline, it writes a fresh one without waiting.
    monkeypatch.setattr("huggingface_hub.constants.HF_HUB_OFFLINE", True)
    model = ElmoForSequenceClassification(tiny_config(num_labels=2))
    model.push_to_hub("someone/elmo-sst")
    tiny_tokenizer.push_to_hub("someone/elmo-sst")
    (repo, model_files), (_, tokenizer_files) = commits
    assert repo == "someone/elmo-sst"
    config = json.loads(model_files["config.json"])
    assert config["auto_map"]["AutoModelForSequenceClassification"] == "modeling_elmo.ElmoForSequenceClassification"
    assert {"model.safetensors", "modeling_elmo.py", "configuration_elmo.py"} <= set(model_files)
    assert "tokenization_elmo.py" in tokenizer_files
    assert "AutoTokenizer" in json.loads(tokenizer_files["tokenizer_config.json"])["auto_map"]
