"""`hf-elmo quickstart` (hf_elmo/quickstart.py): the homonyms' tables, verdicts and sense counts on the bundled biLM,
offline; the picture; the comparison on another biLM and the user's own sentences."""

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest
import torch
from utils import hiding_packages, require, tiny_config

from hf_elmo import ElmoModel, ElmoTokenizer, bundled_model_path, quickstart
from hf_elmo.errors import FileContentError
from hf_elmo.folders import LinkRefused

require("kiwipiepy", reason="the quickstart reads Korean morphemes (the korean extra)")

ROOT = Path(__file__).resolve().parents[1]
# Reviews written for this test (not from NSMC), each clear in its sentiment: the quickstart's own.
REVIEWS = {
    "정말 재미있고 감동적인 영화였어요": "positive",
    "배우들 연기가 최고다 또 보고 싶다": "positive",
    "시간 낭비, 돈 아깝다": "negative",
    "지루하고 스토리도 엉망이다": "negative",
}
# `hf-elmo ARGV` by the console script's function (`hf_elmo.cli.main`), in a process of its own.
COMMAND = "import sys; from hf_elmo.cli import main; sys.exit(main())"


def run_command(argv: list[str], cwd: Path, script: str = COMMAND) -> subprocess.CompletedProcess:
    """`hf-elmo ARGV` offline from `cwd`, this checkout first on the path (or the Python `script` given)."""
    environment = {
        **os.environ,
        "HF_HUB_OFFLINE": "1",
        "TRANSFORMERS_OFFLINE": "1",
        "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]),
    }
    return subprocess.run(
        [sys.executable, "-c", script, *argv], capture_output=True, text=True, env=environment, timeout=300, cwd=cwd
    )


def printed_blocks(lines: list[str]) -> dict[str, dict]:
    """The quickstart's output read back, by homonym: its sentences' senses, `{layer: (n, n)}` cosine tables, the
    best layer it names, its verdict line and its counts line."""
    blocks, unit = {}, None
    for index, line in enumerate(lines):
        if line.startswith("the unit ") and line.endswith(" in:"):
            unit = line.split()[2]
            sentences = []
            for entry in lines[index + 1 :]:
                if not entry.startswith("  ["):
                    break
                sentences.append(entry.split("  (")[1].split(":")[0])
            blocks[unit] = {"senses": sentences, "tables": {}, "counts": None}
        elif line.startswith("cosine similarity, layer "):
            size = len(blocks[unit]["senses"])
            rows = lines[index + 2 : index + 2 + size]
            table = np.array([[float(value) for value in row.split()[1:]] for row in rows])
            blocks[unit]["tables"][int(line.split()[3])] = table
        elif line.startswith("The layer that separates the senses best here is layer "):
            blocks[unit]["best"] = int(line.split()[-1].rstrip("."))
            blocks[unit]["verdict"] = lines[index + 1]
        elif line.startswith("In the biLM's training text"):
            blocks[unit]["counts"] = line
    return blocks


def nearest_and_margin(table: np.ndarray, senses: list[str]) -> tuple[float, float]:
    """From a printed table: how many sentences' nearest other sentence has their sense (ties shared), and the least
    similar pair of one sense minus the most similar pair across senses."""
    n = len(senses)
    nearest = 0.0
    for i in range(n):
        others = [j for j in range(n) if j != i]
        best = max(table[i, j] for j in others)
        tied = [j for j in others if table[i, j] >= best - 1e-6]
        nearest += sum(senses[j] == senses[i] for j in tied) / len(tied)
    pairs = [(i, j) for i in range(n) for j in range(i + 1, n)]
    same = min(table[pair] for pair in pairs if senses[pair[0]] == senses[pair[1]])
    across = max(table[pair] for pair in pairs if senses[pair[0]] != senses[pair[1]])
    return nearest, same - across


def test_quickstart_runs_offline_on_the_bundled_models(tmp_path):
    result = run_command(["quickstart"], tmp_path)
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    # The picture, in the working directory, and nothing else.
    assert "wrote these tables as a picture, a row of heatmaps per homonym: quickstart-bae.png" in lines
    assert [path.name for path in tmp_path.iterdir()] == ["quickstart-bae.png"]
    assert (tmp_path / "quickstart-bae.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    blocks = printed_blocks(lines)
    # 배 and 눈, the seeds' homonyms, and 바람, the one the homonym test finds ko-nsmc best at.
    assert list(blocks) == ["배", "눈", "바람"]
    counts = quickstart.read_sense_counts(bundled_model_path("ko-nsmc"))
    told_apart = []
    for unit, block in blocks.items():
        (homonym,) = [homonym for homonym in quickstart.HOMONYMS if homonym.unit == unit]
        assert block["senses"] == [sense for _, sense in homonym.sentences]
        # Layer 0 reads the unit alone: one vector in all six sentences.
        assert set(block["tables"][0].flatten().tolist()) == {1.0}
        # The verdict is that of the printed tables: the best layer has the most nearest neighbours of the same
        # sense (ties to the wider margin), "cleanly apart" exactly where its margin is above 0.
        scored = {layer: nearest_and_margin(table, block["senses"]) for layer, table in block["tables"].items()}
        best = max((layer for layer in scored if layer), key=lambda layer: scored[layer])
        assert block["best"] == best, unit
        nearest, margin = scored[best]
        assert block["verdict"].startswith("There it tells these senses apart" if margin > 0 else "Even there")
        assert (
            f"{nearest:g} of 6 sentences have as their nearest another sentence of their own sense"
            in (block["verdict"])
        )
        told_apart += [unit] if margin > 0 else []
        # The counts are the folder's, for every sense the sentences show.
        for sense in dict.fromkeys(block["senses"]):
            assert f"{sense} {counts[unit].get(sense, 0):,}" in block["counts"], (unit, sense)
    assert any(
        line.startswith(f"Cleanly apart at their best layer: {', '.join(told_apart) or 'none'} of 3") for line in lines
    )
    for review, label in REVIEWS.items():
        assert any(line.split()[:1] == [label] and line.endswith(review) for line in lines), review


def test_the_sense_counts_are_those_sense_counts_py_wrote_for_the_training_text():
    """`sense_counts.json` holds, per training file, every sense the cue file names for each homonym shown."""
    counts = json.loads((Path(bundled_model_path("ko-nsmc")) / quickstart.SENSE_COUNTS_FILE).read_text("utf-8"))
    assert sorted(counts) == ["outputs/nsmc/data/general_train.txt", "outputs/nsmc/data/pretrain_train.txt"]
    cues = (ROOT / "examples" / "nsmc" / "sense_cues.tsv").read_text(encoding="utf-8").splitlines()[1:]
    for by_unit in counts.values():
        for line in cues:
            unit, sense, _ = line.split("\t")
            assert isinstance(by_unit[unit][sense], int) and by_unit[unit][sense] >= 0
    totals = quickstart.read_sense_counts(bundled_model_path("ko-nsmc"))
    assert totals["배"]["pear"] == sum(by_unit["배"]["pear"] for by_unit in counts.values())


@pytest.mark.parametrize(
    "saved, field",
    [
        ([1, 2], "the file is a list of 2 items, not an object"),
        ({"train.txt": [1]}, '"train.txt" is a list of 1 item, not an object'),
        ({"train.txt": {"배": 3}}, '"train.txt"."배" is the number 3, not an object'),
        ({"train.txt": {"배": {"boat": -1}}}, '"train.txt"."배".boat is the number -1, not an integer of at least 0'),
        ({"train.txt": {"배": {"boat": 2.5}}}, '"train.txt"."배".boat is the number 2.5, not an integer'),
    ],
)
def test_sense_counts_of_another_shape_are_one_line_naming_the_field(tmp_path, saved, field):
    """The quickstart reads `sense_counts.json` from any biLM folder (`--model`): a damaged one is a line, not a
    traceback."""
    (tmp_path / quickstart.SENSE_COUNTS_FILE).write_text(json.dumps(saved), encoding="utf-8")
    with pytest.raises(FileContentError) as error:
        quickstart.read_sense_counts(tmp_path)
    assert str(error.value) == (
        f"{tmp_path / quickstart.SENSE_COUNTS_FILE}: {field}; copy the model folder again, or count anew with "
        "examples/nsmc/sense_counts.py"
    )
    assert quickstart.read_sense_counts(tmp_path / "elsewhere") == {}


def test_quickstart_without_kiwipiepy_names_the_extra_at_once(tmp_path):
    """Found, not imported: the line comes before the quickstart's module (and its models) is imported."""
    hide_kiwipiepy = hiding_packages("kiwipiepy") + textwrap.dedent("""
        from hf_elmo.cli import main

        code = main(["quickstart"])
        print(code, "hf_elmo.quickstart" in sys.modules, file=sys.stderr)
    """)
    result = run_command([], tmp_path, script=hide_kiwipiepy)
    assert result.stderr.splitlines() == [
        "hf-elmo: error: the quickstart needs the korean extra (kiwipiepy, Korean morphemes): pip install "
        '"kiwipiepy>=0.21"',
        "1 False",
    ]
    assert not list(tmp_path.iterdir())


def test_quickstart_is_a_command_and_examples_quickstart_runs_it_under_its_name(tmp_path):
    listed = run_command(["--help"], tmp_path)
    assert listed.returncode == 0, listed.stderr
    assert any(line.split()[:1] == ["quickstart"] for line in listed.stdout.splitlines()), listed.stdout
    result = subprocess.run(
        [sys.executable, str(ROOT / "examples" / "quickstart.py"), "--help"],
        capture_output=True,
        text=True,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
        timeout=60,
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.startswith("usage: quickstart.py [-h]")


def test_picture_has_a_row_per_homonym_a_heatmap_per_layer_and_boxes_the_verdicts_pairs(
    ko_nsmc_bilm, ko_nsmc_tokenizer, monkeypatch
):
    require("matplotlib", reason="the picture needs the plot extra")
    tables = []
    for homonym in quickstart.HOMONYMS:
        similarities = quickstart.similarity_tables(ko_nsmc_bilm, ko_nsmc_tokenizer, homonym)
        tables.append((homonym, similarities, quickstart.verdict(similarities, homonym)))
    for font in (None, "A Hangul font"):
        figure = quickstart.similarity_figure(tables, "ko-nsmc", font)
        assert len(figure.subfigs) == len(quickstart.HOMONYMS)
        for row, (homonym, similarities, found) in zip(figure.subfigs, tables):
            heatmaps = [axes for axes in row.axes if axes.images]
            assert len(heatmaps) == ko_nsmc_bilm.config.n_layers + 1
            labels = [f"[{index}] {sense}" for index, (_, sense) in enumerate(homonym.sentences)]
            for number, axes in enumerate(heatmaps):
                np.testing.assert_array_equal(axes.images[0].get_array(), similarities[number].numpy())
                assert [label.get_text() for label in axes.get_xticklabels()] == labels
                assert axes.get_title().startswith(f"layer {number} ")
                # The two pairs the verdict names, boxed (both cells of each) at its layer alone.
                boxed = {(round(p.get_x() + 0.5), round(p.get_y() + 0.5)) for p in axes.patches}
                pairs = {found.same, found.across} if number == found.layer else set()
                assert boxed == {cell for i, j in pairs for cell in ((j, i), (i, j))}
            assert f"\n{found.title}\n" in row.get_suptitle()
            legend = row.get_supxlabel()
            for index, (text, sense) in enumerate(homonym.sentences):
                shown = text if font else quickstart.romanise(text)
                assert f"[{index}] {sense}: {shown}" in legend
        # No Hangul in a picture drawn without a Hangul font: its characters would be boxes.
        texts = [row.get_suptitle() for row in figure.subfigs] + [row.get_supxlabel() for row in figure.subfigs]
        has_hangul = any("\uac00" <= character <= "\ud7a3" for text in texts for character in text)
        assert has_hangul == bool(font)


def test_the_picture_is_written_whole_and_never_through_a_link(ko_nsmc_bilm, ko_nsmc_tokenizer, tmp_path):
    """A link where the picture's staging file goes (to a user's file) is refused in one line and left as it is,
    and so is the file; without it, the PNG appears whole and nothing else stays."""
    require("matplotlib", reason="the picture needs the plot extra")
    homonym = quickstart.HOMONYMS[0]
    similarities = quickstart.similarity_tables(ko_nsmc_bilm, ko_nsmc_tokenizer, homonym)
    tables = [(homonym, similarities, quickstart.verdict(similarities, homonym))]
    mine, link, picture = tmp_path / "mine.txt", tmp_path / ".bae.png.incomplete", tmp_path / "bae.png"
    mine.write_text("kept", encoding="utf-8")
    link.symlink_to(mine)
    with pytest.raises(LinkRefused, match=r"\.bae\.png\.incomplete is a link .* nothing was written through it"):
        quickstart.write_plot(tables, "ko-nsmc", picture)
    assert mine.read_text(encoding="utf-8") == "kept" and link.is_symlink() and not picture.exists()
    link.unlink()
    assert quickstart.write_plot(tables, "ko-nsmc", picture)
    assert picture.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert sorted(path.name for path in tmp_path.iterdir()) == ["bae.png", "mine.txt"]


def test_romanise_writes_each_syllable_in_latin_letters():
    assert quickstart.romanise("배가") == "baega"
    assert quickstart.romanise("바람이 분다") == "barami bunda"
    assert quickstart.romanise("눈") == "nun"
    assert quickstart.romanise("꽃 ABC") == "kkot ABC"


def test_quickstart_without_matplotlib_prints_the_tables_and_how_to_get_the_picture(tmp_path, monkeypatch, capsys):
    monkeypatch.setitem(sys.modules, "matplotlib.figure", None)  # `from matplotlib.figure import ...` fails
    quickstart.run(tmp_path / "picture.png")
    lines = capsys.readouterr().out.splitlines()
    assert [sorted(block["tables"]) for block in printed_blocks(lines).values()] == [list(range(3))] * 3
    assert (
        f"for these tables as a picture ({tmp_path / 'picture.png'}), install matplotlib: pip install "
        in "\n".join(lines)
    )
    assert not list(tmp_path.iterdir())


def test_the_comparison_runs_on_any_biLM_and_a_file_of_sentences(tmp_path, capsys):
    """`run(model=FOLDER, homonyms=[read_homonym(FILE, WORD)])`: the same tables and verdict for a word of the user's,
    on a biLM of the user's, without the bundled classifier."""
    folder = tmp_path / "bilm"
    torch.manual_seed(0)
    ElmoModel(tiny_config()).save_pretrained(folder)
    ElmoTokenizer(max_characters_per_token=20).save_pretrained(folder)
    sentences = tmp_path / "bank.tsv"
    sentences.write_text(
        "# sense<TAB>sentence\nmoney\tshe paid the cheque into the bank today\nmoney\tthe bank raised its rates\n"
        "river\twe sat on the bank of the river\nriver\tthe river burst its bank\n",
        encoding="utf-8",
    )
    homonym = quickstart.read_homonym(sentences, "bank")
    assert homonym.senses == "money or river" and len(homonym.sentences) == 4
    quickstart.run(None, model=folder, homonyms=[homonym])
    lines = capsys.readouterr().out.splitlines()
    blocks = printed_blocks(lines)
    assert list(blocks) == ["bank"] and blocks["bank"]["senses"] == ["money", "money", "river", "river"]
    assert blocks["bank"]["counts"] is None  # the folder holds no sense counts
    assert not any(line.startswith("ko-nsmc-sentiment") for line in lines)


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("money the bank\n", "line 1: write the sense, a tab, then the sentence"),
        ("money\tthe bank\nmoney\ta bank\n", "give two senses or more, each in two sentences or more"),
        (
            "money\tthe bank\nmoney\ta bank\nriver\tthe bank\n",
            "give two senses or more, each in two sentences or more",
        ),
    ],
)
def test_a_sentence_file_that_cannot_be_compared_is_refused_in_one_line(tmp_path, text, message):
    path = tmp_path / "sentences.tsv"
    path.write_text(text, encoding="utf-8")
    with pytest.raises(ValueError, match=f"^{path}.*{message}$"):
        quickstart.read_homonym(path, "bank")


def test_a_sentence_without_the_unit_is_named(ko_nsmc_bilm, ko_nsmc_tokenizer):
    homonym = quickstart.Homonym("배", "bae", "belly or boat", (("배가 고프다", "belly"), ("그는 선장이다", "boat")))
    with pytest.raises(
        ValueError, match="^the tokenizer does not split '그는 선장이다' into a unit '배': 그 / 는 / 선장"
    ):
        quickstart.homonym_vectors(ko_nsmc_bilm, ko_nsmc_tokenizer, homonym)
