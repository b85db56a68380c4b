"""What a model name on a command line can stand for, decided from the name and the disk alone.

A name is a local folder, else a bundled model's name, else a Hub id (`hf_elmo.loading.resolve_model_name`, which
loads it). The rules that need neither the network nor a model are here, so that the command line
(`hf_elmo.command_line`, which answers before any model loads) and `hf_elmo.loading` apply the same ones. This module
imports nothing from the package.
"""

from pathlib import Path

# The bundled models' folders (`hf_elmo.bundled`), found from this file.
BUNDLED_DIR = Path(__file__).resolve().parent / "bundled"


def is_path_only(name: str) -> bool:
    """Whether a model name can only be a local path: a Hub id is `name` or `owner/name`, a bundled name is plain."""
    return name.startswith((".", "/", "~")) or name.count("/") > 1


def local_model_folder(name: str) -> Path | None:
    """The folder on this machine that the model `name` stands for: the path itself where it exists, else the bundled
    model of that name where there is one; None for a Hub id or a name that is neither."""
    path = Path(name).expanduser()
    if path.exists():
        return path
    if is_path_only(name) or "/" in name or not (BUNDLED_DIR / name / "config.json").is_file():
        return None
    return BUNDLED_DIR / name


def original_checkpoint(model: str) -> str | None:
    """The one-line error for a local folder holding an original checkpoint (`options.json` and a weights `.hdf5`, no
    `config.json`), naming the `hf-elmo convert` that makes a model folder of it; None otherwise."""
    folder = Path(model).expanduser()
    if not folder.is_dir() or (folder / "config.json").exists() or not (folder / "options.json").is_file():
        return None
    weights = sorted(folder.glob("*.hdf5"))
    if not weights:
        return None
    return (
        f"{model} holds an original (bilm-tf) checkpoint, not an hf_elmo model folder: convert it with hf-elmo "
        f"convert --options-file {folder / 'options.json'} --weight-file {weights[0]} --output-dir {folder}-hf"
    )
