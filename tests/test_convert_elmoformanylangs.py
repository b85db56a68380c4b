"""ELMoForManyLangs models converted exactly: tiny random models are built in their format with their own code
(`elmoformanylangs`, installed for the tests), run through their `Embedder`, converted, and compared layer by layer.

The inputs exercise what differs from bilm-tf; each would break the parity if done the obvious way: the swapped
begin/end-of-word ids, the cut at code points (Korean syllables are 3 bytes), the word lookup by the cut word and by
exact case, unknown characters, the trained padding character, the carry-side highway gate, no forget bias, the
projection of an already `projection_dim`-wide representation, and the `.dic` reader's whitespace quirk.
"""

import codecs
import json
import logging
import os
import subprocess
import sys
import zipfile
from pathlib import Path

import h5py
import numpy as np
import pytest
import torch
from elmoformanylangs import Embedder
from elmoformanylangs.frontend import Model
from elmoformanylangs.modules.embedding_layer import EmbeddingLayer
from transformers import AutoModel, AutoTokenizer
from utils import FLOAT32_TOLERANCE

from hf_elmo import ElmoModel, ElmoTokenizer
from hf_elmo.cli import main as cli_main
from hf_elmo.conversion_elmoformanylangs import convert_elmoformanylangs, read_dic
from hf_elmo.conversion_original import export_original
from hf_elmo.errors import ElmoConversionError
from hf_elmo.modeling_elmo import word_positions
from hf_elmo.tokenization_elmo import WORD_INPUT_VOCAB_FILE

logging.getLogger("elmoformanylangs").setLevel(logging.WARNING)
ROOT = Path(__file__).resolve().parents[1]

# Their training code lists the characters first, then the six markers; a whitespace symbol (U+00A0) is read back by
# their reader as U+3000.
CHARACTERS = list("abcTh한국어를.!") + ["\xa0"]
CHAR_MARKERS = ["<bos>", "<eos>", "<oov>", "<pad>", "<bow>", "<eow>"]
WORDS = ["<oov>", "<bos>", "<eos>", "<pad>", "the", "The", "한국어", "abcdef", "!", "a\u3000b"]
MAX_CHARACTERS = 8  # rows hold 6 characters: "abcdefgh" is cut to the known word "abcdef"

SENTENCES = [
    ["The", "the", "한국어", "abcdefgh", "!"],  # exact case; a word known only once cut
    ["한국어를", "배웁니다", "."],  # Korean with unknown characters
    ["x"],  # one word, an unknown character
    ["a\u3000b", "a\xa0b", "c,", "?!"],  # U+3000 is a character of their vocabulary, U+00A0 is not
    ["아주아주아주긴단어입니다", "ab", "Th"],  # a Korean word past the cut
    ["<bos>", "abc"],  # their batching turns the word <bos> into a boundary row
]


def release_settings(word_dim: int, filters: list) -> dict:
    return {
        "encoder": {"name": "elmo", "projection_dim": 6, "cell_clip": 3, "proj_clip": 3, "dim": 10, "n_layers": 2},
        "token_embedder": {
            "name": "cnn",
            "activation": "relu",
            "filters": filters,
            "n_highway": 2,
            "word_dim": word_dim,
            "char_dim": 4,
            "max_characters_per_token": MAX_CHARACTERS,
        },
        "classifier": {"name": "sampled_softmax", "n_samples": 10},
        "dropout": 0.1,
    }


def write_dic(path: Path, symbols: list[str]) -> None:
    """As their training code writes a vocabulary: `symbol<TAB>id` lines through `codecs`."""
    with codecs.open(path, "w", encoding="utf-8") as handle:
        for index, symbol in enumerate(symbols):
            print(f"{symbol}\t{index}", file=handle)


def build_release(folder: Path, word_dim: int, filters: list, seed: int, settings: dict | None = None) -> Path:
    """
    A release folder made by their code: `config.json` naming a settings file by an absolute path of another
    machine (found by its base name), the vocabularies, and random weights saved in torch's legacy format. With
    `settings`, no settings file ships and `config_path` names the standard one, as in the real downloads, and the
    weights keep their code's initialisation (realistic magnitudes at the released shapes).
    """
    folder.mkdir(parents=True)
    settings_name = "cnn_50_100_512_4096_sample.json" if settings else "tiny_settings.json"
    if settings is None:
        settings = release_settings(word_dim, filters)
        (folder / settings_name).write_text(json.dumps(settings), encoding="utf-8")
    word_dim = settings["token_embedder"]["word_dim"]
    (folder / "config.json").write_text(
        json.dumps({"config_path": f"/home/someone/elmo/configs/{settings_name}", "model": "output/tiny"}),
        encoding="utf-8",
    )
    write_dic(folder / "char.dic", CHARACTERS + CHAR_MARKERS)
    write_dic(folder / "word.dic", WORDS)
    char_lexicon = {("\u3000" if c == "\xa0" else c): i for i, c in enumerate(CHARACTERS + CHAR_MARKERS)}
    torch.manual_seed(seed)
    word_layer = EmbeddingLayer(word_dim, {w: i for i, w in enumerate(WORDS)}, fix_emb=False) if word_dim else None
    char_dim = settings["token_embedder"]["char_dim"]
    model = Model(settings, word_layer, EmbeddingLayer(char_dim, char_lexicon, fix_emb=False))
    if settings_name == "tiny_settings.json":
        with torch.no_grad():
            for parameter in model.parameters():  # every weight random, the padding character's row and biases too
                parameter.normal_(0.0, 0.6)
    torch.save(model.token_embedder.state_dict(), folder / "token_embedder.pkl", _use_new_zipfile_serialization=False)
    torch.save(model.encoder.state_dict(), folder / "encoder.pkl", _use_new_zipfile_serialization=False)
    return folder


# With a word input; without one, with filters as wide as the projection (their model still projects).
KINDS = {"words": (3, [[1, 4], [2, 4], [3, 8]]), "no_words": (0, [[1, 2], [2, 2], [3, 2]])}


@pytest.fixture(scope="module", params=sorted(KINDS))
def release(request, tmp_path_factory):
    """`(release folder, converted folder)` of each kind."""
    root = tmp_path_factory.mktemp(request.param)
    word_dim, filters = KINDS[request.param]
    folder = build_release(root / "release", word_dim, filters, seed=len(request.param))
    convert_elmoformanylangs(folder, root / "converted")
    return folder, root / "converted"


def their_layers(folder: Path, sentences, embedder=None) -> list[np.ndarray]:
    """Their `sents2elmo(output_layer=-2)`: `(3, words, 2 * projection_dim)` per sentence, on a fresh `Embedder`."""
    return (embedder or Embedder(str(folder))).sents2elmo(sentences, output_layer=-2)


def our_layers(model, tokenizer, sentences, initial_state=None):
    """Ours, boundaries stripped, plus the final state."""
    batch = tokenizer(sentences, is_split_into_words=True, padding=True, return_tensors="pt")
    with torch.no_grad():
        output = model(**batch, output_hidden_states=True, initial_state=initial_state, return_final_state=True)
    stacked = torch.stack(output.hidden_states, dim=1).numpy()
    return [stacked[row, :, 1 : len(words) + 1] for row, words in enumerate(sentences)], output.final_state


def assert_same_layers(ours, theirs) -> float:
    """Checks every layer of every sentence within the float32 tolerance; returns the largest difference."""
    worst = 0.0
    for mine, reference in zip(ours, theirs, strict=True):
        assert mine.shape == reference.shape
        worst = max(worst, float(np.abs(mine - reference).max()))
    assert worst < FLOAT32_TOLERANCE
    return worst


@pytest.mark.parametrize("implementation", ["auto", "reference"])
def test_all_layers_equal_their_embedder(release, implementation):
    folder, converted = release
    model = ElmoModel.from_pretrained(converted, recurrence_implementation=implementation).eval()
    ours, _ = our_layers(model, ElmoTokenizer.from_pretrained(converted), SENTENCES)
    worst = assert_same_layers(ours, their_layers(folder, SENTENCES))
    print(
        f"\nparity with ELMoForManyLangs ({converted.parent.name}, {implementation}), all layers: "
        f"max |diff| = {worst:.2e}"
    )


@pytest.mark.slow
def test_all_layers_equal_their_embedder_at_the_released_shapes(tmp_path):
    """The shapes of every release (their `cnn_50_100_512_4096_sample.json`, built into the converter, as the
    downloads lack it), with their own initialisation for realistic magnitudes."""
    from hf_elmo.conversion_elmoformanylangs import STANDARD_SETTINGS

    folder = build_release(tmp_path / "release", 0, [], seed=0, settings=STANDARD_SETTINGS)
    convert_elmoformanylangs(folder, tmp_path / "converted")
    model, tokenizer = (
        ElmoModel.from_pretrained(tmp_path / "converted").eval(),
        ElmoTokenizer.from_pretrained(tmp_path / "converted"),
    )
    ours, _ = our_layers(model, tokenizer, SENTENCES)
    worst = assert_same_layers(ours, their_layers(folder, SENTENCES))
    print(f"\nparity with ELMoForManyLangs at the released shapes, all layers: max |diff| = {worst:.2e}")


def test_plain_average_is_the_mean_of_the_hidden_states(release):
    folder, converted = release
    model, tokenizer = ElmoModel.from_pretrained(converted).eval(), ElmoTokenizer.from_pretrained(converted)
    ours, _ = our_layers(model, tokenizer, SENTENCES)
    theirs = Embedder(str(folder)).sents2elmo(SENTENCES, output_layer=-1)
    assert_same_layers([layers.mean(axis=0) for layers in ours], theirs)


def test_carried_state_reproduces_their_second_call(release):
    """Their encoder keeps each batch row's final state for the same row of the next call (rows sorted by length,
    longest first); carrying `final_state` into `initial_state` over the same rows gives their second call."""
    folder, converted = release
    model, tokenizer = ElmoModel.from_pretrained(converted).eval(), ElmoTokenizer.from_pretrained(converted)
    first, second = SENTENCES, [["the", "!"], ["한국어"], ["a", "b", "c", "d", "e"], ["Th"], ["abc", "."], ["!"]]
    embedder = Embedder(str(folder))
    their_layers(folder, first, embedder)
    theirs = their_layers(folder, second, embedder)
    by_length = lambda sentences: sorted(range(len(sentences)), key=lambda i: -len(sentences[i]))  # noqa: E731
    _, state = our_layers(model, tokenizer, [first[i] for i in by_length(first)])
    order = by_length(second)
    ours, _ = our_layers(model, tokenizer, [second[i] for i in order], initial_state=state)
    assert_same_layers(ours, [theirs[i] for i in order])
    fresh, _ = our_layers(model, tokenizer, [second[i] for i in order])
    assert max(np.abs(a - b).max() for a, b in zip(fresh, ours)) > 1e-3  # the carried state matters


def test_their_dic_reader_is_reproduced(release):
    folder, _ = release
    embedder = Embedder(str(folder))
    assert read_dic(folder / "char.dic") == embedder.char_lexicon
    assert read_dic(folder / "char.dic")["\u3000"] == CHARACTERS.index("\xa0")
    if embedder.word_lexicon is not None:
        assert read_dic(folder / "word.dic") == embedder.word_lexicon


def test_rows_start_with_the_id_named_eow(release):
    _, converted = release
    tokenizer = ElmoTokenizer.from_pretrained(converted)
    lexicon = read_dic(converted.parent / "release" / "char.dic")
    row = tokenizer(["ab"], is_split_into_words=True)["input_ids"][1]
    assert [i - 1 for i in row] == [lexicon["<eow>"], lexicon["a"], lexicon["b"], lexicon["<bow>"]] + [
        lexicon["<pad>"]
    ] * (MAX_CHARACTERS - 4)


def test_word_ids_are_the_exact_case_of_the_cut_word(release):
    _, converted = release
    tokenizer = ElmoTokenizer.from_pretrained(converted)
    if tokenizer.word_input_vocab is None:
        assert "word_input_ids" not in tokenizer([["the"]], is_split_into_words=True)
        return
    ids = tokenizer(["The", "the", "THE", "abcdefgh", "abcdefg"], is_split_into_words=True)["word_input_ids"]
    expected = ["<bos>", "The", "the", "<oov>", "abcdef", "abcdef", "<eos>"]
    assert ids == [WORDS.index(word) for word in expected]


def test_boundaries_are_found_with_a_learned_alphabet(release):
    _, converted = release
    model, tokenizer = ElmoModel.from_pretrained(converted), ElmoTokenizer.from_pretrained(converted)
    batch = tokenizer([["the", "x"], ["a"]], is_split_into_words=True, padding=True, return_tensors="pt")
    words = word_positions(batch["input_ids"], batch["attention_mask"].bool(), model.config)
    assert words.tolist() == [[False, True, True, False], [False, True, False, False]]


def test_release_zip_converts_like_the_folder(release, tmp_path):
    folder, converted = release
    archive = tmp_path / "161.zip"
    with zipfile.ZipFile(archive, "w") as handle:
        for file in folder.iterdir():
            handle.write(file, f"ko.model/{file.name}")
    convert_elmoformanylangs(archive, tmp_path / "from_zip")
    ours = ElmoModel.from_pretrained(tmp_path / "from_zip").state_dict()
    reference = ElmoModel.from_pretrained(converted).state_dict()
    assert ours.keys() == reference.keys() and all(torch.equal(ours[k], reference[k]) for k in ours)


def test_the_card_names_the_release_and_states_the_sizes(release):
    folder, converted = release
    model = ElmoModel.from_pretrained(converted)
    config = model.config
    card = (converted / "README.md").read_text(encoding="utf-8")
    assert card.startswith("---\nlibrary_name: hf_elmo\n") and "- elmoformanylangs\n" in card
    assert f"# ELMo from ELMoForManyLangs ({folder.name})" in card and "(model settings: " in card
    assert (
        f"{model.num_parameters():,}\nparameters: a {config.char_vocab_size}-character vocabulary, "
        f"{config.word_input_vocab_size or 0} input words,\n{config.n_layers} x {config.cell_dim} LSTMs" in card
    )


def test_auto_classes_and_remote_code_load_the_folder(release, tmp_path):
    folder, converted = release
    theirs = their_layers(folder, SENTENCES)
    model, tokenizer = AutoModel.from_pretrained(converted).eval(), AutoTokenizer.from_pretrained(converted)
    assert_same_layers(our_layers(model, tokenizer, SENTENCES)[0], theirs)
    script = (
        "import sys, json, torch, transformers\n"
        "class Block:\n"
        "    def find_spec(self, name, path=None, target=None):\n"
        "        if name.split('.')[0] == 'hf_elmo': raise ImportError(name)\n"
        "sys.meta_path.insert(0, Block())\n"
        "folder, sentences, out = sys.argv[1], json.loads(sys.argv[2]), sys.argv[3]\n"
        "model = transformers.AutoModel.from_pretrained(folder, trust_remote_code=True).eval()\n"
        "tokenizer = transformers.AutoTokenizer.from_pretrained(folder, trust_remote_code=True)\n"
        "batch = tokenizer(sentences, is_split_into_words=True, padding=True, return_tensors='pt')\n"
        "with torch.no_grad():\n"
        "    torch.save(torch.stack(model(**batch, output_hidden_states=True).hidden_states, 1), out)\n"
    )
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "HF_MODULES_CACHE": str(tmp_path / "modules")}
    env.pop("PYTHONPATH", None)
    arguments = [str(converted), json.dumps(SENTENCES), str(tmp_path / "o.pt")]
    result = subprocess.run(
        [sys.executable, "-c", script, *arguments], env=env, capture_output=True, text=True, timeout=300, cwd=tmp_path
    )
    assert result.returncode == 0, result.stderr[-3000:]
    stacked = torch.load(tmp_path / "o.pt").numpy()
    assert_same_layers([stacked[row, :, 1 : len(words) + 1] for row, words in enumerate(SENTENCES)], theirs)


def test_hf_elmo_embed_on_a_converted_folder(release, tmp_path):
    folder, converted = release
    lines = [" ".join(words) for words in SENTENCES if all(" " not in w and "\u3000" not in w for w in words)]
    (tmp_path / "in.txt").write_text("\n".join(lines) + "\n", encoding="utf-8")
    for extra in ([], ["--max-words", "2"]):  # batched, and long lines in windows with the state carried
        output = tmp_path / f"out{len(extra)}.h5"
        env = {**os.environ, "PYTHONPATH": str(ROOT), "HF_HUB_OFFLINE": "1"}
        result = subprocess.run(
            [
                sys.executable,
                "-m",
                "hf_elmo.cli",
                "embed",
                str(converted),
                str(tmp_path / "in.txt"),
                str(output),
                "--all",
                *extra,
            ],
            capture_output=True,
            text=True,
            env=env,
            timeout=300,
        )
        assert result.returncode == 0, result.stderr
        with h5py.File(output, "r") as handle:
            ours = [handle[str(i)][()] for i in range(len(lines))]
        assert_same_layers(ours, their_layers(folder, [line.split() for line in lines]))


def test_export_to_bilm_tf_is_refused(release, tmp_path):
    _, converted = release
    with pytest.raises(ElmoConversionError, match="bilm-tf's format cannot hold this model"):
        export_original(converted, tmp_path / "exported")
    assert not (tmp_path / "exported").exists()


def test_cli_converts_with_format_elmoformanylangs(release, tmp_path, capsys):
    folder, converted = release
    assert (
        cli_main(
            [
                "convert",
                "--format",
                "elmoformanylangs",
                "--model-dir",
                str(folder),
                "--output-dir",
                str(tmp_path / "out"),
            ]
        )
        == 0
    )
    assert (tmp_path / "out" / "model.safetensors").read_bytes() == (converted / "model.safetensors").read_bytes()


def test_release_without_word_dic_converts_when_it_reads_no_words(tmp_path):
    """Their `Embedder` reads `word.dic` only for a word input (`word_dim` > 0): a release without one may lack it."""
    word_dim, filters = KINDS["no_words"]
    folder = build_release(tmp_path / "release", word_dim, filters, seed=5)
    (folder / "word.dic").unlink()
    converted = convert_elmoformanylangs(folder, tmp_path / "converted")
    assert not (converted / WORD_INPUT_VOCAB_FILE).exists()
    model, tokenizer = ElmoModel.from_pretrained(converted).eval(), ElmoTokenizer.from_pretrained(converted)
    assert model.config.word_input_vocab_size is None
    assert_same_layers(our_layers(model, tokenizer, SENTENCES)[0], their_layers(folder, SENTENCES))


# -- bad input: one line each, no folder left behind ------------------------------------------------------------------


def broken(tmp_path: Path, change) -> Path:
    folder = build_release(tmp_path / "release", 3, KINDS["words"][1], seed=0)
    change(folder)
    return folder


def add_char(folder: Path):
    with open(folder / "char.dic", "a", encoding="utf-8") as handle:
        handle.write(f"z\t{len(CHARACTERS + CHAR_MARKERS)}\n")


def char_lstm(folder: Path):
    settings = json.loads((folder / "tiny_settings.json").read_text())
    settings["token_embedder"]["name"] = "lstm"
    (folder / "tiny_settings.json").write_text(json.dumps(settings))


@pytest.mark.parametrize(
    "change, message",
    [
        (lambda folder: (folder / "encoder.pkl").unlink(), "lacks encoder.pkl"),
        (lambda folder: (folder / "word.dic").unlink(), r"reads words \(word_dim 3\) but the folder lacks word.dic"),
        (add_char, r"char.dic reads as 19 entries but token_embedder.pkl's char_emb_layer has 18 rows"),
        (char_lstm, "only the character CNN"),
        (lambda folder: (folder / "encoder.pkl").write_bytes(b"not a pickle"), "not a loadable PyTorch state dict"),
    ],
)
def test_bad_releases_fail_with_one_line_and_no_folder(tmp_path, capsys, change, message):
    folder = broken(tmp_path, change)
    with pytest.raises(ElmoConversionError, match=message):
        convert_elmoformanylangs(folder, tmp_path / "out")
    assert not (tmp_path / "out").exists()
    assert (
        cli_main(
            [
                "convert",
                "--format",
                "elmoformanylangs",
                "--model-dir",
                str(folder),
                "--output-dir",
                str(tmp_path / "out"),
            ]
        )
        == 1
    )
    error = capsys.readouterr().err
    assert error.count("\n") == 1 and error.startswith("hf-elmo: error:")
    assert not (tmp_path / "out").exists()


def test_settings_fall_back_to_the_built_in_standard(tmp_path):
    """A release without its settings file reads the standard `cnn_50_100_512_4096_sample.json` values: a tiny
    model does not match them, and the error says which settings were used."""
    folder = build_release(tmp_path / "release", 3, KINDS["words"][1], seed=0)
    (folder / "tiny_settings.json").unlink()
    with pytest.raises(ElmoConversionError, match="the built-in cnn_50_100_512_4096_sample.json settings"):
        convert_elmoformanylangs(folder, tmp_path / "out")
    assert not (tmp_path / "out").exists()


def test_heads_and_collators_read_the_word_inputs(release):
    from transformers import DataCollatorForTokenClassification

    from hf_elmo import ElmoForSequenceClassification, ElmoForTokenClassification

    _, converted = release
    tokenizer = ElmoTokenizer.from_pretrained(converted)
    base = ElmoModel.from_pretrained(converted).eval()
    features = [
        dict(tokenizer(words, is_split_into_words=True), labels=[0] * (len(words) + 2)) for words in SENTENCES[:3]
    ]
    batch = DataCollatorForTokenClassification(tokenizer)(features)
    assert set(tokenizer.model_input_names) <= set(batch)
    inputs = {key: batch[key] for key in tokenizer.model_input_names}
    with torch.no_grad():
        reference = base(**inputs, output_hidden_states=True).hidden_states
        for head_class in (ElmoForSequenceClassification, ElmoForTokenClassification):
            head = head_class.from_pretrained(converted, num_labels=2).eval()
            labels = batch["labels"] if head_class is ElmoForTokenClassification else torch.tensor([0, 1, 0])
            output = head(**inputs, labels=labels, output_hidden_states=True)
            assert torch.isfinite(output.loss)
            assert all(torch.equal(a, b) for a, b in zip(output.hidden_states, reference))
    if tokenizer.word_input_vocab is not None:
        with pytest.raises(ValueError, match="also reads word_input_ids"):
            base(batch["input_ids"], batch["attention_mask"])
    else:
        with pytest.raises(ValueError, match="reads no word embedding"):
            base(batch["input_ids"], word_input_ids=batch["attention_mask"])
