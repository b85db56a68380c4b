"""The one model-card writer and the templates shipped in `hf_elmo.model_cards`."""

from pathlib import Path

import pytest

from hf_elmo.model_card import is_hub_id, packaged_template, write_model_card

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


def test_no_template_links_an_address():
    """The package has no public repository address: a card names hf_elmo and its files without a link that may not
    exist."""
    for name in TEMPLATES:
        assert "http" not in packaged_template(name), name


def test_only_a_hub_id_is_a_hub_id(tmp_path, monkeypatch):
    assert is_hub_id("someone/elmo") and is_hub_id("elmo-original")
    assert not is_hub_id("ko-nsmc") and not is_hub_id("ko-nsmc-sentiment")  # bundled with the package
    assert not is_hub_id(str(tmp_path)) and not is_hub_id("outputs/nsmc/elmo-ko-v7") and not is_hub_id("./elmo")
    assert not is_hub_id("an elmo")
    (tmp_path / "someone" / "elmo").mkdir(parents=True)
    monkeypatch.chdir(tmp_path)
    assert not is_hub_id("someone/elmo")  # a local folder first, as resolve_model_name reads it
