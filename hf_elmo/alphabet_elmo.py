"""The character alphabet of an ELMo model: which id each character of a word's row gets.

Two kinds of alphabet, and everything else (tokenizer, model, weight mapping, config) asks this module about them:

- **bytes** (bilm-tf, AllenNLP, the released English model): a word's UTF-8 bytes, cut to
  `max_characters_per_token - 2` bytes, between begin- and end-of-word markers; 256 byte values and 5 markers make
  261 trained ids.
- **learned** (ELMoForManyLangs, or `pretrain` on characters): a table of characters (code points) plus six markers,
  of any size; words are cut to `max_characters_per_token - 2` characters and unknown characters get the
  `unknown` marker.

In a row every id is shifted by one, so that an all-zero row means "no word here"; the model's character table
therefore has `size + 1` rows, row 0 all zeros.
"""

import functools
import json
import os
from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass, field

from .errors import FileContentError, JsonFields, is_integer

# Shift of every id in a row: 0 is reserved for "no character" (rows of padded positions are all zeros).
ID_SHIFT = 1

# The byte alphabet: bytes 0-255, then the markers.
BYTE_VALUES = 256
BEGIN_OF_SENTENCE_CHAR = 256
END_OF_SENTENCE_CHAR = 257
BEGIN_OF_WORD_CHAR = 258
END_OF_WORD_CHAR = 259
PADDING_CHAR = 260
BYTE_ALPHABET_SIZE = 261
BYTE_MARKERS = {
    "begin_of_sentence": BEGIN_OF_SENTENCE_CHAR,
    "end_of_sentence": END_OF_SENTENCE_CHAR,
    "begin_of_word": BEGIN_OF_WORD_CHAR,
    "end_of_word": END_OF_WORD_CHAR,
    "padding": PADDING_CHAR,
}

# Words that stand for the sentence boundaries, by alphabet kind (as in each original vocabulary).
BYTE_BOUNDARY_WORDS = ("<S>", "</S>")
LEARNED_BOUNDARY_WORDS = ("<bos>", "<eos>")

# The roles a learned alphabet's markers play, and the symbols ELMoForManyLangs' `char.dic` names them by.
MARKER_ROLES = ("begin_of_sentence", "end_of_sentence", "begin_of_word", "end_of_word", "padding", "unknown")
MARKER_SYMBOLS = ("<bos>", "<eos>", "<bow>", "<eow>", "<pad>", "<oov>")
MARKER_SYMBOL_OF_ROLE = dict(zip(MARKER_ROLES, MARKER_SYMBOLS))
CHAR_VOCAB_FILE = "char_vocab.json"
# The largest `char_vocab.json` read: a vocabulary of a million characters is 20 MB as `save` writes it.
CHAR_VOCAB_FILE_LIMIT = 32 << 20


@dataclass(frozen=True)
class CharacterAlphabet:
    """
    Args:
        learned (`bool`): a learned alphabet (characters) rather than the byte one.
        size (`int`): trained ids: 261 for bytes, the vocabulary's size for a learned alphabet.
        markers (`dict[str, int]`): id of each role in `MARKER_ROLES` (bytes have no `unknown`), unshifted. The role
            decides the place in a row, whatever symbol name the id has in `symbols`.
        symbols (`dict[str, int]`, *optional*): character -> id of a learned alphabet, ids `0 .. size - 1`; needed to
            encode words, not to build the model (a config records only `size` and `markers`).
    """

    learned: bool = False
    size: int = BYTE_ALPHABET_SIZE
    markers: dict[str, int] = field(default_factory=lambda: dict(BYTE_MARKERS))
    symbols: dict[str, int] | None = None

    def __post_init__(self):
        if not self.learned:
            if self.size != BYTE_ALPHABET_SIZE or self.markers != BYTE_MARKERS or self.symbols is not None:
                raise ValueError("the byte alphabet is fixed: 261 ids, bilm-tf's markers, no symbols")
            return
        missing = [role for role in MARKER_ROLES if not is_integer(self.markers.get(role))]
        if missing:
            raise ValueError(f"a character vocabulary needs an integer id for each marker; none for {missing}")
        if any(not 0 <= self.markers[role] < self.size for role in MARKER_ROLES):
            raise ValueError(f"a marker id is outside the character vocabulary (0..{self.size - 1}): {self.markers}")
        if self.symbols is not None and sorted(self.symbols.values()) != list(range(self.size)):
            raise ValueError(f"a character vocabulary's ids must be 0..{self.size - 1}, each once")

    # -- construction ---------------------------------------------------------------------------------------------

    @classmethod
    def from_symbols(
        cls, symbols: dict[str, int], marker_symbols: dict[str, str] | None = None
    ) -> "CharacterAlphabet":
        """
        A learned alphabet whose markers are the ids of the symbols named by `marker_symbols` (role -> symbol,
        default: the names in `MARKER_SYMBOLS`).
        """
        names = MARKER_SYMBOL_OF_ROLE if marker_symbols is None else marker_symbols
        missing = sorted(name for name in names.values() if name not in symbols)
        if missing:
            raise ValueError(f"the character vocabulary lacks the marker symbols {missing}")
        markers = {role: symbols[names[role]] for role in MARKER_ROLES}
        return cls(learned=True, size=len(symbols), markers=markers, symbols=dict(symbols))

    @classmethod
    def from_file(cls, path: str | os.PathLike) -> "CharacterAlphabet":
        """
        A learned alphabet saved by [`~CharacterAlphabet.save`], checked before use: a file that cannot be read, of
        more than `CHAR_VOCAB_FILE_LIMIT` bytes, or whose `markers` and `symbols` are not objects of ids within the
        vocabulary, each symbol's id once, is a one-line `ValueError` (`FileContentError`) naming the file and the
        field.
        """
        fix = "copy or download the model folder again"
        vocabulary = JsonFields.of_file(path, fix, CHAR_VOCAB_FILE_LIMIT)
        symbols = vocabulary.take("symbols", dict)
        markers = JsonFields(vocabulary.take("markers", dict), path, fix, "markers")
        if unknown := sorted(set(markers.data) - set(MARKER_ROLES)):
            raise markers.error(f"{markers.name(unknown[0])} is no marker role (they are {', '.join(MARKER_ROLES)})")
        for role in MARKER_ROLES:
            markers.take(role, int, minimum=0, maximum=len(symbols) - 1)
        ids = JsonFields(symbols, path, fix, "symbols")
        for symbol in symbols:
            ids.take(symbol, int, minimum=0, maximum=len(symbols) - 1)
        try:
            return cls(learned=True, size=len(symbols), markers=markers.data, symbols=symbols)
        except ValueError as error:  # ids that are not 0 .. size - 1 each once
            raise FileContentError(f"{path}: {error}; {fix}") from error

    def save(self, path: str | os.PathLike) -> None:
        if self.symbols is None:
            raise ValueError("only a learned alphabet with its symbols can be saved (the byte alphabet is fixed)")
        with open(path, "w", encoding="utf-8") as handle:
            json.dump({"markers": self.markers, "symbols": self.symbols}, handle, ensure_ascii=False, indent=0)

    @classmethod
    def from_config(cls, config) -> "CharacterAlphabet":
        """
        The alphabet of a model config (size and markers): bytes unless it records a learned vocabulary. Read from the
        config's fields on every call, so that it follows their changes; one shared object per size and markers.
        """
        size = getattr(config, "char_vocab_size", None)
        if size is None:
            return BYTE_ALPHABET
        try:
            return _learned_alphabet(size, tuple(dict(config.char_markers).items()))
        except TypeError:  # fields that cannot be a cache key: built anew, to be refused with the reason
            return cls(learned=True, size=size, markers=dict(config.char_markers))

    def config_fields(self) -> dict:
        """What a model config records of this alphabet."""
        if not self.learned:
            return {"char_vocab_size": None, "char_markers": None}
        return {"char_vocab_size": self.size, "char_markers": dict(self.markers)}

    # -- what the model and the weight mapping ask -----------------------------------------------------------------

    @property
    def table_rows(self) -> int:
        """Rows of the model's character table: the trained ids after a zero row for "no character"."""
        return self.size + ID_SHIFT

    def sentence_marker_row_ids(self) -> tuple[int, int]:
        """The shifted ids of the begin- and end-of-sentence markers, as index 1 of a boundary row holds them."""
        return (self.markers["begin_of_sentence"] + ID_SHIFT, self.markers["end_of_sentence"] + ID_SHIFT)

    # -- what the tokenizer asks ----------------------------------------------------------------------------------

    @property
    def boundary_words(self) -> tuple[str, str]:
        """The words that stand for the sentence boundaries (`<S>`, `</S>` for bytes; `<bos>`, `<eos>` learned)."""
        return LEARNED_BOUNDARY_WORDS if self.learned else BYTE_BOUNDARY_WORDS

    def cut(self, word: str, max_characters_per_token: int) -> str:
        """The characters of `word` a learned alphabet's row holds: the first `max_characters_per_token - 2`."""
        return word[: max_characters_per_token - 2]

    def word_row(self, word: str, max_characters_per_token: int, boundary_words: bool = True) -> list[int]:
        """
        The shifted ids of one word's row, `max_characters_per_token` ints. The boundary words give the boundary
        rows unless `boundary_words=False`.
        """
        if not isinstance(word, str):
            raise TypeError(f"a word must be a str, got {type(word).__name__}: {word!r}")
        if boundary_words and word in self.boundary_words:
            return self.boundary_row(word == self.boundary_words[1], max_characters_per_token)
        if not self.learned:
            chars = list(word.encode("utf-8", "ignore")[: max_characters_per_token - 2])
        elif self.symbols is None:
            raise ValueError("this alphabet was built from a config: it has no symbols to encode words with")
        else:
            unknown = self.markers["unknown"]
            chars = [self.symbols.get(char, unknown) for char in self.cut(word, max_characters_per_token)]
        return self._row(
            [self.markers["begin_of_word"], *chars, self.markers["end_of_word"]], max_characters_per_token
        )

    def boundary_row(self, end: bool, max_characters_per_token: int) -> list[int]:
        """The shifted ids of the `<S>` row (`end=False`) or of the `</S>` row."""
        marker = self.markers["end_of_sentence" if end else "begin_of_sentence"]
        ids = [self.markers["begin_of_word"], marker, self.markers["end_of_word"]]
        return self._row(ids, max_characters_per_token)

    def _row(self, ids: list[int], max_characters_per_token: int) -> list[int]:
        ids = ids + [self.markers["padding"]] * (max_characters_per_token - len(ids))
        return [i + ID_SHIFT for i in ids]

    def decode_row(self, row: list[int]) -> str:
        """
        The characters one word's row holds, markers left out: a byte row decodes its (possibly cut) UTF-8; an
        unknown character of a learned alphabet decodes as U+FFFD.
        """
        ids = [i - ID_SHIFT for i in row if i >= ID_SHIFT]
        if not self.learned:
            return bytes(i for i in ids if i < BYTE_VALUES).decode("utf-8", "replace")
        by_id = {i: symbol for symbol, i in (self.symbols or {}).items()}
        skipped = {self.markers[role] for role in MARKER_ROLES if role != "unknown"}
        return "".join("\ufffd" if i == self.markers["unknown"] else by_id[i] for i in ids if i not in skipped)


BYTE_ALPHABET = CharacterAlphabet()


@functools.cache
def _learned_alphabet(size: int, markers: tuple[tuple[str, int], ...]) -> CharacterAlphabet:
    """The learned alphabet of a config's size and markers, built once per distinct pair (every head forward asks)."""
    return CharacterAlphabet(learned=True, size=size, markers=dict(markers))


def learn_character_vocabulary(
    sentences: Iterable[str | list[str]], max_size: int | None = None, min_count: int = 1
) -> CharacterAlphabet:
    """
    A learned alphabet from a corpus (what `pretrain --char-vocab learned` trains on): the characters of the words of
    `sentences` (raw strings are split on whitespace), most frequent first (ties in order of first appearance), at
    most `max_size` of them and each seen at least `min_count` times, then the six markers.
    """
    counts = Counter()
    for sentence in sentences:
        for word in sentence.split() if isinstance(sentence, str) else sentence:
            counts.update(word)
    kept = [char for char, count in counts.most_common(max_size) if count >= min_count]
    symbols = {char: i for i, char in enumerate(kept)}
    for symbol in MARKER_SYMBOLS:
        symbols[symbol] = len(symbols)
    return CharacterAlphabet.from_symbols(symbols)


__all__ = ["CharacterAlphabet", "learn_character_vocabulary"]
