"""Writing model folders: every folder the package writes appears complete or not at all, readable as `mkdir` and
`open` would leave it, and uploads to the Hub as it is.

The converters (`conversion_original.py`, `conversion_elmoformanylangs.py`), the ONNX export and pre-training write
their outputs through [`atomic_directory`].
"""

import contextlib
import os
import shutil
import tempfile
from pathlib import Path

from .errors import ElmoConversionError


def apply_umask(folder: Path):
    """
    Gives `folder` and everything in it the permissions `mkdir` and `open` would: `mkdtemp` makes folders 700 and
    transformers writes `model.safetensors` as 600, which would keep other users of a shared machine out.
    """
    umask = os.umask(0)
    os.umask(umask)
    for path in [folder, *folder.rglob("*")]:
        os.chmod(path, (0o777 if path.is_dir() else 0o666) & ~umask)


@contextlib.contextmanager
def atomic_directory(output_dir: str | os.PathLike, overwrite: bool = False):
    """
    Yields a temporary folder beside `output_dir` that becomes `output_dir` only if the block succeeds; on any
    error it is removed and `output_dir` is left as it was.
    """
    output_dir = Path(output_dir)
    if output_dir.exists() and not output_dir.is_dir():
        raise ElmoConversionError(f"{output_dir} exists and is not a folder")
    if output_dir.is_dir() and any(output_dir.iterdir()) and not overwrite:
        raise ElmoConversionError(
            f"{output_dir} exists and is not empty (pass --overwrite, or overwrite=True, to replace it)"
        )
    output_dir.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=f".{output_dir.name}.", dir=output_dir.parent))
    try:
        yield staging
        apply_umask(staging)
        if output_dir.exists():
            shutil.rmtree(output_dir)
        staging.rename(output_dir)
    finally:
        shutil.rmtree(staging, ignore_errors=True)


def push_to_hub(folder, repo_id: str, private: bool = False) -> str:
    """Creates `repo_id` (if needed) and uploads `folder` with the standard Hub API; returns the commit URL."""
    from huggingface_hub import HfApi

    api = HfApi()
    api.create_repo(repo_id, private=private, exist_ok=True)
    return str(
        api.upload_folder(
            folder_path=str(folder), repo_id=repo_id, commit_message="Upload ELMo converted with hf_elmo"
        )
    )
