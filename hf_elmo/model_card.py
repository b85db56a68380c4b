"""Model cards: the `README.md` (YAML front matter, then Markdown) written into every model folder hf_elmo makes.

A template is the card's text with `{name}` fields (literal braces doubled, as for `str.format`). The package's
templates ship as `hf_elmo.model_cards` (the repository's `model_cards/` folder): `converted_elmo.md`
(`hf-elmo convert`), `elmoformanylangs_elmo.md` (`hf-elmo convert --format elmoformanylangs`), `pretrained_elmo.md`
(`hf-elmo pretrain`) and `fine_tuned_elmo.md` (the fine-tuning examples); `examples/nsmc/bundle.py` writes the
bundled models' cards, kept in `examples/nsmc/cards/`, with the same `write_model_card`.

A card links nothing that may not exist: it names hf_elmo without a link (the package has no public repository
address), and its `base_model` is only ever a Hub id ([`is_hub_id`]).
"""

import os
from importlib import resources
from pathlib import Path

from .bundled import BUNDLED_MODELS


def packaged_template(name: str) -> str:
    """The text of the template `name` (e.g. `"converted_elmo.md"`) shipped in `hf_elmo.model_cards`."""
    return resources.files("hf_elmo.model_cards").joinpath(name).read_text(encoding="utf-8")


def is_hub_id(name: str) -> bool:
    """
    Whether the model name a run was given stands for a Hub repository, the only thing a card's `base_model` may
    name: not a local path, not a bundled model's name (`ko-nsmc`), and a valid repository id (`name` or
    `owner/name`), as `hf_elmo.loading.resolve_model_name` reads it.
    """
    from huggingface_hub.utils import HFValidationError, validate_repo_id

    if Path(name).expanduser().exists() or name in BUNDLED_MODELS:
        return False
    try:
        validate_repo_id(name)
    except HFValidationError:
        return False
    return True


def write_model_card(folder: str | os.PathLike, template: str, **fields) -> Path:
    """Writes `folder/README.md`: `template` with its `{name}` fields filled from `fields`. Returns the file's path."""
    path = Path(folder) / "README.md"
    path.write_text(template.format(**fields), encoding="utf-8")
    return path
