"""Converting the original ELMo format (bilm-tf and AllenNLP: `options.json` + `weights.hdf5`) to and from hf_elmo
model folders: `hf-elmo convert` / `hf-elmo export` with `--format original`.

Conversion is one module per source format: this one for the original format, whose array mapping lives apart in
`weight_mapping.py` (pure functions, each the inverse of the other), and `conversion_elmoformanylangs.py` for
ELMoForManyLangs releases. The command line is in `cli.py`, which the scripts in the repository's `conversion/`
folder run under their own names; folders are written by `folders.py`, cards from `model_cards/*.md` by
`model_card.py`. This module does the I/O around the mapping: downloads, HDF5 reading and writing.
"""

import io
import json
import os
import urllib.error
import urllib.request
from pathlib import Path

import numpy as np
import torch

from .configuration_elmo import ElmoConfig
from .errors import ElmoConversionError, FileContentError, JsonFields, first_line
from .folders import WRITE_ADVICE, atomic_directory, create_exclusively, write_error
from .loading import load_model
from .model_card import packaged_template, write_model_card
from .modeling_elmo import ElmoModel
from .tokenization_elmo import ElmoTokenizer
from .weight_mapping import original_to_state_dict, state_dict_to_original

# The released original model (Peters et al., 2018), as published by AllenNLP.
ORIGINAL_ELMO_URL = "https://s3-us-west-2.amazonaws.com/allennlp/models/elmo/2x4096_512_2048cnn_2xhighway/"
ORIGINAL_OPTIONS_URL = ORIGINAL_ELMO_URL + "elmo_2x4096_512_2048cnn_2xhighway_options.json"
ORIGINAL_WEIGHTS_URL = ORIGINAL_ELMO_URL + "elmo_2x4096_512_2048cnn_2xhighway_weights.hdf5"


def _h5py():
    try:
        import h5py
    except ImportError as error:
        raise ElmoConversionError("reading and writing original checkpoints needs h5py: pip install h5py") from error
    return h5py


# -- files and URLs ---------------------------------------------------------------------------------------------------


def resolve_file(path_or_url: str | os.PathLike, cache_dir: str | os.PathLike | None = None) -> Path:
    """A local path as is; an http(s) URL downloaded once (with a progress bar) into `cache_dir`, through
    `NAME.part` (a new file of this call's own: a link there is refused, never followed), renamed once whole."""
    text = str(path_or_url)
    if not text.startswith(("http://", "https://")):
        path = Path(text)
        if path.is_dir():
            raise ElmoConversionError(f"{path} is a folder, where a file is needed (options.json or weights.hdf5)")
        if not path.is_file():
            raise ElmoConversionError(f"no such file: {path}")
        return path
    cache = Path(cache_dir or os.environ.get("HF_ELMO_CACHE", Path.home() / ".cache" / "hf_elmo"))
    target = cache / text.rstrip("/").rsplit("/", 1)[-1]
    if target.is_file():
        return target
    partial = target.with_name(target.name + ".part")
    try:
        cache.mkdir(parents=True, exist_ok=True)
        with (
            urllib.request.urlopen(text, timeout=30) as response,
            create_exclusively(partial, "partial download") as out,
        ):
            from tqdm.auto import tqdm

            total = int(response.headers.get("Content-Length") or 0) or None
            with tqdm(total=total, unit="B", unit_scale=True, desc=target.name) as progress:
                while chunk := response.read(1 << 20):
                    out.write(chunk)
                    progress.update(len(chunk))
    except (urllib.error.URLError, OSError) as error:
        partial.unlink(missing_ok=True)
        if error.errno in WRITE_ADVICE:  # the download came, the cache could not keep it (a full disk, read-only)
            raise write_error(partial, error) from error
        reason = getattr(error, "reason", error)
        raise ElmoConversionError(
            f"could not download {text}: {reason}. Without network access, fetch the file elsewhere and pass "
            f"its local path instead."
        ) from error
    partial.replace(target)
    return target


def read_options(path: str | os.PathLike) -> dict:
    """The parsed `options.json`, a JSON object (read by `errors.read_json_file`: a regular file of bounded size);
    anything else is a one-line `ElmoConversionError`."""
    fix = "it should be the options.json of an original ELMo checkpoint"
    try:
        return JsonFields.of_file(path, fix).data
    except FileContentError as error:
        raise ElmoConversionError(str(error)) from error


def read_weights(path: str | os.PathLike) -> dict[str, np.ndarray]:
    """Every dataset of an original `weights.hdf5`, by its path inside the file."""
    h5py = _h5py()
    arrays = {}
    try:
        with h5py.File(path, "r") as handle:

            def collect(name, item):
                if isinstance(item, h5py.Dataset):
                    arrays[name] = item[()]

            handle.visititems(collect)
    except (OSError, RuntimeError, UnicodeDecodeError, KeyError, ValueError) as error:
        # What HDF5 raises depends on where a file is damaged: a bad object header, a name that is no UTF-8...
        raise ElmoConversionError(
            f"{path} is not a readable HDF5 file (damaged, truncated or not HDF5: {first_line(error)}); copy or "
            "download it again"
        ) from error
    if not arrays:
        raise ElmoConversionError(f"{path} holds no datasets: it is not an ELMo weight file")
    return arrays


def load_original(options_file, weight_file, cache_dir=None) -> ElmoModel:
    """An `ElmoModel` (in eval mode) with the weights of an original checkpoint; paths or URLs."""
    return _load_original_with_arrays(options_file, weight_file, cache_dir)[0]


def _load_original_with_arrays(options_file, weight_file, cache_dir=None) -> tuple[ElmoModel, dict[str, np.ndarray]]:
    options = read_options(resolve_file(options_file, cache_dir))
    try:
        config = ElmoConfig.from_original_options(options)
    except ValueError as error:
        raise ElmoConversionError(f"{options_file}: {error}") from error
    arrays = read_weights(resolve_file(weight_file, cache_dir))
    try:
        state_dict = original_to_state_dict(arrays, config)
    except ValueError as error:
        raise ElmoConversionError(f"{weight_file} does not match {options_file}: {error}") from error
    model = ElmoModel(config)
    model.load_state_dict(state_dict, strict=True)
    return model.eval(), arrays


def count_round_trip_mismatches(model: ElmoModel, arrays: dict[str, np.ndarray]) -> int:
    """How many original datasets do not come back bit for bit from `model`'s state dict (0 when lossless)."""
    back = state_dict_to_original(model.state_dict(), model.config)
    return sum(name not in back or back[name].tobytes() != array.tobytes() for name, array in arrays.items())


# -- original -> hf_elmo ----------------------------------------------------------------------------------------------


def convert_original(
    options_file,
    weight_file,
    output_dir,
    overwrite: bool = False,
    cache_dir=None,
    model_card_template: str | None = None,
) -> Path:
    """
    Converts an original checkpoint into a `from_pretrained`-ready folder: `config.json`, `model.safetensors`, the
    tokenizer files and a model card `README.md`. The folder appears complete or not at all. Before writing, the
    weights are mapped back to the original layout and compared bit for bit with the file.
    """
    model, arrays = _load_original_with_arrays(options_file, weight_file, cache_dir)
    mismatches = count_round_trip_mismatches(model, arrays)
    if mismatches:
        raise ElmoConversionError(f"{mismatches} datasets do not map back to the original bit for bit")
    tokenizer = ElmoTokenizer(max_characters_per_token=model.config.max_characters_per_token)
    template = model_card_template if model_card_template is not None else packaged_template("converted_elmo.md")
    with atomic_directory(output_dir, overwrite) as staging:
        model.save_pretrained(staging)
        tokenizer.save_pretrained(staging)
        write_model_card(
            staging,
            template,
            options_file=Path(str(options_file)).name,
            weight_file=Path(str(weight_file)).name,
            n_layers=model.config.n_layers,
            cell_dim=model.config.cell_dim,
            projection_dim=model.config.projection_dim,
            n_parameters=f"{model.num_parameters():,}",
            n_datasets=len(arrays),
        )
    return Path(output_dir)


# -- hf_elmo -> original ----------------------------------------------------------------------------------------------


def export_original(model_dir, output_dir, overwrite: bool = False) -> Path:
    """Writes `options.json` + `weights.hdf5` in the original layout from a model folder, a bundled model's name (its
    biLM, in float32) or an `ElmoModel`."""
    if isinstance(model_dir, ElmoModel):
        model = model_dir
    else:
        try:
            model = load_model(model_dir, ElmoModel, hub=False, dtype=torch.float32)
        except ValueError as error:
            raise ElmoConversionError(str(error)) from error
    state_dict = {
        key: value.float() if value.is_floating_point() else value for key, value in model.state_dict().items()
    }
    try:
        arrays = state_dict_to_original(state_dict, model.config)
    except ValueError as error:
        raise ElmoConversionError(str(error)) from error
    # Built in memory, then written as any file: HDF5 writing to a disk that fills up fails in hundreds of lines of
    # errors and then crashes the process, where a write of bytes fails in one line (`atomic_directory`).
    h5py, weights = _h5py(), io.BytesIO()
    with atomic_directory(output_dir, overwrite) as staging:
        with h5py.File(weights, "w") as handle:
            for name, array in arrays.items():
                handle.create_dataset(name, data=array)
        with open(staging / "options.json", "w", encoding="utf-8") as handle:
            json.dump(model.config.to_original_options(), handle, indent=2)
        (staging / "weights.hdf5").write_bytes(weights.getbuffer())
    return Path(output_dir)


__all__ = ["convert_original", "export_original", "load_original", "resolve_file"]
