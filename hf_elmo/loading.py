"""What a model name given to a command or script stands for, and the one way a command or script loads it.

A name is a local folder, else a bundled model's name (`hf_elmo.bundled`), else a Hub id: [`resolve_model_name`] says
what `from_pretrained` loads for it. [`load_model`] and [`load_model_and_tokenizer`] resolve the name once and load
it; whatever fails, from the name to the weights and the tokenizer files its config needs, is a `ValueError` of one
line naming the model and, where there is one, the fix. The commands (`hf_elmo.cli`, `hf_elmo.pretraining`, the
exports), and the examples, load through here.

Nothing here changes another library's settings: where the Hub cannot be reached, a Hub id in the Hub cache resolves
to its folder there, which `from_pretrained` reads as any local folder.
"""

import contextlib
import errno
import os
import socket
import urllib.parse
from collections.abc import Iterator
from pathlib import Path

import torch

from .bundled import BUNDLED_MODELS, bundled_model_path
from .configuration_elmo import ElmoConfig
from .errors import JsonFields, first_line
from .model_names import is_path_only, original_checkpoint
from .modeling_elmo import AUTO_CLASSES, ElmoHeadModel, ElmoModel, ElmoPreTrainedModel
from .tokenization_elmo import TOKENIZER_CONFIG_FILE, ElmoTokenizer, check_tokenizer

# Weights that transformers would load by unpickling them (`pytorch_model.bin` and its shards): never loaded here.
PICKLED_WEIGHTS = "*.bin"


def resolve_model_name(name: str, hub: bool = True) -> str:
    """
    What `from_pretrained` loads for the model `name` that a command or script was given: a local folder, else the
    folder of the bundled model of that name, else (with `hub`) `name` as a Hub id; while the Hub is out of reach
    (`HF_HUB_OFFLINE=1`, or `hub_unreachable`), the Hub id's folder in the Hub cache. Anything else is a
    `ValueError`, one line naming the fix: a path that does not exist, a file, a folder that is not an hf_elmo model
    (`check_model_folder`), without `hub` any other name, and a Hub id that is not in the Hub cache while the Hub is
    out of reach: at once, instead of after huggingface_hub's retries.
    """
    path = Path(name).expanduser()
    if path.is_dir():
        check_model_folder(path, name)
        return str(path)
    if path.exists():
        raise ValueError(f"{name} is a file; a model is a folder, a bundled model or a Hub id")
    if name in BUNDLED_MODELS:
        return bundled_model_path(name)
    if is_path_only(name):
        raise ValueError(f"no such model folder: {name}")
    unknown = f"no such model folder or bundled model ({', '.join(BUNDLED_MODELS)}): {name}"
    if not hub:
        raise ValueError(unknown)
    from huggingface_hub import constants, try_to_load_from_cache

    if constants.is_offline_mode():
        reason = "HF_HUB_OFFLINE=1 is set (unset it to download it)"
    elif hub_unreachable():
        reason = "the Hub cannot be reached (with HF_HUB_OFFLINE=1 it is not tried)"
    else:
        return name
    try:
        cached_config = try_to_load_from_cache(name, "config.json")
    except ValueError:  # not a valid Hub id either
        cached_config = None
    if not isinstance(cached_config, str):
        raise ValueError(f"{unknown}; as a Hub id it is not in the Hub cache, and {reason}")
    # The snapshot folder: given the id instead, `from_pretrained` would try the Hub, for minutes of retries where it
    # cannot be reached.
    return str(Path(cached_config).parent)


def check_model_folder(folder: Path, name: str) -> None:
    """
    A one-line `ValueError` for a folder that is not a loadable hf_elmo model: no readable `config.json` of
    model_type "elmo" (an original checkpoint named with the `hf-elmo convert` that makes a model folder of it);
    weights in a pickle alone (`pytorch_model.bin`), which hf_elmo never unpickles; or a weights file that cannot
    be read, or is cut short or corrupt (whose error from safetensors would come as a traceback out of
    `from_pretrained`; its header is read here, not its tensors).
    """
    config_file = folder / "config.json"
    if not config_file.exists():
        raise ValueError(original_checkpoint(str(folder)) or f"{name} is not an hf_elmo model folder (no config.json)")
    fix = "copy or download the model folder again"
    model_type = JsonFields.of_file(config_file, fix).data.get("model_type")
    if model_type != "elmo":
        raise ValueError(f"{name} is not an hf_elmo model folder (model_type {model_type!r})")
    pickled = sorted(path.name for path in folder.glob(PICKLED_WEIGHTS))
    if pickled and not any(folder.glob("*.safetensors")):
        raise ValueError(
            f"{name} has no safetensors weights, only {pickled[0]}, a pickle, which hf_elmo will not unpickle (a "
            "pickle can run any code): get the model's model.safetensors"
        )
    if damaged := first_damaged_weights(folder):
        weights, error = damaged
        problem = weights_problem(error, "copy or download the model folder again")
        raise ValueError(f"{Path(name) / weights.name} {problem}") from error


def first_damaged_weights(folder: Path) -> tuple[Path, Exception] | None:
    """
    The first `.safetensors` file of `folder` that cannot be read (an `OSError`: no read permission, a folder) or
    whose header cannot be read (cut short, damaged: a `SafetensorError`), with the error; None where every one
    reads. Its header alone is read, not its tensors. `weights_problem` words the error.
    """
    from safetensors import SafetensorError, safe_open

    for weights in sorted(folder.glob("*.safetensors")):
        try:
            if not weights.is_file():  # a folder, a named pipe (which opening would wait on), a broken link
                raise OSError(errno.EINVAL, "not a regular file", str(weights))
            # Opened here first: safetensors names any failure to open as a damaged file, with another errno's text.
            os.close(os.open(weights, os.O_RDONLY))
            with safe_open(str(weights), framework="numpy"):
                pass
        except (SafetensorError, OSError) as error:
            return weights, error
    return None


def weights_problem(error: Exception, fix: str) -> str:
    """What is wrong with a weights file, for `first_damaged_weights`' error, to follow its name: it cannot be read
    (as the system says why; without read permission, what gives it back), or it is cut short or corrupt, then
    `fix`."""
    if isinstance(error, PermissionError):
        return f"cannot be read ({error.strerror}): let this user read it (chmod a+r), it is not known to be damaged"
    if isinstance(error, OSError):
        return f"cannot be read ({error.strerror or first_line(error)}); {fix}"
    return f"is cut short or corrupt ({first_line(error)}); {fix}"


def hub_unreachable() -> bool:
    """
    Whether a connection to the Hub fails, tried once for a few seconds at most. Behind a proxy, or with
    `HF_HUB_OFFLINE=1`, nothing is tried (False).
    """
    from huggingface_hub import constants

    if constants.is_offline_mode() or any(os.environ.get(key) for key in ("HTTPS_PROXY", "https_proxy", "ALL_PROXY")):
        return False
    endpoint = urllib.parse.urlsplit(constants.ENDPOINT)
    try:
        socket.create_connection((endpoint.hostname, endpoint.port or 443), timeout=5).close()
        return False
    except OSError:
        return True


def load_model(
    name: str | os.PathLike,
    model_class: type[ElmoPreTrainedModel] | None = None,
    *,
    hub: bool = True,
    device: str | torch.device | None = None,
    **from_pretrained_kwargs,
) -> ElmoPreTrainedModel:
    """
    The model `name` names (`resolve_model_name(name, hub)`) as `model_class`, by default the head its
    `config.architectures` names (`registered_heads`), else `ElmoModel`; loaded by `from_pretrained` with
    `from_pretrained_kwargs` (e.g. `dtype`, config fields), in eval mode, and moved to `device` if given. A model
    that cannot be found or loaded is a one-line `ValueError`.
    """
    path = resolve_model_name(str(name), hub)
    with one_line_errors(name):
        return _from_pretrained(path, model_class, device, from_pretrained_kwargs)


def load_model_and_tokenizer(
    name: str | os.PathLike,
    model_class: type[ElmoPreTrainedModel] | None = None,
    *,
    hub: bool = True,
    device: str | torch.device | None = None,
    **from_pretrained_kwargs,
) -> tuple[ElmoPreTrainedModel, ElmoTokenizer]:
    """
    `load_model(...)` and the model's `ElmoTokenizer`, from the same folder or Hub id (the name is resolved once).
    A folder without any tokenizer file gets the default tokenizer of the model's token width; one that lacks a file
    its config needs, or whose tokenizer disagrees with the config, is refused. The
    tokenizer gives `word_vector_ids` exactly when the model is a head with word vectors (`config.word_vector_dim`,
    set in the folder or by `from_pretrained_kwargs`), whatever the folder's tokenizer was saved with.
    """
    path, _ = _resolved_with_tokenizer_files_checked(name, hub)
    with one_line_errors(name):
        model = _from_pretrained(path, model_class, device, from_pretrained_kwargs)
        # A head's word vectors read the ids; the biLM of a head folder would refuse them.
        needs_word_vector_ids = isinstance(model, ElmoHeadModel) and model.config.word_vector_vocab_size is not None
        tokenizer = _tokenizer_of(path, model.config, needs_word_vector_ids)
    check_tokenizer(tokenizer, model.config, name)
    return model, tokenizer


def load_tokenizer(name: str | os.PathLike, *, hub: bool = True) -> ElmoTokenizer:
    """
    The tokenizer `load_model_and_tokenizer(name)` gives, without `word_vector_ids`, read from the config and the
    tokenizer files alone: for what a script checks on its data (units, windows) before the weights load. The same
    one-line `ValueError`s as `load_model_and_tokenizer`.
    """
    path, config = _resolved_with_tokenizer_files_checked(name, hub)
    with one_line_errors(name):
        if config is None:  # a Hub id's
            config = ElmoConfig.from_pretrained(path)
        tokenizer = _tokenizer_of(path, config, word_vector_ids=False)
    check_tokenizer(tokenizer, config, name)
    return tokenizer


def _resolved_with_tokenizer_files_checked(name: str | os.PathLike, hub: bool) -> tuple[str, ElmoConfig | None]:
    """
    `name` resolved (`resolve_model_name`) and, for a local folder, its config, with the tokenizer files that config
    needs checked before the weights or the tokenizer load (the config alone says which); for a Hub id, None.
    """
    path = resolve_model_name(str(name), hub)
    if not Path(path).is_dir():
        return path, None
    with one_line_errors(name):
        config = ElmoConfig.from_pretrained(path)
    check_tokenizer(None, config, name, files=os.listdir(path))
    return path, config


def _tokenizer_of(path: str, config: ElmoConfig, word_vector_ids: bool) -> ElmoTokenizer:
    """The tokenizer of the model at `path` (a checked folder or a Hub id) whose config is `config`."""
    folder = Path(path)
    if folder.is_dir() and not (folder / TOKENIZER_CONFIG_FILE).is_file():
        return ElmoTokenizer(config.max_characters_per_token, word_vector_ids=word_vector_ids)
    tokenizer = ElmoTokenizer.from_pretrained(path, word_vector_ids=word_vector_ids)
    if tokenizer.max_characters_per_token != config.max_characters_per_token and not folder.is_dir():
        # A Hub repository whose tokenizer files do not say the width: the model's.
        tokenizer = ElmoTokenizer(config.max_characters_per_token, pre_tokenizer=tokenizer.pre_tokenizer)
    return tokenizer


def read_weights_with_prefix(name: str | os.PathLike, prefix: str, *, hub: bool = True) -> dict[str, torch.Tensor]:
    """
    The weights of the model `name` (`resolve_model_name(name, hub)`) whose names start with `prefix`, read from its
    safetensors files without building a model: `read_weights_with_prefix(folder, "softmax.")` is the pre-training
    softmax of a folder `hf-elmo pretrain` saved (see `modeling_elmo.word_vectors_from_softmax`), empty for a
    biLM-only folder. A file that cannot be read, or is cut short or damaged (`first_damaged_weights`), is a
    one-line `ValueError`.
    """
    from safetensors import safe_open

    path = resolve_model_name(str(name), hub)
    with one_line_errors(name):
        if not Path(path).is_dir():  # a Hub id: its weights files alone, which from_pretrained caches as well
            from huggingface_hub import snapshot_download

            path = snapshot_download(path, allow_patterns=["*.safetensors"])
            if damaged := first_damaged_weights(Path(path)):  # a local folder's were checked as it was resolved
                weights, error = damaged
                raise ValueError(f"{weights.name} {weights_problem(error, 'download it again')}") from error
        weights = {}
        for file in sorted(Path(path).glob("*.safetensors")):
            with safe_open(str(file), framework="pt") as handle:
                weights.update({key: handle.get_tensor(key) for key in handle.keys() if key.startswith(prefix)})
    return weights


def registered_heads() -> dict[str, type[ElmoHeadModel]]:
    """
    The classes a folder's `config.architectures` may name that `load_model` loads as named, where no class is given:
    the task heads registered in `AUTO_CLASSES`, read at each call so that a head registered after this module was
    imported is found. Any other ELMo folder (`ElmoModel`, `ElmoForPreTraining`) loads as its biLM, `ElmoModel`: a
    pre-training softmax serves pre-training alone, which asks for `ElmoForPreTraining` by name.
    """
    return {model.__name__: model for model in AUTO_CLASSES.values() if issubclass(model, ElmoHeadModel)}


def _from_pretrained(
    path: str, model_class: type[ElmoPreTrainedModel] | None, device, from_pretrained_kwargs: dict
) -> ElmoPreTrainedModel:
    """`load_model` once the name is resolved to `path`."""
    if model_class is None:
        architectures = ElmoConfig.from_pretrained(path).architectures or []
        heads = registered_heads()
        model_class = next((heads[name] for name in architectures if name in heads), ElmoModel)
    model = model_class.from_pretrained(path, **from_pretrained_kwargs)  # in eval mode, as transformers loads it
    return model if device is None else model.to(device)


@contextlib.contextmanager
def one_line_errors(name: str | os.PathLike) -> Iterator[None]:
    """What `from_pretrained` raises for a model that does not load (many types, often many lines), as one line:
    a `ValueError` naming the model."""
    try:
        yield
    except (OSError, ValueError, TypeError, RuntimeError) as error:
        raise ValueError(f"cannot load {name} as an hf_elmo model: {first_line(error)}") from error
