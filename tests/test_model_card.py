"""The one model-card writer and the templates shipped in `hf_elmo.model_cards`."""

from pathlib import Path

import pytest

from hf_elmo.model_card import packaged_template, write_model_card

TEMPLATES = ["converted_elmo.md", "elmoformanylangs_elmo.md", "fine_tuned_elmo.md", "pretrained_elmo.md"]


def test_every_template_in_model_cards_is_shipped_and_opens_with_front_matter():
    folder = Path(__file__).resolve().parents[1] / "model_cards"
    assert sorted(path.name for path in folder.glob("*.md")) == TEMPLATES
    for name in TEMPLATES:
        assert packaged_template(name).startswith("---\n"), name


def test_the_card_is_written_as_readme_with_its_fields_filled(tmp_path):
    path = write_model_card(tmp_path, "---\nlibrary_name: hf_elmo\n---\n\n# {title}\n\n{{literal}}\n", title="ELMo")
    assert path == tmp_path / "README.md"
    assert path.read_text(encoding="utf-8") == "---\nlibrary_name: hf_elmo\n---\n\n# ELMo\n\n{literal}\n"
    with pytest.raises(KeyError, match="title"):
        write_model_card(tmp_path / "other", "# {title}\n")
