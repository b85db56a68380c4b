"""`hf-elmo push`: a model folder or a bundled model, made complete for the Hub and uploaded to a repository.

A folder uploaded as it is loads by id only where the repository holds the code files and `auto_map` that
`trust_remote_code=True` reads: the bundled folders (`hf_elmo.bundled`) hold neither, so uploaded as they are they
fail where hf_elmo is not installed ("does not recognize this architecture"). [`publish_folder`] loads the model and
its tokenizer with the package's loader (`hf_elmo.loading`), saves both into a staging folder, which writes the code
files and `auto_map`, adds every other file the folder holds (its card, `word_counts.json`, its sentence-transformers
settings), and uploads the whole with huggingface_hub.
"""

import shutil
import tempfile
from pathlib import Path

from huggingface_hub import constants
from huggingface_hub.utils import HFValidationError, validate_repo_id

from .configuration_elmo import ElmoConfig
from .errors import CommandError, first_line
from .folder_layout import SENTENCE_TRANSFORMERS_FILES
from .folders import push_to_hub
from .loading import hub_unreachable, load_model_and_tokenizer, resolve_model_name
from .modeling_elmo import AUTO_CLASSES, ElmoModel, ElmoPreTrainedModel

MODEL_CARD_FILE = "README.md"
# The weights a folder may hold, which the staging folder holds as the loaded model saves them.
WEIGHTS_FILES = ("*.safetensors", "*.safetensors.index.json", "pytorch_model*.bin", "pytorch_model.bin.index.json")


def publish_folder(model_name_or_folder: str, repo_id: str, private: bool = False) -> str:
    """
    Uploads the model `model_name_or_folder` (a folder, or a bundled model's name) to the Hub repository `repo_id`
    (made, `private` if asked, where it does not exist), complete: loaded by id with `trust_remote_code=True`, it
    gives the folder's outputs without hf_elmo. Returns the commit's URL. Uploaded: what `save_pretrained` writes
    for the model (as the class its config names, in the weights' dtype) and its tokenizer, with the code files and
    `auto_map`; and every other file at the top of the folder, as it is (`stage_folder`).

    A name that is neither, a folder that does not load or holds no model card, an invalid repository id, and a
    failed upload are each a one-line `CommandError`, raised before anything is sent where it can be.
    """
    try:
        validate_repo_id(repo_id)
    except HFValidationError as error:
        raise CommandError(f"{repo_id} is not a Hub repository id: {first_line(error)}") from error
    try:
        folder = Path(resolve_model_name(model_name_or_folder, hub=False))
    except ValueError as error:
        raise CommandError(first_line(error)) from error
    if not (folder / MODEL_CARD_FILE).is_file():
        raise CommandError(
            f"{model_name_or_folder} has no model card ({MODEL_CARD_FILE}): write one (what the model is, its data, "
            "how to load it) before publishing it"
        )
    failure = f"the upload of {model_name_or_folder} to {repo_id} failed"
    check_hub_reachable(failure)
    with tempfile.TemporaryDirectory(prefix="hf-elmo-push-") as staging:
        stage_folder(folder, Path(staging))
        try:
            return push_to_hub(staging, repo_id, private=private)
        except Exception as error:  # noqa: BLE001  whatever failed (network, auth, HTTP client), in one line
            raise CommandError(
                f"{failure}: {upload_error_line(error)}; check the repository id and your token"
            ) from error


def upload_error_line(error: Exception) -> str:
    """`error` in one line: its first, and the Hub's reason where huggingface_hub puts it on a later line (`Bad
    request:`, then the reason)."""
    line, reason = first_line(error), getattr(error, "server_message", None)
    return f"{line} {reason.strip().splitlines()[0]}" if reason and reason not in line else line


def check_hub_reachable(failure: str) -> None:
    """A `CommandError` beginning with `failure` where the Hub is out of reach (offline mode, or no connection),
    before anything is written or sent."""
    if constants.is_offline_mode():
        raise CommandError(f"{failure}: HF_HUB_OFFLINE=1 is set; unset it to upload")
    if hub_unreachable():
        raise CommandError(f"{failure}: the Hub cannot be reached")


def stage_folder(folder: Path, staging: Path) -> None:
    """
    Writes into `staging` the complete folder of the model in `folder`: the model and its tokenizer loaded and saved
    (config and tokenizer settings with `auto_map`, weights, code files); then every other file at the top of
    `folder`, copied as it is, and over what `save_pretrained` wrote of the sentence-transformers settings (which
    hold a folder's own layer weights and reference statistics, where `save_pretrained` writes the defaults). The
    folder's weights files are not copied: the saved model's stand for them.
    """
    try:
        model, tokenizer = load_model_and_tokenizer(folder, saved_model_class(folder), hub=False, dtype="auto")
    except ValueError as error:
        raise CommandError(first_line(error)) from error
    model.save_pretrained(staging)
    tokenizer.save_pretrained(staging)
    for file in sorted(folder.iterdir()):
        staged = staging / file.name
        is_weights = any(file.match(pattern) for pattern in WEIGHTS_FILES)
        if file.is_file() and not is_weights and (not staged.exists() or file.name in SENTENCE_TRANSFORMERS_FILES):
            shutil.copyfile(file, staged)


def saved_model_class(folder: Path) -> type[ElmoPreTrainedModel]:
    """The ELMo class `folder`'s `config.architectures` names (`ElmoModel` where it names none): a pre-training
    folder is published with its softmax, which loading it as its biLM would drop."""
    architectures = ElmoConfig.from_pretrained(folder).architectures or []
    return next((model for model in AUTO_CLASSES.values() if model.__name__ in architectures), ElmoModel)
