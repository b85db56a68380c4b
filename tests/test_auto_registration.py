"""Auto classes: `import hf_elmo` registers ELMo; saved folders carry `auto_map` and the code for remote loading."""

import json
import os
import subprocess
import sys
import textwrap

import pytest
import torch
from transformers import AutoConfig, AutoModel, AutoTokenizer

from hf_elmo import ElmoConfig, ElmoModel, ElmoTokenizer

from conftest import tiny_config

SENTENCES = [["The", "cat", "sat", "."], ["Dogs", "bark", "loudly", "at", "night", "!"]]

# Run in a fresh interpreter where any import of hf_elmo fails, as on a machine without the package.
REMOTE_LOAD_SCRIPT = textwrap.dedent(
    """
    import sys

    class BlockHfElmo:
        def find_spec(self, name, path=None, target=None):
            if name == "hf_elmo" or name.startswith("hf_elmo."):
                raise ImportError(name + " is blocked in this test")
            return None

    sys.meta_path.insert(0, BlockHfElmo())
    import json
    import torch
    from transformers import {auto_model}, AutoTokenizer

    folder, sentences, out = sys.argv[1], json.loads(sys.argv[2]), sys.argv[3]
    model = {auto_model}.from_pretrained(folder, trust_remote_code=True).eval()
    tokenizer = AutoTokenizer.from_pretrained(folder, trust_remote_code=True)
    assert not any(name.startswith("hf_elmo") for name in sys.modules), "hf_elmo was imported"
    batch = tokenizer(sentences, is_split_into_words=True, padding=True, return_tensors="pt")
    with torch.no_grad():
        output = model(**batch, output_hidden_states=True)
    torch.save({{"model_class": type(model).__module__ + "." + type(model).__name__,
                 "tokenizer_class": type(tokenizer).__module__ + "." + type(tokenizer).__name__,
                 "input_ids": batch["input_ids"], "output": output[0]}}, out)
    """
)


def run_without_hf_elmo(folder, out_file, auto_model="AutoModel"):
    """Loads `folder` with `auto_model` and AutoTokenizer in a subprocess that cannot import hf_elmo."""
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "HF_MODULES_CACHE": str(folder.parent / "modules_cache")}
    env.pop("PYTHONPATH", None)
    script = REMOTE_LOAD_SCRIPT.format(auto_model=auto_model)
    result = subprocess.run([sys.executable, "-c", script, str(folder), json.dumps(SENTENCES), str(out_file)],
                            env=env, capture_output=True, text=True, timeout=120, cwd=folder.parent)
    assert result.returncode == 0, result.stderr[-3000:]
    return torch.load(out_file)


def test_import_registers_the_auto_classes(tmp_path, tiny_model, tiny_tokenizer):
    tiny_model.save_pretrained(tmp_path)
    tiny_tokenizer.save_pretrained(tmp_path)
    assert isinstance(AutoConfig.for_model("elmo"), ElmoConfig)
    assert type(AutoModel.from_pretrained(tmp_path)) is ElmoModel
    assert type(AutoTokenizer.from_pretrained(tmp_path)) is ElmoTokenizer


def test_save_pretrained_writes_auto_map_and_code(tmp_path, tiny_model, tiny_tokenizer):
    tiny_model.save_pretrained(tmp_path)
    tiny_tokenizer.save_pretrained(tmp_path)
    config = json.loads((tmp_path / "config.json").read_text())
    assert config["auto_map"]["AutoConfig"] == "configuration_elmo.ElmoConfig"
    assert config["auto_map"]["AutoModel"] == "modeling_elmo.ElmoModel"
    tokenizer_config = json.loads((tmp_path / "tokenizer_config.json").read_text())
    assert tokenizer_config["auto_map"]["AutoTokenizer"][0] == "tokenization_elmo.ElmoTokenizer"
    for name in ("configuration_elmo.py", "modeling_elmo.py", "tokenization_elmo.py"):
        assert (tmp_path / name).is_file(), name


def test_remote_code_loads_without_hf_elmo_and_matches(tmp_path, tiny_model, tiny_tokenizer):
    folder = tmp_path / "elmo"
    tiny_model.save_pretrained(folder)
    tiny_tokenizer.save_pretrained(folder)
    remote = run_without_hf_elmo(folder, tmp_path / "out.pt")
    assert remote["model_class"].startswith("transformers_modules.") and remote["model_class"].endswith("ElmoModel")
    assert remote["tokenizer_class"].startswith("transformers_modules.")
    batch = tiny_tokenizer(SENTENCES, is_split_into_words=True, padding=True, return_tensors="pt")
    assert torch.equal(remote["input_ids"], batch["input_ids"])
    with torch.no_grad():
        expected = tiny_model(**batch).last_hidden_state
    assert torch.equal(remote["output"], expected)


def test_converted_folder_loads_without_hf_elmo(tmp_path):
    pytest.importorskip("h5py")
    from conftest import write_original_checkpoint
    from hf_elmo.conversion import convert, load_original

    config = tiny_config()
    options, weights = write_original_checkpoint(tmp_path / "original", config, seed=3)
    folder = convert(options, weights, tmp_path / "converted")
    assert "AutoModel" in json.loads((folder / "config.json").read_text())["auto_map"]
    remote = run_without_hf_elmo(folder, tmp_path / "out.pt")
    model = load_original(options, weights)
    tokenizer = ElmoTokenizer(max_characters_per_token=config.max_characters_per_token)
    batch = tokenizer(SENTENCES, is_split_into_words=True, padding=True, return_tensors="pt")
    with torch.no_grad():
        assert torch.equal(remote["output"], model(**batch).last_hidden_state)
