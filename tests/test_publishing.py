"""`hf_elmo.publishing.publish_folder` (`hf-elmo push`): a bundled model or a folder uploaded complete, through
huggingface_hub's real client to the stand-in Hub (`hub_stand_in.py`), loading by id where hf_elmo is not installed;
its failures in one line."""

import errno
import hashlib
import json
import os
from pathlib import Path

import pytest
import torch
from huggingface_hub import HfApi
from safetensors import safe_open
from transformers import AutoModel, AutoModelForSequenceClassification, AutoTokenizer, pipeline
from utils import FLOAT32_TOLERANCE, load_without_hf_elmo, save_with_word_counts, tiny_config

from hf_elmo import ElmoForPreTraining, ElmoModel, bundled_model_path
from hf_elmo.errors import CommandError
from hf_elmo.publishing import publish_folder, upload_error_line

REVIEWS = ["정말 재미있고 감동적인 영화였어요", "시간 낭비, 돈 아깝다"]
CODE_FILES = {"configuration_elmo.py", "modeling_elmo.py", "tokenization_elmo.py", "korean_morphemes.py"}


def folder_digest(folder: Path) -> dict[str, str]:
    return {file.name: hashlib.sha256(file.read_bytes()).hexdigest() for file in sorted(folder.iterdir())}


# The bundled models, each with the Auto class of its head.
BUNDLED_AUTO_CLASSES = {"ko-nsmc": AutoModel, "ko-nsmc-sentiment": AutoModelForSequenceClassification}


def test_bundled_models_published_load_by_id_without_hf_elmo(stand_in_hub, tmp_path):
    """The bundled folders hold no code and no `auto_map`: published, they load by id without hf_elmo (with
    kiwipiepy for their tokenizer) and give the bundled folders' outputs; the package's folders are not written."""
    jobs, expected = [], {}
    for name, auto_class in BUNDLED_AUTO_CLASSES.items():
        folder, repo_id = Path(bundled_model_path(name)), f"someone/{name}"
        before = folder_digest(folder)
        commit = publish_folder(name, repo_id)
        assert commit == f"{stand_in_hub.endpoint}/{repo_id}/commit/{stand_in_hub.commits[repo_id]}"
        assert folder_digest(folder) == before
        files = {file.name: file for file in stand_in_hub.files(repo_id)}
        assert CODE_FILES <= set(files)
        config = json.loads(files["config.json"].read_text(encoding="utf-8"))
        assert config["auto_map"][auto_class.__name__] == f"modeling_elmo.{config['architectures'][0]}"
        model = auto_class.from_pretrained(folder).eval()
        batch = AutoTokenizer.from_pretrained(folder)(REVIEWS, padding=True, return_tensors="pt")
        with torch.inference_mode():
            expected[repo_id] = batch["input_ids"], model(**batch)[0]
        jobs.append([repo_id, auto_class.__name__])
    # The pipeline runs on the first job: the biLM's features.
    features = torch.tensor(pipeline("feature-extraction", model=bundled_model_path("ko-nsmc"))(REVIEWS[0]))
    loaded = load_without_hf_elmo(jobs, REVIEWS, tmp_path, offline=False)
    for repo_id, (input_ids, output) in expected.items():
        assert loaded[repo_id]["model_class"].startswith("transformers_modules."), repo_id
        assert torch.equal(loaded[repo_id]["input_ids"], input_ids), repo_id
        torch.testing.assert_close(loaded[repo_id]["output"], output, atol=FLOAT32_TOLERANCE, rtol=FLOAT32_TOLERANCE)
    torch.testing.assert_close(loaded["pipeline"], features, atol=FLOAT32_TOLERANCE, rtol=FLOAT32_TOLERANCE)


def test_published_bilm_keeps_its_folder_files_as_they_are(stand_in_hub):
    """The bundled biLM's card, word counts and sentence-transformers settings (its own SIF weight and reference
    statistics, which `save_pretrained` would write as the defaults) are uploaded as the folder holds them."""
    folder = Path(bundled_model_path("ko-nsmc"))
    publish_folder("ko-nsmc", "someone/ko-nsmc")
    uploaded = {file.name: file.read_bytes() for file in stand_in_hub.files("someone/ko-nsmc")}
    kept = ("README.md", "word_counts.json", "sentence_bert_config.json", "modules.json", "word_vocab.json")
    for name in kept:
        assert uploaded[name] == (folder / name).read_bytes(), name
    assert CODE_FILES <= set(uploaded)
    assert "AutoModel" in json.loads(uploaded["config.json"])["auto_map"]


def test_published_folder_keeps_the_weights_dtype_class_and_extra_files(stand_in_hub, tmp_path):
    """A float16 pre-training folder is uploaded in float16, as `ElmoForPreTraining` (its softmax kept), with its
    word counts and card; the folder itself is left as it was."""
    torch.manual_seed(0)
    config = tiny_config(word_vocab_size=7, n_negative_samples=4)  # <S>, </S>, <UNK>, a, b, c, d
    folder = save_with_word_counts(tmp_path / "model", ElmoForPreTraining(config).half(), ["a b c", "b c d"])
    (folder / "README.md").write_text("---\nlibrary_name: hf_elmo\n---\n\n# A tiny ELMo\n", encoding="utf-8")
    before = folder_digest(folder)
    publish_folder(str(folder), "someone/elmo-half", private=True)
    assert folder_digest(folder) == before
    assert HfApi().model_info("someone/elmo-half").private
    repo = {file.name: file for file in stand_in_hub.files("someone/elmo-half")}
    for name in ("README.md", "word_counts.json", "word_vocab.json"):
        assert repo[name].read_bytes() == (folder / name).read_bytes(), name
    with safe_open(str(repo["model.safetensors"]), framework="pt") as weights:
        names = list(weights.keys())
        assert {weights.get_tensor(name).dtype for name in names} == {torch.float16}
    assert any(name.startswith("softmax.") for name in names)
    assert json.loads(repo["config.json"].read_text(encoding="utf-8"))["architectures"] == ["ElmoForPreTraining"]


def test_publish_failures_are_one_line(stand_in_hub, tmp_path, monkeypatch):
    without_card = tmp_path / "without_card"
    ElmoModel(tiny_config()).save_pretrained(without_card)
    with pytest.raises(CommandError, match=r"^no such model folder or bundled model \(ko-nsmc, ko-nsmc-sentiment\)"):
        publish_folder("ko-nsmc-large", "someone/elmo")
    with pytest.raises(CommandError, match=rf"^{without_card} has no model card \(README.md\): write one"):
        publish_folder(str(without_card), "someone/elmo")
    with pytest.raises(CommandError, match=r"^bad id! is not a Hub repository id: Repo id must use alphanumeric"):
        publish_folder("ko-nsmc", "bad id!")
    # The stand-in refuses a repository id without a namespace: an HTTP error through the real client, whose reason
    # huggingface_hub gives on its second line.
    reason = "Bad request: the stand-in Hub takes a namespace in the repository id: elmo"
    with pytest.raises(
        CommandError, match=rf"^the upload of ko-nsmc to elmo failed: {reason}; check the repository id"
    ):
        publish_folder("ko-nsmc", "elmo")
    monkeypatch.setattr("huggingface_hub.constants.HF_HUB_OFFLINE", True)
    with pytest.raises(CommandError, match=r"^the upload of ko-nsmc to someone/elmo failed: HF_HUB_OFFLINE=1 is set"):
        publish_folder("ko-nsmc", "someone/elmo")
    monkeypatch.setattr("huggingface_hub.constants.HF_HUB_OFFLINE", False)
    monkeypatch.setattr("huggingface_hub.constants.ENDPOINT", "http://127.0.0.1:1")  # nothing listens there
    with pytest.raises(
        CommandError, match=r"^the upload of ko-nsmc to someone/elmo failed: the Hub cannot be reached$"
    ):
        publish_folder("ko-nsmc", "someone/elmo")
    assert stand_in_hub.commits == {}


def test_an_upload_error_is_its_first_line_and_the_hubs_reason_once():
    """huggingface_hub puts the Hub's reason on a later line of an HTTP error (`server_message`); an error of the
    upload that is no HTTP error (a file that cannot be read, a connection cut) has none. The errors here stand in
    for the Hub's answers, which cannot come here."""

    class HubHTTPError(Exception):
        def __init__(self, message, server_message):
            super().__init__(message)
            self.server_message = server_message

    status = "400 Client Error: Bad Request for url: http://hub/api/models/elmo/commit/main"
    refused = HubHTTPError(f"{status}\n\nBad request: no namespace", "Bad request: no namespace\n")
    assert upload_error_line(refused) == f"{status} Bad request: no namespace"
    assert upload_error_line(HubHTTPError("409 Conflict: a commit is in progress", "a commit is in progress")) == (
        "409 Conflict: a commit is in progress"
    )
    assert upload_error_line(HubHTTPError(status, None)) == status
    assert (
        upload_error_line(OSError(errno.EIO, os.strerror(errno.EIO)))
        == f"[Errno {errno.EIO}] {os.strerror(errno.EIO)}"
    )
