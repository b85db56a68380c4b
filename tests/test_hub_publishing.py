"""Publishing to the Hub through huggingface_hub's real upload code, and loading by id where hf_elmo is not installed.

The Hub cannot be reached here: the `stand_in_hub` fixture serves its routes on 127.0.0.1 (`hub_stand_in.py`).
`model.push_to_hub`, `tokenizer.push_to_hub` and `hf-elmo convert --push-to-hub` upload to it; a fresh interpreter
in which hf_elmo cannot be imported loads each repository by id with `trust_remote_code=True` (`AutoConfig`,
`AutoTokenizer`, the Auto class of the model, a feature-extraction pipeline) and must give the outputs of the folder
it came from; then again with `HF_HUB_OFFLINE=1`, from the Hub cache alone, asking the Hub nothing.

`hf-elmo push` (`hf_elmo.publishing`) is tested in `test_publishing.py`.
"""

import importlib.util
import json
from pathlib import Path

import torch
from transformers import AutoModel, AutoModelForSequenceClassification, AutoTokenizer, pipeline
from utils import FLOAT32_TOLERANCE, convert_args, load_without_hf_elmo, tiny_config, write_original_checkpoint

from hf_elmo import ElmoForSequenceClassification, ElmoModel

SCRIPT = Path(__file__).resolve().parents[1] / "conversion" / "convert_allennlp_elmo.py"
SENTENCES = [["The", "cat", "sat", "on", "the", "mat", "."], ["Hello", "world"], ["ELMo"]]
CODE_FILES = {"configuration_elmo.py", "modeling_elmo.py", "tokenization_elmo.py", "kernels_elmo.py"}


def local_outputs(folder: Path, auto_class) -> dict:
    """What the saved `folder` computes on `SENTENCES` with hf_elmo's classes: the input ids, the model's first output,
    and a feature-extraction pipeline's on the first sentence."""
    model = auto_class.from_pretrained(folder).eval()
    batch = AutoTokenizer.from_pretrained(folder)(
        SENTENCES, is_split_into_words=True, padding=True, return_tensors="pt"
    )
    with torch.inference_mode():
        output = model(**batch)[0]
    extractor = pipeline("feature-extraction", model=str(folder))
    return {
        "input_ids": batch["input_ids"],
        "output": output,
        "pipeline": torch.tensor(extractor(" ".join(SENTENCES[0]))),
    }


def assert_loads_by_id_as_local(hub, jobs: dict[str, type], expected: dict[str, dict], workdir: Path) -> None:
    """
    Each repository of `jobs` (Hub id -> Auto class) loaded by id without hf_elmo, from the Hub and then offline from
    the cache (with no request to the Hub), gives `expected[id]` (`local_outputs`); the pipeline runs on the first.
    """
    workdir.mkdir()
    pairs = [[repo_id, auto_class.__name__] for repo_id, auto_class in jobs.items()]
    for offline in (False, True):
        requests_before = len(hub.requests)
        loaded = load_without_hf_elmo(pairs, SENTENCES, workdir, offline=offline)
        if offline:
            assert hub.requests[requests_before:] == []
        for repo_id in jobs:
            for kind in ("config_class", "model_class", "tokenizer_class"):  # the repository's code, not hf_elmo's
                assert loaded[repo_id][kind].startswith("transformers_modules."), (repo_id, kind, offline)
            assert torch.equal(loaded[repo_id]["input_ids"], expected[repo_id]["input_ids"])
            for output in ("output", "reference_output"):
                torch.testing.assert_close(
                    loaded[repo_id][output],
                    expected[repo_id]["output"],
                    atol=FLOAT32_TOLERANCE,
                    rtol=FLOAT32_TOLERANCE,
                )
        first = next(iter(jobs))
        torch.testing.assert_close(
            loaded["pipeline"], expected[first]["pipeline"], atol=FLOAT32_TOLERANCE, rtol=FLOAT32_TOLERANCE
        )


def test_model_and_tokenizer_push_to_hub_load_by_id_without_hf_elmo(stand_in_hub, tiny_tokenizer, tmp_path):
    """transformers' `push_to_hub` of a biLM and of a head, each with the tokenizer, through huggingface_hub's upload:
    the repositories hold the code files and `auto_map`, and load by id as their saved folders."""
    torch.manual_seed(0)
    models = {
        "someone/elmo-tiny": (ElmoModel(tiny_config()), AutoModel),
        "someone/elmo-sst": (
            ElmoForSequenceClassification(tiny_config(num_labels=2)),
            AutoModelForSequenceClassification,
        ),
    }
    expected = {}
    for repo_id, (model, auto_class) in models.items():
        model.eval().push_to_hub(repo_id)
        tiny_tokenizer.push_to_hub(repo_id)
        assert f"POST /api/models/{repo_id}/preupload/main" in stand_in_hub.requests
        assert f"POST /api/models/{repo_id}/commit/main" in stand_in_hub.requests
        files = {file.name: file for file in stand_in_hub.files(repo_id)}
        assert CODE_FILES | {"config.json", "model.safetensors", "tokenizer_config.json", "README.md"} <= set(files)
        config = json.loads(files["config.json"].read_text(encoding="utf-8"))
        assert config["auto_map"][auto_class.__name__] == f"modeling_elmo.{type(model).__name__}"
        assert "AutoTokenizer" in json.loads(files["tokenizer_config.json"].read_text(encoding="utf-8"))["auto_map"]
        local = tmp_path / repo_id
        model.save_pretrained(local)
        tiny_tokenizer.save_pretrained(local)
        expected[repo_id] = local_outputs(local, auto_class)
    assert_loads_by_id_as_local(
        stand_in_hub, {repo_id: auto for repo_id, (_, auto) in models.items()}, expected, tmp_path / "load"
    )


def convert_script():
    spec = importlib.util.spec_from_file_location("convert_allennlp_elmo", SCRIPT)
    script = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(script)
    return script


def test_converter_push_to_hub_uploads_a_folder_that_loads_by_id_without_hf_elmo(stand_in_hub, tmp_path):
    options, weights = write_original_checkpoint(tmp_path / "original", tiny_config(), seed=1)
    code = convert_script().main(
        [*convert_args(options, weights, tmp_path / "out"), "--push-to-hub", "someone/elmo-tiny"]
    )
    assert code == 0
    uploaded = {file.name: file.read_bytes() for file in stand_in_hub.files("someone/elmo-tiny")}
    written = {file.name: file.read_bytes() for file in (tmp_path / "out").iterdir()}
    assert uploaded == written  # the folder as it was written, every file
    assert CODE_FILES <= set(uploaded) and "AutoModel" in json.loads(uploaded["config.json"])["auto_map"]
    card = uploaded["README.md"].decode()
    assert card.startswith("---\n") and "library_name:" in card and "trust_remote_code=True" in card
    expected = {"someone/elmo-tiny": local_outputs(tmp_path / "out", AutoModel)}
    assert_loads_by_id_as_local(stand_in_hub, {"someone/elmo-tiny": AutoModel}, expected, tmp_path / "load")


def test_converter_without_push_makes_no_hub_call(tmp_path, stand_in_hub):
    options, weights = write_original_checkpoint(tmp_path / "original", tiny_config(), seed=1)
    assert convert_script().main(convert_args(options, weights, tmp_path / "out")) == 0
    assert not any(request.startswith("POST") for request in stand_in_hub.requests)
    assert stand_in_hub.commits == {}
