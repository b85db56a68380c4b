"""Model folders shipped inside the package, so that hf_elmo works on a machine without network, and what a model
name given to a command or script stands for (`resolve_model_name`).

- `ko-nsmc`: a Korean ELMo biLM pre-trained on the reviews of the Naver Sentiment Movie Corpus (its training movies).
- `ko-nsmc-sentiment`: a sentiment classifier (negative / positive) on that biLM, trained on the labelled reviews.

Each folder holds a model card (`README.md`) with its data, commands, cost and measured figures, the config, weights
and tokenizer files (and, for the biLM, the files that make it a sentence-transformers model), and no code: it loads
with `from_pretrained`, the Auto classes and `pipeline` through the classes `import hf_elmo` registers. A copy saved
from it with `save_pretrained` carries the code files and `auto_map`, and loads with `trust_remote_code=True` where
hf_elmo is not installed.
"""

import json
import os
import socket
import urllib.parse
from pathlib import Path

from hf_elmo_launcher import is_path_only

from ..errors import first_line

BUNDLED_MODELS = ("ko-nsmc", "ko-nsmc-sentiment")


def bundled_model_path(name: str) -> str:
    """The folder of the bundled model `name` (one of `BUNDLED_MODELS`), for `from_pretrained`."""
    if name not in BUNDLED_MODELS:
        raise ValueError(f"no bundled model named {name!r}; the bundled models are: {', '.join(BUNDLED_MODELS)}")
    return str(Path(__file__).resolve().parent / name)


def resolve_model_name(name: str, hub: bool = True) -> str:
    """
    What `from_pretrained` loads for the model `name` that a command or script was given: a local folder, else the
    folder of the bundled model of that name, else (with `hub`) `name` as a Hub id. Anything else is a `ValueError`,
    one line naming the fix: a path that does not exist, a file, a folder that is not an hf_elmo model
    (`check_model_folder`), without `hub` any other name, and a Hub id that is not in the Hub cache while the Hub is
    out of reach (`HF_HUB_OFFLINE=1`, or `hub_unreachable`): at once, instead of after huggingface_hub's retries.
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
        cached = isinstance(try_to_load_from_cache(name, "config.json"), str)
    except ValueError:  # not a valid Hub id either
        cached = False
    if not cached:
        raise ValueError(f"{unknown}; as a Hub id it is not in the Hub cache, and {reason}")
    return name


def check_model_folder(folder: Path, name: str) -> None:
    """
    A one-line `ValueError` for a folder that is not a loadable hf_elmo model: no readable `config.json` of
    model_type "elmo", or a weights file cut short or corrupt (whose error from safetensors would come as a
    traceback out of `from_pretrained`; its header is read here, not its tensors).
    """
    from safetensors import SafetensorError, safe_open

    try:
        model_type = json.loads((folder / "config.json").read_text(encoding="utf-8")).get("model_type")
    except FileNotFoundError as error:
        raise ValueError(f"{name} is not an hf_elmo model folder (no config.json)") from error
    except (OSError, ValueError, AttributeError) as error:
        raise ValueError(f"{name} is not an hf_elmo model folder (config.json: {first_line(error)})") from error
    if model_type != "elmo":
        raise ValueError(f"{name} is not an hf_elmo model folder (model_type {model_type!r})")
    for weights in sorted(folder.glob("*.safetensors")):
        try:
            with safe_open(str(weights), framework="numpy"):
                pass
        except (SafetensorError, OSError) as error:
            raise ValueError(
                f"{Path(name) / weights.name} is cut short or corrupt ({first_line(error)}); copy or download the "
                f"model folder again"
            ) from error


def hub_unreachable() -> bool:
    """
    Tries once, for a few seconds at most, to open a connection to the Hub. Without one, switches huggingface_hub
    to offline mode and returns True: a cached model still loads, anything else fails at once instead of after
    minutes of retries. Behind a proxy, or with `HF_HUB_OFFLINE=1`, nothing is tried.
    """
    from huggingface_hub import constants

    if constants.is_offline_mode() or any(os.environ.get(key) for key in ("HTTPS_PROXY", "https_proxy", "ALL_PROXY")):
        return False
    endpoint = urllib.parse.urlsplit(constants.ENDPOINT)
    try:
        socket.create_connection((endpoint.hostname, endpoint.port or 443), timeout=5).close()
        return False
    except OSError:
        constants.HF_HUB_OFFLINE = True
        return True
