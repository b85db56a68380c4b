import errno
import io
import json
import os
import re
import subprocess
import sys
import urllib.request
from pathlib import Path

import h5py
import numpy as np
import pytest
import torch
from utils import convert_args, random_original_arrays, tiny_config, write_original_checkpoint

from hf_elmo import ElmoModel, ElmoTokenizer, conversion_original
from hf_elmo.conversion_original import convert_original, export_original, load_original, resolve_file
from hf_elmo.errors import ElmoConversionError
from hf_elmo.weight_mapping import state_dict_to_original

ROOT = Path(__file__).resolve().parents[1]


def read_all(path) -> dict[str, np.ndarray]:
    arrays = {}
    with h5py.File(path, "r") as handle:
        handle.visititems(
            lambda name, item: arrays.__setitem__(name, item[()]) if isinstance(item, h5py.Dataset) else None
        )
    return arrays


def assert_same_bits(first: dict, second: dict):
    assert sorted(first) == sorted(second)
    for name in first:
        assert first[name].dtype == second[name].dtype == np.float32, name
        np.testing.assert_array_equal(first[name].view(np.uint32), second[name].view(np.uint32), err_msg=name)


def run_script(name, *args):
    return subprocess.run(
        [sys.executable, str(ROOT / "conversion" / name), *map(str, args)], capture_output=True, text=True, timeout=120
    )


def test_converted_folder_loads_and_matches(fixture_dir, fixture_model, tmp_path):
    output = convert_original(fixture_dir / "options.json", fixture_dir / "lm_weights.hdf5", tmp_path / "elmo")
    assert {p.name for p in output.iterdir()} >= {
        "README.md",
        "config.json",
        "model.safetensors",
        "tokenizer_config.json",
        "modeling_elmo.py",
    }
    model = ElmoModel.from_pretrained(output).eval()
    tokenizer = ElmoTokenizer.from_pretrained(output)
    batch = tokenizer(["The cat sat .", "A dog"], padding=True, return_tensors="pt")
    with torch.no_grad():
        assert torch.equal(model(**batch).last_hidden_state, fixture_model(**batch).last_hidden_state)
    card = (output / "README.md").read_text()
    assert card.startswith("---\n") and "library_name: hf_elmo" in card and "lm_weights.hdf5" in card
    assert "all 33 datasets were mapped back" in card  # the fixture's weight file holds 33 datasets


def test_scripts_round_trip_the_fixture_bit_exact(fixture_dir, tmp_path):
    converted = run_script(
        "convert_allennlp_elmo.py",
        *convert_args(fixture_dir / "options.json", fixture_dir / "lm_weights.hdf5", tmp_path / "hf"),
    )
    assert converted.returncode == 0, converted.stderr
    exported = run_script("export_allennlp_elmo.py", "--model-dir", tmp_path / "hf", "--output-dir", tmp_path / "tf")
    assert exported.returncode == 0, exported.stderr
    assert_same_bits(read_all(tmp_path / "tf" / "weights.hdf5"), read_all(fixture_dir / "lm_weights.hdf5"))
    original_options = json.loads((fixture_dir / "options.json").read_text())
    assert json.loads((tmp_path / "tf" / "options.json").read_text()) == original_options


@pytest.mark.parametrize(
    "overrides",
    [
        dict(use_skip_connections=False),
        dict(activation="tanh", n_highway=0),
        dict(max_characters_per_token=30),
        dict(n_characters=261),
        dict(filters=[[1, 4], [2, 4]], projection_dim=8),
        dict(projection_dim=16, cell_dim=16),
    ],
    ids=lambda overrides: ",".join(f"{k}={v}" for k, v in overrides.items()),
)
def test_random_checkpoints_round_trip_bit_exact(overrides, tmp_path):
    config = tiny_config(**overrides)
    options_file, weight_file = write_original_checkpoint(tmp_path / "original", config, seed=7)
    convert_original(options_file, weight_file, tmp_path / "hf")
    assert ElmoModel.from_pretrained(tmp_path / "hf").config.to_original_options() == config.to_original_options()
    assert ElmoTokenizer.from_pretrained(tmp_path / "hf").max_characters_per_token == config.max_characters_per_token
    export_original(tmp_path / "hf", tmp_path / "back")
    assert_same_bits(read_all(tmp_path / "back" / "weights.hdf5"), read_all(weight_file))
    reloaded = load_original(tmp_path / "back" / "options.json", tmp_path / "back" / "weights.hdf5")
    assert reloaded.config.to_original_options() == config.to_original_options()


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
@pytest.mark.parametrize("source", ["model", "folder"])
def test_export_widens_reduced_precision_to_float32_exactly(dtype, source, tmp_path):
    """
    Every float of bfloat16 or float16 is a float32, so widening is exact: each exported dataset holds, bit for bit,
    the reduced-precision weights cast to float32 (the model itself, or its folder saved in that dtype), and loads
    back into those weights.
    """
    torch.manual_seed(0)
    model = ElmoModel(tiny_config()).to(dtype)
    if source == "folder":
        model.save_pretrained(tmp_path / "reduced")
    exported = export_original(model if source == "model" else tmp_path / "reduced", tmp_path / "exported")
    widened = {name: weight.float() for name, weight in model.state_dict().items()}
    assert_same_bits(read_all(exported / "weights.hdf5"), state_dict_to_original(widened, model.config))
    reloaded = load_original(exported / "options.json", exported / "weights.hdf5").state_dict()
    assert reloaded.keys() == widened.keys()
    for name, weight in widened.items():
        np.testing.assert_array_equal(reloaded[name].numpy().view(np.uint32), weight.numpy().view(np.uint32), name)


@pytest.mark.parametrize(
    "overrides, reasons",
    [
        (dict(forget_bias=0.0), "a forget-gate bias of 0.0 at run time (bilm-tf adds 1.0)"),
        (dict(highway_gate="carry"), "highway gates on the carry side"),
        (dict(word_input_vocab_size=10, word_input_dim=4), "a word-embedding input"),
        (  # the three filters hold 20 values
            dict(always_project=True, projection_dim=20, cell_dim=32),
            "a projection of a token representation that already has projection_dim values",
        ),
        (
            dict(forget_bias=2.0, highway_gate="carry"),
            "highway gates on the carry side, a forget-gate bias of 2.0 at run time (bilm-tf adds 1.0)",
        ),
    ],
    ids=["forget-bias", "carry-gates", "word-input", "projection-of-projection_dim", "two-reasons"],
)
def test_export_refuses_what_bilm_tf_cannot_hold_naming_it_and_writes_nothing(overrides, reasons, tmp_path):
    model = ElmoModel(tiny_config(**overrides))
    message = f"^bilm-tf's format cannot hold this model: it has {re.escape(reasons)}$"
    with pytest.raises(ElmoConversionError, match=message):
        export_original(model, tmp_path / "exported")
    assert not (tmp_path / "exported").exists()


def test_export_of_a_projection_bilm_tf_also_makes_holds(tmp_path):
    """`always_project` where the filters' width differs from `projection_dim` is bilm-tf's own projection."""
    model = ElmoModel(tiny_config(always_project=True))
    exported = export_original(model, tmp_path / "exported")
    assert "CNN_proj/W_proj" in read_all(exported / "weights.hdf5")


def test_shape_mismatch_names_the_dataset_and_writes_nothing(tmp_path):
    config = tiny_config()
    arrays = random_original_arrays(config)
    arrays["CNN_proj/W_proj"] = np.zeros((20, 9), np.float32)
    options_file, weight_file = write_original_checkpoint(tmp_path / "original", config, arrays=arrays)
    with pytest.raises(ElmoConversionError, match=r"'CNN_proj/W_proj' has shape \(20, 9\)"):
        convert_original(options_file, weight_file, tmp_path / "out")
    assert not (tmp_path / "out").exists()
    assert [p.name for p in tmp_path.iterdir()] == ["original"]  # no staging folder left behind


def test_options_that_disagree_with_the_weights(tmp_path):
    options_file, weight_file = write_original_checkpoint(tmp_path / "original", tiny_config(n_highway=2))
    options = json.loads(options_file.read_text())
    options["char_cnn"]["n_highway"] = 1
    options_file.write_text(json.dumps(options))
    with pytest.raises(ElmoConversionError, match="CNN_high_1"):
        load_original(options_file, weight_file)


def test_truncated_and_foreign_files(tmp_path):
    options_file, weight_file = write_original_checkpoint(tmp_path / "original", tiny_config())
    truncated = tmp_path / "truncated.hdf5"
    truncated.write_bytes(weight_file.read_bytes()[:2000])
    with pytest.raises(ElmoConversionError, match="not a readable HDF5 file"):
        convert_original(options_file, truncated, tmp_path / "out")
    foreign = tmp_path / "foreign.hdf5"
    with h5py.File(foreign, "w") as handle:
        handle.create_dataset("model/layer_1/kernel", data=np.zeros((3, 3), np.float32))
    with pytest.raises(ElmoConversionError, match="no dataset 'char_embed'"):
        convert_original(options_file, foreign, tmp_path / "out")
    with pytest.raises(ElmoConversionError) as raised:
        convert_original(weight_file, weight_file, tmp_path / "out")
    assert str(raised.value) == (
        f"{weight_file} is not UTF-8 (invalid start byte at byte 0); it should be the options.json of an original "
        "ELMo checkpoint"
    )
    with pytest.raises(ElmoConversionError, match="no such file"):
        convert_original(tmp_path / "missing.json", weight_file, tmp_path / "out")
    with pytest.raises(ElmoConversionError) as raised:
        convert_original(options_file, tmp_path, tmp_path / "out")  # a folder is not "no such file"
    assert str(raised.value) == f"{tmp_path} is a folder, where a file is needed (options.json or weights.hdf5)"
    assert not (tmp_path / "out").exists()


def test_existing_output_is_kept_unless_overwrite(tmp_path):
    options_file, weight_file = write_original_checkpoint(tmp_path / "original", tiny_config())
    target = tmp_path / "out"
    target.mkdir()
    (target / "keep.txt").write_text("mine")
    with pytest.raises(ElmoConversionError, match="not empty"):
        convert_original(options_file, weight_file, target)
    assert (target / "keep.txt").read_text() == "mine"
    convert_original(options_file, weight_file, target, overwrite=True)
    assert not (target / "keep.txt").exists() and (target / "model.safetensors").is_file()


def test_export_refuses_a_folder_that_is_not_a_model(tmp_path):
    with pytest.raises(ElmoConversionError, match="not an hf_elmo model folder"):
        export_original(tmp_path, tmp_path / "out")


def test_unreachable_url_gives_a_clear_error(tmp_path):
    with pytest.raises(ElmoConversionError, match="could not download http://127.0.0.1:9/options.json"):
        resolve_file("http://127.0.0.1:9/options.json", cache_dir=tmp_path)
    assert list(tmp_path.iterdir()) == []  # no partial download left


def test_a_download_the_cache_cannot_keep_names_the_full_disk(tmp_path, monkeypatch):
    """The download came, the cache's disk is full: the cause and its remedy, not the advice for a missing network."""

    class Response(io.BytesIO):
        headers = {"Content-Length": "4"}

    def full_disk_create(path, what):
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), str(path))

    monkeypatch.setattr(urllib.request, "urlopen", lambda url, timeout: Response(b"abcd"))
    monkeypatch.setattr(conversion_original, "create_exclusively", full_disk_create)
    with pytest.raises(ElmoConversionError) as raised:
        resolve_file("https://example.com/weights.hdf5", cache_dir=tmp_path)
    assert str(raised.value) == (
        f"cannot write {tmp_path / 'weights.hdf5.part'}: No space left on device; free some space and run again"
    )
    assert list(tmp_path.iterdir()) == []


def test_a_link_where_the_partial_download_would_be_is_refused_and_what_it_names_is_unchanged(tmp_path, monkeypatch):
    """`ln -s mine weights.hdf5.part` in the cache: the download is refused in one line before a byte is written, the
    link is not followed and the user's file keeps its bytes. (`urlopen` is a double: no network here.)"""

    class Response(io.BytesIO):
        headers = {"Content-Length": "4"}

    mine, cache = tmp_path / "mine.bin", tmp_path / "cache"
    mine.write_bytes(b"the user's own bytes")
    cache.mkdir()
    link = cache / "weights.hdf5.part"
    link.symlink_to(mine)
    monkeypatch.setattr(urllib.request, "urlopen", lambda url, timeout: Response(b"abcd"))
    with pytest.raises(ElmoConversionError) as raised:
        resolve_file("https://example.com/weights.hdf5", cache_dir=cache)
    assert f"{link} is a link (to {mine})" in str(raised.value) and "\n" not in str(raised.value)
    assert mine.read_bytes() == b"the user's own bytes" and link.is_symlink()
    assert sorted(path.name for path in cache.iterdir()) == ["weights.hdf5.part"]


def test_script_reports_errors_without_traceback(tmp_path):
    result = run_script(
        "convert_allennlp_elmo.py",
        *convert_args(tmp_path / "nope.json", tmp_path / "nope.hdf5", tmp_path / "out"),
    )
    assert result.returncode == 1
    assert result.stderr.startswith("convert_allennlp_elmo.py: error: no such file")
    assert "Traceback" not in result.stderr
    usage = run_script("convert_allennlp_elmo.py", "--help").stdout
    assert usage.startswith("usage: convert_allennlp_elmo.py [-h]") and "--push-to-hub" in usage, usage


# What safetensors raised writing to a full disk (the fault campaign's convert and run_classification.py).
FULL_DISK_SERIALIZING = "Error while serializing: I/O error: No space left on device (os error 28)"


def test_export_on_a_full_disk_is_one_line_and_hdf5_never_writes_to_the_disk(tmp_path, monkeypatch):
    """HDF5 writing to a disk that fills up printed some 230 lines of errors and then crashed the process: the file is
    built in memory and written as bytes, whose failure is one line leaving nothing."""
    model = ElmoModel(tiny_config())
    file = h5py.File

    def in_memory_only(name, *args, **kwargs):
        assert isinstance(name, io.BytesIO), f"h5py writes {name} itself"
        return file(name, *args, **kwargs)

    def full_disk(*args, **kwargs):
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    monkeypatch.setattr(h5py, "File", in_memory_only)
    monkeypatch.setattr(Path, "write_bytes", full_disk)
    with pytest.raises(ElmoConversionError) as raised:
        export_original(model, tmp_path / "out")
    assert str(raised.value) == (
        f"cannot write {tmp_path / 'out'}: No space left on device; free some space and run again"
    )
    assert list(tmp_path.iterdir()) == []
    monkeypatch.undo()
    export_original(model, tmp_path / "out")  # written from memory, read back as the file it was
    assert_same_bits(
        read_all(tmp_path / "out" / "weights.hdf5"), state_dict_to_original(model.state_dict(), model.config)
    )


def test_convert_on_a_full_disk_where_safetensors_writes_is_one_line(tmp_path, monkeypatch):
    from safetensors import SafetensorError
    from transformers import modeling_utils

    def full_disk(*args, **kwargs):
        raise SafetensorError(FULL_DISK_SERIALIZING)

    options_file, weight_file = write_original_checkpoint(tmp_path / "original", tiny_config())
    monkeypatch.setattr(modeling_utils, "safe_save_file", full_disk)
    with pytest.raises(ElmoConversionError) as raised:
        convert_original(options_file, weight_file, tmp_path / "out")
    assert str(raised.value) == (
        f"cannot write {tmp_path / 'out'}: No space left on device (os error 28); free some space and run again"
    )
    assert sorted(path.name for path in tmp_path.iterdir()) == ["original"]


@pytest.mark.parametrize("seed", [0, 25])  # HDF5 raises a RuntimeError (bad object header), a UnicodeDecodeError
def test_a_weight_file_with_damaged_blocks_is_one_line(tmp_path, seed):
    """Fifteen blocks of the file overwritten with random bytes, as the fault campaign did: one line saying that the
    file is damaged, where HDF5's own error came as a traceback."""
    import random

    options_file, weight_file = write_original_checkpoint(tmp_path / "original", tiny_config())
    damaged, rng = bytearray(weight_file.read_bytes()), random.Random(seed)
    for _ in range(15):
        start = rng.randrange(len(damaged) - 64)
        damaged[start : start + 64] = rng.randbytes(64)
    weight_file.write_bytes(bytes(damaged))
    with pytest.raises(ElmoConversionError) as raised:
        convert_original(options_file, weight_file, tmp_path / "out")
    message = str(raised.value)
    assert message.startswith(f"{weight_file} is not a readable HDF5 file (damaged, truncated or not HDF5: ")
    assert message.endswith("); copy or download it again") and "\n" not in message
    assert sorted(path.name for path in tmp_path.iterdir()) == ["original"]
