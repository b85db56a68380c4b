"""Model cards: the `README.md` (YAML front matter, then Markdown) written into every model folder hf_elmo makes.

A template is the card's text with `{name}` fields (literal braces doubled, as for `str.format`). The package's
templates ship as `hf_elmo.model_cards` (the repository's `model_cards/` folder): `converted_elmo.md`
(`hf-elmo convert`), `elmoformanylangs_elmo.md` (`hf-elmo convert --format elmoformanylangs`), `pretrained_elmo.md`
(`hf-elmo pretrain`) and `fine_tuned_elmo.md` (the fine-tuning examples); `examples/nsmc/bundle.py` writes the
bundled models' cards, kept in `examples/nsmc/cards/`, with the same `write_model_card`.
"""

import os
from importlib import resources
from pathlib import Path


def packaged_template(name: str) -> str:
    """The text of the template `name` (e.g. `"converted_elmo.md"`) shipped in `hf_elmo.model_cards`."""
    return resources.files("hf_elmo.model_cards").joinpath(name).read_text(encoding="utf-8")


def write_model_card(folder: str | os.PathLike, template: str, **fields) -> Path:
    """Writes `folder/README.md`: `template` with its `{name}` fields filled from `fields`. Returns the file's path."""
    path = Path(folder) / "README.md"
    path.write_text(template.format(**fields), encoding="utf-8")
    return path
