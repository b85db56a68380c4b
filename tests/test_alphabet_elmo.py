"""The one ground floor of character ids: the byte alphabet (bilm-tf) and learned ones (ELMoForManyLangs, pretrain)."""

import json
import re

import pytest
from transformers import PretrainedConfig

from hf_elmo import ElmoConfig, ElmoTokenizer
from hf_elmo.alphabet_elmo import BYTE_MARKERS, MARKER_ROLES, CharacterAlphabet, learn_character_vocabulary
from hf_elmo.errors import FileContentError

KOREAN = "한국어를배웁니다"  # 8 syllables, 24 UTF-8 bytes


def learned(symbols: str = "ab한국") -> CharacterAlphabet:
    ids = {char: i for i, char in enumerate(symbols)}
    for name in ("<bos>", "<eos>", "<oov>", "<pad>", "<bow>", "<eow>"):
        ids[name] = len(ids)
    return CharacterAlphabet.from_symbols(ids)


def test_byte_alphabet_is_bilm_tf():
    alphabet = CharacterAlphabet()
    assert (alphabet.learned, alphabet.size, alphabet.table_rows) == (False, 261, 262)
    assert alphabet.sentence_marker_row_ids() == (257, 258)
    assert alphabet.word_row("é", 6) == [259, 0xC3 + 1, 0xA9 + 1, 260, 261, 261]
    assert alphabet.boundary_words == ("<S>", "</S>")
    assert ElmoConfig().alphabet == alphabet
    with pytest.raises(ValueError, match="byte alphabet is fixed"):
        CharacterAlphabet(size=300)


def test_learned_alphabet_cuts_characters_not_bytes():
    alphabet = learned()
    row = alphabet.word_row("한국" * 4, 8)  # 6 characters fit; bytes would hold 2 syllables
    markers = alphabet.markers
    assert [i - 1 for i in row] == [markers["begin_of_word"], 2, 3, 2, 3, 2, 3, markers["end_of_word"]]
    assert alphabet.word_row("a?", 5) == [
        markers["begin_of_word"] + 1,
        1,
        markers["unknown"] + 1,
        markers["end_of_word"] + 1,
        markers["padding"] + 1,
    ]
    assert alphabet.table_rows == alphabet.size + 1 == 11
    assert alphabet.word_row("<eos>", 5) == alphabet.boundary_row(True, 5)
    assert alphabet.word_row("<eos>", 8, boundary_words=False)[1:6] == [markers["unknown"] + 1] * 5


def test_markers_are_taken_by_role():
    ids = {"a": 0, "<bos>": 1, "<eos>": 2, "<oov>": 3, "<pad>": 4, "<bow>": 5, "<eow>": 6}
    swapped = CharacterAlphabet.from_symbols(
        ids, dict(zip(MARKER_ROLES, ("<bos>", "<eos>", "<eow>", "<bow>", "<pad>", "<oov>")))
    )
    assert swapped.word_row("a", 4) == [7, 1, 6, 5]


@pytest.mark.parametrize(
    "symbols, message",
    [
        ({"a": 0}, "lacks the marker symbols"),
        ({"a": 9, "<bos>": 1, "<eos>": 2, "<oov>": 3, "<pad>": 4, "<bow>": 5, "<eow>": 6}, "ids must be 0..6"),
    ],
)
def test_bad_vocabularies_are_refused(symbols, message):
    with pytest.raises(ValueError, match=message):
        CharacterAlphabet.from_symbols(symbols)


def test_save_load_and_config_round_trip(tmp_path):
    alphabet = learned()
    alphabet.save(tmp_path / "char_vocab.json")
    assert CharacterAlphabet.from_file(tmp_path / "char_vocab.json") == alphabet
    config = ElmoConfig(**alphabet.config_fields())
    assert config.alphabet.table_rows == alphabet.table_rows
    assert config.alphabet.sentence_marker_row_ids() == alphabet.sentence_marker_row_ids()
    with pytest.raises(ValueError, match="go together"):
        ElmoConfig(char_vocab_size=4)
    with pytest.raises(ValueError, match="outside the character vocabulary"):
        ElmoConfig(char_vocab_size=3, char_markers=alphabet.markers)


def test_learned_vocabulary_from_a_corpus(tmp_path):
    """What `pretrain --char-vocab learned` builds: characters by frequency, then the six markers."""
    alphabet = learn_character_vocabulary(["나는 한국어를 배웁니다", "한국어 한국"], max_size=4)
    assert list(alphabet.symbols)[:4] == ["한", "국", "어", "나"]
    assert list(alphabet.symbols)[4:] == ["<bos>", "<eos>", "<bow>", "<eow>", "<pad>", "<oov>"]
    assert learn_character_vocabulary([["ab", "b"]], min_count=2).symbols["b"] == 0
    alphabet.save(tmp_path / "char_vocab.json")
    tokenizer = ElmoTokenizer(max_characters_per_token=10, char_vocab_file=str(tmp_path / "char_vocab.json"))
    row = tokenizer([KOREAN], is_split_into_words=True)["input_ids"][1]
    assert tokenizer.decode(row) == "한국어" + "\ufffd" * 5  # all 8 syllables fit in 10; 5 are unknown


@pytest.mark.parametrize(
    "content, message",
    [
        ('{"markers": "abc", "symbols": "abc"}', 'symbols is the string "abc", not an object'),
        ('{"symbols": {"a": 0}, "markers": {"begin_of_sentence": "0"}}', "markers.begin_of_sentence is the string"),
        ('{"symbols": {"a": 0}, "markers": {}}', "markers.begin_of_sentence is missing"),
        ('{"symbols": {"a": -1}}', "markers is missing"),
        ('{"symbols": 7, "markers": {}}', "symbols is the number 7, not an object"),
        ("[1, 2]", "the file is a list of 2 items, not an object"),
        ('{"symbols": {"a": 0', "ends before its JSON does"),
    ],
)
def test_a_damaged_character_vocabulary_is_one_line_naming_the_file_and_field(tmp_path, content, message):
    """`char_vocab.json` whose `markers` and `symbols` are strings was an AttributeError (issue 50): every field is
    checked for its type and bounds before use, and refused in one line naming the file and the field."""
    path = tmp_path / "char_vocab.json"
    path.write_text(content)
    with pytest.raises(FileContentError) as raised:
        CharacterAlphabet.from_file(path)
    assert str(raised.value).startswith(str(path)) and message in str(raised.value)
    assert str(raised.value).endswith("; copy or download the model folder again") and "\n" not in str(raised.value)


def test_ids_of_a_saved_vocabulary_are_checked_within_it(tmp_path):
    markers = dict(zip(MARKER_ROLES, range(6)))
    for symbols, message in [
        ({**{f"m{i}": i for i in range(6)}, "a": 6, "b": 6}, "ids must be 0..7, each once"),
        ({f"m{i}": i for i in range(6)} | {"a": 60}, "symbols.a is the number 60, not an integer from 0 to 6"),
        ({f"m{i}": i for i in range(6)} | {"a": 1e300}, "symbols.a is the number 1e+300, not an integer"),
    ]:
        (tmp_path / "char_vocab.json").write_text(json.dumps({"markers": markers, "symbols": symbols}))
        with pytest.raises(FileContentError, match=re.escape(message)):
            CharacterAlphabet.from_file(tmp_path / "char_vocab.json")
    (tmp_path / "char_vocab.json").write_text(json.dumps({"markers": {**markers, "extra": 1}, "symbols": symbols}))
    with pytest.raises(FileContentError, match="markers.extra is no marker role"):
        CharacterAlphabet.from_file(tmp_path / "char_vocab.json")


def refused(error: type[Exception], message: str):
    """`pytest.raises` for exactly `message`, the whole of it."""
    return pytest.raises(error, match=f"^{re.escape(message)}$")


@pytest.mark.parametrize(
    "field",
    [{"size": 300}, {"markers": {**BYTE_MARKERS, "padding": 0}}, {"symbols": {"a": 0}}],
    ids=["size", "markers", "symbols"],
)
def test_the_byte_alphabet_refuses_each_change(field):
    with refused(ValueError, "the byte alphabet is fixed: 261 ids, bilm-tf's markers, no symbols"):
        CharacterAlphabet(**field)


def test_marker_ids_of_a_learned_alphabet_are_within_it():
    """Marker ids 0 and `size - 1` are in the vocabulary; a missing role, a bool, `size` and -1 are refused, each
    saying so."""
    markers = dict(zip(MARKER_ROLES, (0, 1, 2, 3, 4, 6)))
    assert CharacterAlphabet(learned=True, size=7, markers=markers).markers == markers
    without_unknown = {role: markers[role] for role in MARKER_ROLES[:-1]}
    with refused(ValueError, "a character vocabulary needs an integer id for each marker; none for ['unknown']"):
        CharacterAlphabet(learned=True, size=7, markers=without_unknown)
    with refused(ValueError, "a character vocabulary needs an integer id for each marker; none for ['padding']"):
        CharacterAlphabet(learned=True, size=7, markers={**markers, "padding": True})  # `true` in a config is no id
    for outside in (7, -1):
        bad = {**markers, "padding": outside}
        with refused(ValueError, f"a marker id is outside the character vocabulary (0..6): {bad}"):
            CharacterAlphabet(learned=True, size=7, markers=bad)


def test_from_config_shares_one_alphabet_per_size_and_markers():
    """A config without a learned vocabulary is bytes; a learned one gives one shared object for its size and
    markers; fields that cannot be a cache key (another config class does not check them) are refused with the
    reason, as the alphabet refuses them."""
    assert CharacterAlphabet.from_config(PretrainedConfig()) == CharacterAlphabet.from_config(ElmoConfig())
    assert not CharacterAlphabet.from_config(ElmoConfig()).learned
    markers = dict(zip(MARKER_ROLES, range(6)))
    config = ElmoConfig(char_vocab_size=8, char_markers=markers)
    alphabet = CharacterAlphabet.from_config(config)
    assert alphabet == CharacterAlphabet(learned=True, size=8, markers=markers)
    assert CharacterAlphabet.from_config(ElmoConfig(char_vocab_size=8, char_markers=dict(markers))) is alphabet
    unhashable = PretrainedConfig(char_vocab_size=8, char_markers={**markers, "padding": [4]})
    with refused(ValueError, "a character vocabulary needs an integer id for each marker; none for ['padding']"):
        CharacterAlphabet.from_config(unhashable)


def test_config_fields_of_each_kind():
    assert CharacterAlphabet().config_fields() == {"char_vocab_size": None, "char_markers": None}
    alphabet = learned()
    assert alphabet.config_fields() == {"char_vocab_size": alphabet.size, "char_markers": alphabet.markers}


def test_save_writes_one_symbol_a_line_in_utf8(tmp_path):
    """`char_vocab.json` as `save` writes it: UTF-8, characters as themselves (not `\\u` escapes), one a line."""
    path = tmp_path / "char_vocab.json"
    learned().save(path)
    lines = path.read_bytes().decode("utf-8").splitlines()
    assert '"한": 2,' in lines and '"a": 0,' in lines
    with refused(ValueError, "only a learned alphabet with its symbols can be saved (the byte alphabet is fixed)"):
        CharacterAlphabet().save(tmp_path / "bytes.json")


def test_words_the_alphabet_cannot_encode_are_refused_with_the_reason():
    with refused(TypeError, "a word must be a str, got int: 5"):
        CharacterAlphabet().word_row(5, 8)
    from_config = CharacterAlphabet.from_config(ElmoConfig(**learned().config_fields()))
    with refused(ValueError, "this alphabet was built from a config: it has no symbols to encode words with"):
        from_config.word_row("a", 8)


def test_decode_row_leaves_out_the_markers_from_id_256_and_replaces_a_cut_character():
    """Ids 256 and up are the byte alphabet's markers (256 the begin of sentence), not bytes; a character cut inside
    its UTF-8 decodes as U+FFFD."""
    alphabet = CharacterAlphabet()
    assert (
        alphabet.decode_row(alphabet.boundary_row(False, 8))
        == alphabet.decode_row(alphabet.boundary_row(True, 8))
        == ""
    )
    assert alphabet.decode_row(alphabet.word_row("é", 3)) == "\ufffd"  # one of its two bytes fits
