"""ELMo tokenizer: each word becomes a fixed row of character ids.

The mapping is the one the released weights were trained with (bilm-tf's `UnicodeCharsVocabulary`, AllenNLP's
`ELMoCharacterMapper`): a word's UTF-8 bytes, cut to `max_characters_per_token - 2` bytes, wrapped in begin- and
end-of-word markers and padded; every id is then shifted by one so that an all-zero row means "no word here".
"""

import json
import os
from collections.abc import Iterable, Mapping, Sequence
from types import SimpleNamespace
from typing import Any, NamedTuple

import numpy as np
from tokenizers import Tokenizer, pre_tokenizers
from transformers import BatchEncoding, PreTrainedTokenizerBase
from transformers.tokenization_utils_base import TOKENIZER_CONFIG_FILE, TruncationStrategy
from transformers.utils import CONFIG_NAME, PaddingStrategy, logging

from .alphabet_elmo import (
    BYTE_ALPHABET,
    BYTE_BOUNDARY_WORDS,
    BYTE_MARKERS,
    BYTE_VALUES,
    CHAR_VOCAB_FILE,
    ID_SHIFT,
    MARKER_SYMBOL_OF_ROLE,
    CharacterAlphabet,
)
from .configuration_elmo import BOOLEAN, MAX_CHARACTERS_PER_TOKEN, Rule, integer
from .errors import FileContentError, JsonFields, is_integer, json_object_or_none
from .korean_morphemes import KoreanMorphemes, installed_versions

logger = logging.get_logger(__name__)

BOS_TOKEN, EOS_TOKEN = BYTE_BOUNDARY_WORDS
UNK_TOKEN = "<UNK>"
WORD_VOCAB_FILE = "word_vocab.json"
WORD_INPUT_VOCAB_FILE = "word_input_vocab.json"
# The unknown and padding words of a word-input vocabulary (ELMoForManyLangs' `word.dic` names them so).
WORD_INPUT_UNKNOWN, WORD_INPUT_PADDING = "<oov>", "<pad>"

PRE_TOKENIZERS = {
    "whitespace_split": pre_tokenizers.WhitespaceSplit,
    "whitespace": pre_tokenizers.Whitespace,
    "bert": pre_tokenizers.BertPreTokenizer,
    "korean_morphemes": KoreanMorphemes,
}
# U+001C..U+001F (the information separators) are whitespace to Python's `str.split`, which bilm-tf, AllenNLP, `hf-elmo
# embed` and the learned alphabet split words with, and the only characters that are not to the pre-tokenizers above
# (Unicode's White_Space, which keeps them inside a word). Each is read as a space, one character for one, so that the
# spans stay those of the text.
SEPARATORS_AS_SPACES = str.maketrans(dict.fromkeys(map(chr, range(0x1C, 0x20)), " "))


# The settings a tokenizer is made with and saves in `tokenizer_config.json`, and what each must be: checked when the
# tokenizer is made and when the file is read (`read_tokenizer_settings`), each refusal one line naming the setting.
TOKENIZER_SETTINGS = {
    "max_characters_per_token": integer(3, MAX_CHARACTERS_PER_TOKEN),
    "pre_tokenizer": Rule(
        lambda value: isinstance(value, str) and value in PRE_TOKENIZERS, f"one of {sorted(PRE_TOKENIZERS)}"
    ),
    "word_vector_ids": BOOLEAN,
    "analyser_versions": Rule(
        lambda value: (
            value is None
            or (isinstance(value, dict) and all(isinstance(item, str) for pair in value.items() for item in pair))
        ),
        "None or a dict of package names to versions",
    ),
}
# What transformers' loading makes special tokens of (`AddedToken(**token)`): a token's text and its flags.
ADDED_TOKEN_FLAGS = ("single_word", "lstrip", "rstrip", "normalized", "special")


def is_added_token(value: Any, type_field: bool) -> bool:
    """A token as `tokenizer_config.json` saves it: its `content` and flags (and `"__type": "AddedToken"` where
    `type_field`, as a special token is saved)."""
    if not isinstance(value, dict) or not isinstance(value.get("content"), str):
        return False
    flags = {key: flag for key, flag in value.items() if key not in ("content", "__type")}
    return (value.get("__type") == "AddedToken") == type_field and all(
        key in ADDED_TOKEN_FLAGS and isinstance(flag, bool) for key, flag in flags.items()
    )


SPECIAL_TOKEN = Rule(
    lambda value: value is None or isinstance(value, str) or is_added_token(value, type_field=True),
    "None, a string or a saved AddedToken",
)
# What transformers reads of `tokenizer_config.json` for its own special tokens, checked with the settings (it would
# fail on another type inside its loading); this tokenizer's markers are rows, so it uses none of them.
TOKENIZER_FILE_FIELDS = {
    **TOKENIZER_SETTINGS,
    "bos_token": SPECIAL_TOKEN,
    "eos_token": SPECIAL_TOKEN,
    "added_tokens_decoder": Rule(
        lambda value: (
            isinstance(value, dict)
            and all(
                i.isascii() and i.isdigit() and is_added_token(token, type_field=False) for i, token in value.items()
            )
        ),
        "a dict of token ids to saved AddedTokens",
    ),
}
# What transformers' `from_pretrained` puts in `init_kwargs` beside the settings (so `save_pretrained` would write
# them): how that one call loaded, not how the tokenizer tokenizes.
LOADING_ARGUMENTS = ("is_local", "local_files_only")


def pre_tokenizer_named(name: str):
    """A new splitter of the pre-tokenizer `name` (one of `PRE_TOKENIZERS`); another name is one `ValueError`."""
    return PRE_TOKENIZERS[TOKENIZER_SETTINGS["pre_tokenizer"].checked("pre_tokenizer", name)]()


def read_tokenizer_settings(path: str) -> dict:
    """
    The `tokenizer_config.json` at `path` (read by `errors.read_json_file`: a regular file of bounded size, JSON), each
    of its `TOKENIZER_SETTINGS` checked before the tokenizer is made from it (transformers reads the file again, for
    its own keys): a one-line `ValueError` naming the file and the setting, where a value would make rows no model
    reads (a row of 10^9 characters filled the memory of `embed`).
    """
    fix = "copy or download the model folder again"
    settings = JsonFields.of_file(path, fix).data
    for name, rule in TOKENIZER_FILE_FIELDS.items():
        if name in settings:
            try:
                rule.checked(name, settings[name])
            except ValueError as error:
                raise FileContentError(f"{path}: {error}; {fix}") from None
    return settings


class Sentence(NamedTuple):
    """
    One sentence as the tokenizer reads it: its units (a position each: the words, or the morphemes of
    `korean_morphemes`), each unit's `(start, end)` in its string (`(0, len(unit))` when pre-split) and its word's
    index.
    """

    units: list[str]
    spans: list[tuple[int, int]]
    words: list[int]

    def first(self, count: int) -> "Sentence":
        """The sentence cut to its first `count` units."""
        return self.window(0, count)

    def window(self, start: int, count: int) -> "Sentence":
        """The `count` units from unit `start`, with their spans and word indices in the whole sentence."""
        end = start + count
        return Sentence(self.units[start:end], self.spans[start:end], self.words[start:end])


class EncodedExample(NamedTuple):
    """
    One (possibly paired) example: its sentences and, per position, its row, its unit's index in its sentence, its
    word's index and its sentence.
    """

    sentences: tuple[Sentence, Sentence | None]
    rows: list[list[int]]
    unit_ids: list[int | None]
    word_ids: list[int | None]
    type_ids: list[int]


class ElmoBatchEncoding(BatchEncoding):
    """A `BatchEncoding` that also knows which word each position holds."""

    def __init__(self, data=None, word_ids=None, tensor_type=None, prepend_batch_axis=False):
        super().__init__(data, tensor_type=tensor_type, prepend_batch_axis=prepend_batch_axis)
        self._word_ids = word_ids

    def word_ids(self, batch_index: int = 0) -> list[int | None]:
        """
        Word index of each position of sequence `batch_index`; `None` for `<S>`, `</S>` and padding. With the
        `korean_morphemes` pre-tokenizer, the morphemes of one whitespace word share its index.
        """
        if self._word_ids is None:
            raise ValueError("word_ids() is only available on the output of the tokenizer's __call__")
        return self._word_ids[batch_index]

    def word_start_positions(self, batch_index: int = 0) -> list[int]:
        """The position where each word of sequence `batch_index` starts ([`word_start_positions`] of `word_ids()`)."""
        return word_start_positions(self.word_ids(batch_index))

    def pool_to_words(self, hidden):
        """
        [`pool_to_words`] with this batch's `word_ids()`: `hidden` `(..., batch, positions, dim)` -> one vector per
        word `(..., batch, words, dim)` and the word mask `(batch, words)`.
        """
        if self._word_ids is None:
            raise ValueError("pool_to_words() needs word_ids(): call it on the output of the tokenizer's __call__")
        return pool_to_words(hidden, self._word_ids)


class ElmoTokenizer(PreTrainedTokenizerBase):
    r"""
    Turns sentences into rows of character ids, one row per word, with boundary rows (`<S>` and `</S>`) around each
    sentence.

    `input_ids` has shape `(batch, positions, max_characters_per_token)` and `attention_mask` `(batch, positions)`.
    A word given in a pre-split list is always one position, whatever characters it holds: the pre-tokenizer splits
    raw strings only. The vocabulary units are characters (as for ByT5 and CANINE): `get_vocab()`, `len()` and
    `convert_tokens_to_ids` speak of characters; `encode` and `decode` of sentences, each position a word.

    Args:
        max_characters_per_token (`int`): length of each character row (50 for the released models).
        pre_tokenizer (`str`): how raw strings are split into words, one of `"whitespace_split"` (split on
            whitespace only, the default: the released models read whitespace-tokenised text), `"whitespace"`
            (`\w+|[^\w\s]+`), `"bert"` (whitespace and punctuation) or `"korean_morphemes"` (Korean morphemes as
            kiwipiepy analyses them, the `korean` extra: each morpheme a position, `word_ids()` its whitespace word;
            see [`~korean_morphemes.KoreanMorphemes`]).
        analyser_versions (`dict[str, str]`, *optional*): with `"korean_morphemes"`, the versions of `kiwipiepy` and
            `kiwipiepy_model` the units were made with; by default those installed. Saved with the tokenizer and kept
            on reload, where other installed versions are a warning (once per process): they may split some words
            otherwise than the model learned.
        vocab_file (`str`, *optional*): a `tokenizers` `WordLevel` tokenizer JSON holding the word vocabulary of a
            language model (with `<S>`, `</S>` and `<UNK>`); it lets `__call__(..., return_word_labels=True)` give
            the word id of every position as `labels`. Saved and loaded with the tokenizer.
        word_vector_ids (`bool`): with a word vocabulary, the output also holds `word_vector_ids` `(batch,
            positions)`, the word-vocabulary id of every position (those of `return_word_labels=True`, `<S>` and
            `</S>` included; padding gets `</S>`'s id, which the heads mask): the input of a head's word vectors
            (`config.word_vector_dim`). Saved with the tokenizer.
        char_vocab_file (`str`, *optional*): a learned character vocabulary saved by
            [`~alphabet_elmo.CharacterAlphabet`]; without it, words are rows of UTF-8 bytes (bilm-tf's alphabet). With
            it, the sentence boundaries are the words `<bos>` and `<eos>`.
        word_input_vocab_file (`str`, *optional*): a JSON object word -> id (with `<oov>` and `<pad>`) for models that
            also read a word embedding (ELMoForManyLangs): the output then holds `word_input_ids` `(batch,
            positions)`, the id of each position's word as its row holds it (cut to the row), looked up exactly.
    """

    vocab_files_names = {
        "vocab_file": WORD_VOCAB_FILE,
        "char_vocab_file": CHAR_VOCAB_FILE,
        "word_input_vocab_file": WORD_INPUT_VOCAB_FILE,
    }

    def __init__(
        self,
        max_characters_per_token: int = 50,
        pre_tokenizer: str = "whitespace_split",
        vocab_file: str | None = None,
        char_vocab_file: str | None = None,
        word_input_vocab_file: str | None = None,
        analyser_versions: dict[str, str] | None = None,
        word_vector_ids: bool = False,
        **kwargs,
    ):
        settings = {
            "max_characters_per_token": max_characters_per_token,
            "word_vector_ids": word_vector_ids,
            "analyser_versions": analyser_versions,
        }
        for name, value in settings.items():  # the pre-tokenizer's name is checked where it is looked up
            TOKENIZER_SETTINGS[name].checked(name, value)
        splitter = pre_tokenizer_named(pre_tokenizer)
        if kwargs.get("padding_side", "right") != "right":
            raise ValueError("ElmoTokenizer pads on the right only: the backward LSTM reads each row from its end")
        self.alphabet = BYTE_ALPHABET if char_vocab_file is None else CharacterAlphabet.from_file(char_vocab_file)
        if word_input_vocab_file is not None and not self.alphabet.learned:
            raise ValueError("a word-input vocabulary goes with a learned character vocabulary (char_vocab_file=)")
        kwargs.setdefault("bos_token", self.alphabet.boundary_words[0])
        kwargs.setdefault("eos_token", self.alphabet.boundary_words[1])
        self.max_characters_per_token = max_characters_per_token
        self.pre_tokenizer = pre_tokenizer
        self._splitter = splitter
        self.analyser_versions = _analyser_versions(pre_tokenizer, analyser_versions)
        self._bos_row = self.alphabet.boundary_row(False, max_characters_per_token)
        self._eos_row = self.alphabet.boundary_row(True, max_characters_per_token)
        self._pad_row = [0] * max_characters_per_token
        self._row_cache: dict[str, list[int]] = {}
        self.word_tokenizer = None if vocab_file is None else _read_word_vocab(vocab_file)
        self._word_to_id = None if vocab_file is None else self.word_tokenizer.get_vocab()
        if word_vector_ids and vocab_file is None:
            raise ValueError("word_vector_ids=True needs a word vocabulary: create the tokenizer with vocab_file=")
        self.word_vector_ids = word_vector_ids
        self.word_input_vocab = (
            None if word_input_vocab_file is None else _read_word_input_vocab(word_input_vocab_file)
        )
        self._symbols = self._character_symbols()
        self._symbol_by_id = {i: symbol for symbol, i in self._symbols.items()}
        if self.analyser_versions is not None:
            kwargs["analyser_versions"] = self.analyser_versions
        if word_vector_ids:  # saved only when on: the tokenizer files of other folders stay as they were
            kwargs["word_vector_ids"] = True
        super().__init__(max_characters_per_token=max_characters_per_token, pre_tokenizer=pre_tokenizer, **kwargs)
        self.model_input_names = (
            ["input_ids", "attention_mask"]
            + (["word_input_ids"] if self.word_input_vocab is not None else [])
            + (["word_vector_ids"] if word_vector_ids else [])
        )

    @classmethod
    def from_pretrained(cls, pretrained_model_name_or_path, *args, **kwargs):
        """As transformers' `from_pretrained`, a local folder's `tokenizer_config.json` read first
        (`read_tokenizer_settings`): transformers opens it before `_from_pretrained`, and fails on JSON that is no
        object."""
        folder = os.path.join(str(pretrained_model_name_or_path), kwargs.get("subfolder") or "")
        if os.path.isfile(os.path.join(folder, TOKENIZER_CONFIG_FILE)):
            read_tokenizer_settings(os.path.join(folder, TOKENIZER_CONFIG_FILE))
        return super().from_pretrained(pretrained_model_name_or_path, *args, **kwargs)

    @classmethod
    def _from_pretrained(cls, resolved_vocab_files, pretrained_model_name_or_path, *args, **kwargs):
        # No file is required (a byte alphabet needs none), so transformers would build a default tokenizer from a
        # path that does not exist: a typo would go unnoticed.
        if not os.path.isdir(pretrained_model_name_or_path) and not any(resolved_vocab_files.values()):
            raise OSError(
                f"{pretrained_model_name_or_path} is not a folder, and no ElmoTokenizer files were found "
                "for it on the Hub or in the Hub cache"
            )
        # Every route to a model's tokenizer passes here (AutoTokenizer, pipeline, trust_remote_code folders): a file
        # the model's config needs that is missing is refused here, not met as other vectors later.
        found = [path for path in resolved_vocab_files.values() if path]
        if resolved_vocab_files.get("tokenizer_config_file"):
            read_tokenizer_settings(resolved_vocab_files["tokenizer_config_file"])
        folder = pretrained_model_name_or_path if os.path.isdir(pretrained_model_name_or_path) else None
        if folder is None and found:  # a Hub repository: its snapshot folder, where config.json lies once fetched
            folder = os.path.dirname(found[0])
        model_config = _read_model_config(folder) if folder is not None else None
        if model_config is not None:
            check_tokenizer(
                None, model_config, pretrained_model_name_or_path, files=[os.path.basename(path) for path in found]
            )
        tokenizer = super()._from_pretrained(resolved_vocab_files, pretrained_model_name_or_path, *args, **kwargs)
        for name in LOADING_ARGUMENTS:  # a folder saved before holds them: read, then never written again
            tokenizer.init_kwargs.pop(name, None)
        return tokenizer

    # -- the vocabulary: characters ---------------------------------------------------------------------------------

    def _character_symbols(self) -> dict[str, int]:
        """Each character id's symbol -> the id as rows hold it (shifted); `<no character>` is 0, padding rows."""
        symbols = {"<no character>": 0}
        if self.alphabet.learned:
            symbols.update({symbol: i + ID_SHIFT for symbol, i in self.alphabet.symbols.items()})
        else:
            # Bytes as ByT5 names them (one character per byte value), then the markers by a learned alphabet's names.
            symbols.update({chr(byte): byte + ID_SHIFT for byte in range(BYTE_VALUES)})
            symbols.update({MARKER_SYMBOL_OF_ROLE[role]: marker + ID_SHIFT for role, marker in BYTE_MARKERS.items()})
        return symbols

    @property
    def vocab_size(self) -> int:
        """Character ids a row can hold, 0 ("no character") included: the rows of the model's character table."""
        return self.alphabet.table_rows

    def __len__(self) -> int:
        return self.vocab_size

    def get_vocab(self) -> dict[str, int]:
        """Character symbol -> id (as rows hold it): bytes as `chr(byte)` and markers as `<bos>`, `<eow>`, ..."""
        return dict(self._symbols)

    @property
    def added_tokens_decoder(self) -> dict:
        return {}

    @property
    def bos_token_id(self) -> None:
        """`None`: the `<S>` position is a whole row of character ids (see `encode`), not one id."""
        return None

    @property
    def eos_token_id(self) -> None:
        """`None`: the `</S>` position is a whole row of character ids (see `encode`), not one id."""
        return None

    def convert_tokens_to_ids(self, tokens: str | list[str]) -> int | list[int]:
        """
        The id of a character symbol (see `get_vocab`); an unknown character of a learned alphabet gets `<oov>`'s
        id. The boundary words give the id of their sentence marker, which tells their rows apart.
        """
        if not isinstance(tokens, str):
            return [self.convert_tokens_to_ids(token) for token in tokens]
        if tokens in self._symbols:
            return self._symbols[tokens]
        if tokens in self.alphabet.boundary_words:
            return self.alphabet.sentence_marker_row_ids()[self.alphabet.boundary_words.index(tokens)]
        if self.alphabet.learned:
            return self.alphabet.markers["unknown"] + ID_SHIFT
        raise ValueError(
            f"{tokens!r} is not one byte nor a marker: the byte alphabet's tokens are single bytes "
            f"(chr(0)..chr(255)); use __call__ or encode for words"
        )

    def convert_ids_to_tokens(self, ids: int | list[int], skip_special_tokens: bool = False) -> str | list[str]:
        """
        The symbol of a character id, or of each id of a list, a tensor or an array, nested as they are (a row of
        `input_ids` `(positions, max_characters_per_token)` gives a list of symbols per position);
        `skip_special_tokens` drops the markers and padding.
        """
        ids = _to_list(ids)  # a tensor's element is a 0-d tensor, not an int
        if not isinstance(ids, (list, tuple)):
            self._check_character_id(ids)
            return self._symbol_by_id[ids]
        markers = {marker + ID_SHIFT for marker in self.alphabet.markers.values()} | {0}
        if self.alphabet.learned:
            markers.discard(self.alphabet.markers["unknown"] + ID_SHIFT)
        return [
            self.convert_ids_to_tokens(i, skip_special_tokens)
            for i in ids
            if not (skip_special_tokens and is_integer(i) and i in markers)
        ]

    def _check_character_id(self, value) -> None:
        """A one-line `ValueError` unless `value` is a character id: an integer (never a bool or a float, which a dict
        lookup would take for one: `True == 1`, `5.0 == 5`) that names a character of this tokenizer."""
        if not (is_integer(value) and value in self._symbol_by_id):
            raise ValueError(f"{value!r} is not a character id (0..{self.vocab_size - 1})")

    def save_vocabulary(self, save_directory: str, filename_prefix: str | None = None) -> tuple[str, ...]:
        """Writes the word vocabulary, the learned character vocabulary and the word-input vocabulary (any held)."""
        prefix = filename_prefix + "-" if filename_prefix else ""
        paths = []
        if self.word_tokenizer is not None:
            paths.append(os.path.join(save_directory, prefix + WORD_VOCAB_FILE))
            self.word_tokenizer.save(paths[-1])
        if self.alphabet.learned:
            paths.append(os.path.join(save_directory, prefix + CHAR_VOCAB_FILE))
            self.alphabet.save(paths[-1])
        if self.word_input_vocab is not None:
            paths.append(os.path.join(save_directory, prefix + WORD_INPUT_VOCAB_FILE))
            with open(paths[-1], "w", encoding="utf-8") as handle:
                json.dump(self.word_input_vocab, handle, ensure_ascii=False, indent=0)
        return tuple(paths)

    def _save_pretrained(self, save_directory, file_names, legacy_format=None, filename_prefix=None):
        return tuple(file_names) + self.save_vocabulary(str(save_directory), filename_prefix)

    # -- the optional word vocabulary (targets of a language model) -------------------------------------------------

    @property
    def word_vocab_size(self) -> int | None:
        """Size of the word vocabulary, `None` without one."""
        return None if self._word_to_id is None else len(self._word_to_id)

    def word_to_id(self, word: str) -> int:
        """The word-vocabulary id of `word` (`<UNK>`'s id for an unknown word)."""
        if self._word_to_id is None:
            raise ValueError("this tokenizer has no word vocabulary: create it with vocab_file=...")
        return self._word_to_id.get(word, self._word_to_id[UNK_TOKEN])

    # -- encoding ---------------------------------------------------------------------------------------------------

    def split_words(self, text: str) -> list[str]:
        """Splits a raw string into its units (a position each) with the configured pre-tokenizer."""
        return self._split(text).units

    def _split(self, text: str) -> Sentence:
        """A raw string's units, their spans and their words (each unit its own; a Korean morpheme its eojeol's)."""
        if not isinstance(text, str):
            raise TypeError(f"text must be a str, got {type(text).__name__}")
        text = text.translate(SEPARATORS_AS_SPACES)
        if isinstance(self._splitter, KoreanMorphemes):
            morphemes = self._splitter.analyse(text)
            return Sentence([m[0] for m in morphemes], [m[1] for m in morphemes], [m[2] for m in morphemes])
        pieces = self._splitter.pre_tokenize_str(text)
        return Sentence([unit for unit, _ in pieces], [span for _, span in pieces], list(range(len(pieces))))

    def word_to_row(self, word: str) -> list[int]:
        """The character-id row of one word (cached)."""
        row = self._row_cache.get(word)
        if row is None:
            row = self.alphabet.word_row(word, self.max_characters_per_token)
            if len(self._row_cache) < 1_000_000:
                self._row_cache[word] = row
        return row

    def word_input_id(self, word: str) -> int:
        """The word-input id of a word as its row holds it (cut to the row's characters); `<oov>`'s when unknown."""
        vocab = self.word_input_vocab
        return vocab.get(self.alphabet.cut(word, self.max_characters_per_token), vocab[WORD_INPUT_UNKNOWN])

    def __call__(
        self,
        text=None,
        text_pair=None,
        text_target=None,
        text_pair_target=None,
        add_special_tokens: bool = True,
        padding=False,
        truncation=None,
        max_length: int | None = None,
        stride: int = 0,
        is_split_into_words: bool = False,
        pad_to_multiple_of: int | None = None,
        padding_side: str | None = None,
        return_tensors=None,
        return_token_type_ids: bool | None = None,
        return_attention_mask: bool | None = None,
        return_overflowing_tokens: bool = False,
        return_special_tokens_mask: bool = False,
        return_offsets_mapping: bool = False,
        return_length: bool = False,
        verbose: bool = True,
        split_special_tokens: bool = False,
        return_word_labels: bool = False,
        **kwargs,
    ) -> ElmoBatchEncoding:
        """
        Encodes one sentence or a batch.

        `text` is a string, a list of strings, a list of `(text, pair)` tuples, or, with `is_split_into_words=True`,
        a list of words, a list of such lists, or a list of `(words, pair_words)` tuples. `text_pair`, of the form of
        `text`, gives second sentences (e.g. for NLI): each is encoded after the first as its own `<S> ... </S>` and
        marked by `token_type_ids` 1. With `return_word_labels=True` (needs a word vocabulary), `labels` holds the
        word id of every position, `<S>` and `</S>` included, -100 at padding: the targets of
        [`ElmoForPreTraining`]. A tokenizer made with `word_vector_ids=True` also gives those ids as
        `word_vector_ids`, padding `</S>`'s id. `return_special_tokens_mask` marks the boundary positions;
        `return_offsets_mapping` gives each unit's `(start, end)` in its string (`(0, 0)` for boundaries);
        `split_special_tokens=True` encodes the words `<S>` and `</S>` of the text as ordinary words.
        """
        _refuse_unsupported_arguments(kwargs, text, text_target, text_pair_target, padding_side)
        padding, truncation = _padding_strategy(padding, pad_to_multiple_of), _truncation_strategy(truncation)
        if text_pair is None and _is_batch_of_pairs(text, is_split_into_words):
            text, text_pair = [first for first, _ in text], [second for _, second in text]
        batched, firsts, seconds = self._batch_of_sentences(text, text_pair, is_split_into_words)
        if return_word_labels and self._word_to_id is None:
            raise ValueError("return_word_labels=True needs a word vocabulary: create the tokenizer with vocab_file=")
        if (return_overflowing_tokens or stride) and (truncation != TruncationStrategy.ONLY_SECOND or seconds is None):
            raise ValueError(
                "overflowing tokens are windows of a pair's second sentence (a question's context): pass pairs with "
                "truncation='only_second' and max_length; otherwise truncation drops the words past max_length"
            )
        limit = self._truncation_limit(truncation, max_length)
        examples, sample_of = [], []
        for index, (first, pair) in enumerate(zip(firsts, seconds or [None] * len(firsts))):
            if return_overflowing_tokens:
                windows = self._encode_windows(first, pair, add_special_tokens, limit, stride, split_special_tokens)
            else:
                windows = [self._encode_one(first, pair, add_special_tokens, limit, split_special_tokens, truncation)]
            examples += windows
            sample_of += [index] * len(windows)
        data = {"input_ids": [example.rows for example in examples]}
        if self.word_input_vocab is not None:
            data["word_input_ids"] = [self._word_inputs(example) for example in examples]
        word_vocab_ids = (
            [self._word_labels(example) for example in examples] if return_word_labels or self.word_vector_ids else []
        )
        if self.word_vector_ids:
            data["word_vector_ids"] = word_vocab_ids
        if return_attention_mask is not False:
            data["attention_mask"] = [[1] * len(example.rows) for example in examples]
        if return_token_type_ids or (return_token_type_ids is None and seconds is not None):
            data["token_type_ids"] = [example.type_ids for example in examples]
        if return_special_tokens_mask:
            data["special_tokens_mask"] = [[int(word is None) for word in example.word_ids] for example in examples]
        if return_offsets_mapping:
            data["offset_mapping"] = [_offset_mapping(example) for example in examples]
        if return_length:
            data["length"] = [len(example.rows) for example in examples]
        if return_overflowing_tokens:
            data["overflow_to_sample_mapping"] = sample_of
        word_ids = [example.word_ids for example in examples]
        labels = word_vocab_ids if return_word_labels else []
        if padding != PaddingStrategy.DO_NOT_PAD:
            data = self._pad_lists(
                data, max_length if padding == PaddingStrategy.MAX_LENGTH else None, pad_to_multiple_of
            )
            positions = len(data["input_ids"][0])
            word_ids = [ids + [None] * (positions - len(ids)) for ids in word_ids]
            labels = [ids + [-100] * (positions - len(ids)) for ids in labels]
        if return_word_labels:
            data["labels"] = labels
        return _batch_encoding(data, word_ids, batched or return_overflowing_tokens, return_tensors)

    def tokenize(self, text: str, pair: str | None = None, add_special_tokens: bool = False, **kwargs) -> list[str]:
        """
        The words a raw string becomes, one per position (with the boundary words when `add_special_tokens`). A
        position's id is a row of character ids: get them with `encode` or `__call__`, not `convert_tokens_to_ids`,
        which maps characters.
        """
        if kwargs:
            raise TypeError(f"ElmoTokenizer.tokenize got unexpected arguments: {sorted(kwargs)}")
        bos, eos = self.alphabet.boundary_words
        words = []
        for sentence in [text] if pair is None else [text, pair]:
            split = self.split_words(sentence)
            words.extend([bos, *split, eos] if add_special_tokens else split)
        return words

    def encode(self, text, text_pair=None, add_special_tokens: bool = True, **kwargs) -> list[list[int]]:
        """The `input_ids` of one sentence (or pair): a list of character-id rows, one per position."""
        if not isinstance(text, str) and not kwargs.get("is_split_into_words"):
            raise TypeError(
                f"encode takes one sentence (a str, or a list of words with is_split_into_words=True), "
                f"got {type(text).__name__}: use __call__ for batches"
            )
        return self(text, text_pair=text_pair, add_special_tokens=add_special_tokens, **kwargs)["input_ids"]

    def num_special_tokens_to_add(self, pair: bool = False) -> int:
        """Boundary positions added around one sentence (2) or a pair (4)."""
        return 4 if pair else 2

    def _as_batch_of_words(self, text, is_split_into_words: bool, name: str) -> tuple[bool, list[Sentence]]:
        """Normalises the accepted input forms to `(was_batched, list of sentences)`."""
        if isinstance(text, str):
            if is_split_into_words:
                raise ValueError(f"{name} is a str but is_split_into_words=True: pass a list of words")
            return False, [self._split(text)]
        if not isinstance(text, Sequence) or isinstance(text, bytes):
            raise TypeError(f"{name} must be a str or a list, got {type(text).__name__}")
        if len(text) == 0:
            if is_split_into_words:  # a sentence of no words (a blank line's `split()`), as transformers reads `[]`
                return False, [Sentence([], [], [])]
            raise ValueError("cannot encode an empty batch")
        if not is_split_into_words:
            return True, [self._split(t) for t in text]
        batched = any(isinstance(t, Sequence) and not isinstance(t, str) for t in text)
        sentences = text if batched else [text]
        for sentence in sentences:
            if isinstance(sentence, str) or not isinstance(sentence, Sequence):
                raise TypeError(
                    f"with is_split_into_words=True, {name} must be a list of words or a list of "
                    f"lists of words; got an element of type {type(sentence).__name__}"
                )
            for word in sentence:
                if not isinstance(word, str):
                    raise TypeError(f"a word must be a str, got {type(word).__name__}: {word!r}")
        return batched, [
            Sentence(list(sentence), [(0, len(word)) for word in sentence], list(range(len(sentence))))
            for sentence in sentences
        ]

    def _batch_of_sentences(self, text, text_pair, is_split_into_words: bool):
        """`(was_batched, first sentences, second sentences or None)`, each a list of `Sentence`s."""
        batched, firsts = self._as_batch_of_words(text, is_split_into_words, "text")
        if text_pair is None:
            return batched, firsts, None
        pair_batched, seconds = self._as_batch_of_words(text_pair, is_split_into_words, "text_pair")
        if pair_batched != batched or len(seconds) != len(firsts):
            raise ValueError("text and text_pair must both be single sentences or batches of the same size")
        return batched, firsts, seconds

    def _truncation_limit(self, truncation: TruncationStrategy | None, max_length: int | None) -> int | None:
        """The most positions an example keeps; `None` without truncation (which `max_length` alone turns on)."""
        if truncation is None:
            truncation = TruncationStrategy.DO_NOT_TRUNCATE if max_length is None else TruncationStrategy.LONGEST_FIRST
        if truncation == TruncationStrategy.DO_NOT_TRUNCATE:
            return None
        return self.model_max_length if max_length is None else max_length

    def _encode_windows(
        self, first: Sentence, pair: Sentence, add_special_tokens, limit, stride: int, split_special_tokens=False
    ) -> list[EncodedExample]:
        """
        The pair read in windows of its second sentence: each `first` with as many of `pair`'s units as `limit`
        positions leave room for, a window starting `stride` units before the end of the one before it.
        """
        room = self._pair_room(first, add_special_tokens, limit)
        if not 0 <= stride < room:
            raise ValueError(f"stride must be at least 0 and less than the {room} units a window holds, got {stride}")
        starts = range(0, max(len(pair.units) - stride, 1), room - stride)
        return [
            self._encode_one(first, pair.window(start, room), add_special_tokens, None, split_special_tokens)
            for start in starts
        ]

    def _pair_room(self, first: Sentence, add_special_tokens, limit: int | None) -> int:
        """How many units of a pair's second sentence fit beside all of `first` in `limit` positions."""
        if limit is None:
            raise ValueError("truncation='only_second' needs max_length (or the tokenizer's model_max_length)")
        room = limit - (4 if add_special_tokens else 0) - len(first.units)
        if room < 1:
            raise ValueError(
                f"max_length={limit} leaves no room for the second sentence beside the first ({len(first.units)} "
                f"units) and the boundary positions"
            )
        return room

    def _encode_one(
        self,
        first: Sentence,
        pair: Sentence | None,
        add_special_tokens,
        limit,
        split_special_tokens=False,
        truncation=None,
    ) -> EncodedExample:
        """
        One (possibly paired) example, truncated to `limit` positions: the longer sentence's last units first, or
        with `truncation="only_second"` (`"only_first"`) the second (first) sentence's alone.
        """
        n_special = (2 if add_special_tokens else 0) * (1 if pair is None else 2)
        if limit is not None:
            room = limit - n_special
            if room < 0:
                raise ValueError(f"max_length={limit} leaves no room for the {n_special} boundary positions")
            if truncation == TruncationStrategy.ONLY_SECOND and pair is not None:
                pair = pair.first(self._pair_room(first, add_special_tokens, limit))
            elif truncation == TruncationStrategy.ONLY_FIRST and pair is not None:
                if room - len(pair.units) < 1:
                    raise ValueError(
                        f"max_length={limit} leaves no room for the first sentence beside the second "
                        f"({len(pair.units)} units) and the boundary positions"
                    )
                first = first.first(room - len(pair.units))
            elif pair is None:
                first = first.first(room)
            else:
                kept = [len(first.units), len(pair.units)]
                while sum(kept) > room:  # as transformers' "longest_first": a tie takes a unit from the second
                    kept[0 if kept[0] > kept[1] else 1] -= 1
                first, pair = first.first(kept[0]), pair.first(kept[1])
        rows, unit_ids, word_ids, type_ids = [], [], [], []
        row_of = self._plain_row if split_special_tokens else self.word_to_row
        for type_id, sentence in enumerate([first] if pair is None else [first, pair]):
            if add_special_tokens:
                rows.append(self._bos_row)
                unit_ids.append(None)
                word_ids.append(None)
            rows.extend(row_of(unit) for unit in sentence.units)
            unit_ids.extend(range(len(sentence.units)))
            word_ids.extend(sentence.words)
            if add_special_tokens:
                rows.append(self._eos_row)
                unit_ids.append(None)
                word_ids.append(None)
            type_ids.extend([type_id] * (len(rows) - len(type_ids)))
        return EncodedExample((first, pair), rows, unit_ids, word_ids, type_ids)

    def _plain_row(self, word: str) -> list[int]:
        """The row of `word` read as characters even when it is a boundary word (`split_special_tokens=True`)."""
        return self.alphabet.word_row(word, self.max_characters_per_token, boundary_words=False)

    def _word_labels(self, example: EncodedExample) -> list[int]:
        """The word-vocabulary id of every position of one encoded example."""
        bos_id, eos_id = self.word_to_id(BOS_TOKEN), self.word_to_id(EOS_TOKEN)
        labels = []
        for row, unit_id, type_id in zip(example.rows, example.unit_ids, example.type_ids):
            if unit_id is None:
                labels.append(bos_id if row is self._bos_row else eos_id)
            else:
                labels.append(self.word_to_id(example.sentences[type_id].units[unit_id]))
        return labels

    def _word_inputs(self, example: EncodedExample) -> list[int]:
        """The word-input id of every position of one encoded example (boundaries as their words)."""
        vocab, unknown = self.word_input_vocab, self.word_input_vocab[WORD_INPUT_UNKNOWN]
        bos_id, eos_id = (vocab.get(word, unknown) for word in self.alphabet.boundary_words)
        return [
            (bos_id if row is self._bos_row else eos_id)
            if unit_id is None
            else self.word_input_id(example.sentences[type_id].units[unit_id])
            for row, unit_id, type_id in zip(example.rows, example.unit_ids, example.type_ids)
        ]

    # -- padding ----------------------------------------------------------------------------------------------------

    def _pad_lists(self, data: dict, max_length: int | None, pad_to_multiple_of: int | None) -> dict:
        """Pads every per-position list of a batch on the right to a common length."""
        longest = max(len(rows) for rows in data["input_ids"])
        target = max(longest, max_length or 0)
        if pad_to_multiple_of:
            target = -(-target // pad_to_multiple_of) * pad_to_multiple_of
        pad_values = {
            "input_ids": self._pad_row,
            "attention_mask": 0,
            "token_type_ids": 0,
            "special_tokens_mask": 1,
            "offset_mapping": (0, 0),
        }
        if self.word_input_vocab is not None:
            pad_values["word_input_ids"] = self.word_input_vocab[WORD_INPUT_PADDING]
        if self._word_to_id is not None:
            # Any id a word vector can be looked up with; the heads mask padded positions.
            pad_values["word_vector_ids"] = self.word_to_id(EOS_TOKEN)
        padded = {}
        for key, batch in data.items():
            if key not in pad_values:
                padded[key] = batch
                continue
            padded[key] = [list(seq) + [pad_values[key]] * (target - len(seq)) for seq in batch]
        return padded

    def pad(
        self,
        encoded_inputs,
        padding=True,
        max_length: int | None = None,
        pad_to_multiple_of: int | None = None,
        padding_side: str | None = None,
        return_attention_mask: bool | None = None,
        return_tensors=None,
        verbose: bool = True,
    ) -> ElmoBatchEncoding:
        """
        Pads already-encoded features (a list of dicts, or a dict of lists) to a common number of positions, as
        the stock data collators ask. Tensors are accepted and turned into lists first. Keys other than
        `input_ids`, `attention_mask`, `token_type_ids`, `special_tokens_mask`, `word_input_ids` and
        `word_vector_ids` are passed through unchanged.
        """
        if padding_side not in (None, "right"):
            raise ValueError("ElmoTokenizer pads on the right only")
        padding = _padding_strategy(padding, pad_to_multiple_of)
        if isinstance(encoded_inputs, (list, tuple)):
            if not encoded_inputs:
                raise ValueError("cannot pad an empty list of features")
            keys = encoded_inputs[0].keys()
            encoded_inputs = {key: [feature[key] for feature in encoded_inputs] for key in keys}
        if "input_ids" not in encoded_inputs:
            raise ValueError(f"pad() needs 'input_ids' among the features, got {sorted(encoded_inputs)}")
        data = {key: [_to_list(item) for item in value] for key, value in encoded_inputs.items()}
        if any(not rows or not isinstance(rows[0], list) for rows in data["input_ids"]):
            raise ValueError("each feature's input_ids must be a list of character-id rows")
        if self.word_input_vocab is not None and "word_input_ids" not in data:
            raise ValueError("this tokenizer's model also reads word_input_ids: the features lack them")
        if self.word_vector_ids and "word_vector_ids" not in data:
            raise ValueError("this tokenizer gives word_vector_ids (word_vector_ids=True): the features lack them")
        _refuse_string_labels(data)
        if return_attention_mask is not False and "attention_mask" not in data:
            data["attention_mask"] = [[1] * len(rows) for rows in data["input_ids"]]
        if padding != PaddingStrategy.DO_NOT_PAD:
            data = self._pad_lists(
                data, max_length if padding == PaddingStrategy.MAX_LENGTH else None, pad_to_multiple_of
            )
        return ElmoBatchEncoding(data, tensor_type=return_tensors)

    # -- decoding (words are not recoverable beyond the characters a row holds, but rows decode faithfully) ----------

    def decode(self, token_ids, skip_special_tokens: bool = False, **kwargs) -> str | list[str]:
        """
        The words of one sequence of character rows joined by spaces; a batch of sequences gives a list of strings,
        and a single row its word.
        """
        token_ids = _to_list(token_ids)
        depth = _nesting_depth(token_ids)
        if depth == 3:
            return [self.decode(sequence, skip_special_tokens) for sequence in token_ids]
        if depth == 1:
            return self.decode([token_ids], skip_special_tokens)
        if depth != 2:
            raise ValueError("decode takes a row of character ids, a sequence of rows, or a batch of sequences")
        for row in token_ids:  # as convert_ids_to_tokens refuses it; a learned alphabet has no character for it
            for i in row:
                self._check_character_id(i)
        words = []
        for row in token_ids:
            if not any(row):
                continue
            if row == self._bos_row or row == self._eos_row:
                if not skip_special_tokens:
                    words.append(self.bos_token if row == self._bos_row else self.eos_token)
                continue
            words.append(self.alphabet.decode_row(row))
        return " ".join(words)

    def batch_decode(self, sequences, skip_special_tokens: bool = False, **kwargs) -> list[str]:
        """One string per sequence of a batch (see `decode`)."""
        sequences = _to_list(sequences)
        if _nesting_depth(sequences) != 3:
            raise ValueError("batch_decode takes a batch of sequences of character-id rows (3 levels of nesting)")
        return [self.decode(sequence, skip_special_tokens) for sequence in sequences]


def word_start_positions(word_ids: list[int | None]) -> list[int]:
    """
    The position where each word of a row starts, from the row's `word_ids()`: a run of positions with one word id is
    one word (so that the two sentences of a pair, each counting its words from 0, stay apart); `None` is no word.
    """
    return [
        position
        for position, word in enumerate(word_ids)
        if word is not None and (position == 0 or word_ids[position - 1] != word)
    ]


def pool_to_words(hidden, word_ids: list[list[int | None]]):
    """
    One vector per word, the mean of its positions: eojeol vectors from the morphemes of `korean_morphemes` (whose
    `word_ids()` give each morpheme's whitespace word), e.g. to label words. With the other pre-tokenizers every word
    is one position, and this only drops the boundaries and the padding.

    Args:
        hidden (`torch.Tensor`): `(..., batch, positions, dim)`: a layer `(batch, positions, dim)`, or the layers
            stacked `(n_layers + 1, batch, positions, dim)`.
        word_ids (`list[list[int | None]]`): each row's `word_ids()`, at most `positions` long.

    Returns:
        `(pooled, word_mask)`: `pooled` `(..., batch, words, dim)` holds each row's words in order (a run of
        positions with one word id is one word, so that the two sentences of a pair stay apart), zeros past a row's
        last word; `word_mask` `(batch, words)` is True at the words.
    """
    import torch

    batch, positions = hidden.shape[-3], hidden.shape[-2]
    if len(word_ids) != batch or any(len(ids) > positions for ids in word_ids):
        raise ValueError(
            f"word_ids must hold a row of at most {positions} positions for each of the {batch} rows of hidden"
        )
    cells, counts = [], []  # (row, word, position) of every position in a word; each row's count of words
    for row, ids in enumerate(word_ids):
        starts = set(word_start_positions(ids))
        word = -1
        for position, word_id in enumerate(ids):
            if word_id is None:
                continue
            word += position in starts
            cells.append((row, word, position))
        counts.append(word + 1)
    words = max(counts, default=0)
    weights = hidden.new_zeros(batch, words, positions)
    if cells:
        row, word, position = torch.tensor(cells, device=hidden.device).unbind(dim=1)
        weights[row, word, position] = 1.0
        weights /= weights.sum(dim=-1, keepdim=True).clamp(min=1)
    word_mask = torch.arange(words, device=hidden.device) < torch.tensor(counts, device=hidden.device)[:, None]
    return weights @ hidden, word_mask


def _refuse_string_labels(data: dict) -> None:
    """
    A one-line `ValueError` for labels that are strings, which the Trainer's collator (`DataCollatorWithPadding`, which
    calls `pad`) would meet as transformers' misleading "excessive nesting" error: `load_dataset("csv", ...)` keeps
    a label column of `1`s and `0`s as strings.
    """
    for key in ("label", "labels", "label_ids"):
        for value in data.get(key, []):
            while isinstance(value, (list, tuple)) and value:  # a token-classification row: its first tag
                value = value[0]
            if isinstance(value, str):
                raise ValueError(
                    f"the features' {key!r} hold strings ({value!r}), where a head needs class ids: cast the column "
                    f'first, e.g. dataset = dataset.cast_column("{key}", ClassLabel(names=[...])) (from datasets)'
                )


def _padding_strategy(padding, pad_to_multiple_of) -> PaddingStrategy:
    """transformers' `padding` argument as its strategy (`True`: "longest"), checked with `pad_to_multiple_of`:
    a one-line `ValueError` for a strategy transformers does not name, or a multiple below 1."""
    if pad_to_multiple_of is not None and (not is_integer(pad_to_multiple_of) or pad_to_multiple_of < 1):
        raise ValueError(f"pad_to_multiple_of must be an integer of at least 1, got {pad_to_multiple_of!r}")
    if padding is True:
        return PaddingStrategy.LONGEST
    return PaddingStrategy.DO_NOT_PAD if padding in (False, None) else PaddingStrategy(padding)


def _truncation_strategy(truncation) -> TruncationStrategy | None:
    """transformers' `truncation` argument as its strategy (`True`: "longest_first"); `None` where not given, which
    `max_length` turns on. A strategy transformers does not name is a one-line `ValueError`."""
    if truncation is None:
        return None
    if truncation is True:
        return TruncationStrategy.LONGEST_FIRST
    return TruncationStrategy.DO_NOT_TRUNCATE if truncation is False else TruncationStrategy(truncation)


def _refuse_unsupported_arguments(unexpected: dict, text, text_target, text_pair_target, padding_side):
    """The arguments of transformers' `__call__` that ELMo's tokenizer has no use for, refused with the reason."""
    if unexpected:
        raise TypeError(f"ElmoTokenizer.__call__ got unexpected arguments: {sorted(unexpected)}")
    if text_target is not None or text_pair_target is not None:
        raise ValueError("ElmoTokenizer has no target side: ELMo is an encoder without a decoder to read targets")
    if padding_side not in (None, "right"):
        raise ValueError("ElmoTokenizer pads on the right only")
    if text is None:
        raise ValueError("ElmoTokenizer needs text to encode")


def _analyser_versions(pre_tokenizer: str, recorded: dict[str, str] | None) -> dict[str, str] | None:
    """
    The versions of the analyser a `korean_morphemes` tokenizer's units were made with (`None` for the other
    pre-tokenizers): `recorded` (a saved tokenizer's), else those installed; a one-line warning, once per process, when
    the installed ones differ. Imports kiwipiepy, so that a folder that needs it fails at load, naming the extra.
    """
    if PRE_TOKENIZERS[pre_tokenizer] is not KoreanMorphemes:
        if recorded is not None:
            raise ValueError(f"analyser_versions go with pre_tokenizer='korean_morphemes', not {pre_tokenizer!r}")
        return None
    installed = installed_versions(recorded)
    if recorded is None:
        return installed
    if recorded != installed:
        logger.warning_once(
            f"this tokenizer's morphemes were made with {_describe(recorded)}; {_describe(installed)} is installed "
            f"and may split some words otherwise: pip install {' '.join(f'{n}=={v}' for n, v in recorded.items())}"
        )
    return dict(recorded)


def _describe(versions: dict[str, str]) -> str:
    """`kiwipiepy 0.24.1, kiwipiepy_model 0.24.0`."""
    return ", ".join(f"{name} {version}" for name, version in versions.items())


def _offset_mapping(example: EncodedExample) -> list[tuple[int, int]]:
    """`(start, end)` of each position's unit in its string (a pre-split unit alone); `(0, 0)` at boundaries."""
    return [
        (0, 0) if unit_id is None else example.sentences[type_id].spans[unit_id]
        for unit_id, type_id in zip(example.unit_ids, example.type_ids)
    ]


def _batch_encoding(data: dict, word_ids: list, batched: bool, return_tensors) -> ElmoBatchEncoding:
    """The batch (or, when the input was one example, the example) as an `ElmoBatchEncoding`."""
    if not batched:
        data = {key: value[0] for key, value in data.items()}
        return ElmoBatchEncoding(data, word_ids=word_ids, tensor_type=return_tensors, prepend_batch_axis=True)
    if return_tensors in ("pt", "np") and len({len(rows) for rows in data["input_ids"]}) == 1:
        # transformers' generic conversion walks the nested lists item by item; numpy reads them ~10x faster.
        data = {key: _int64_tensor(value, return_tensors) for key, value in data.items()}
    return ElmoBatchEncoding(data, word_ids=word_ids, tensor_type=return_tensors)


def _is_batch_of_pairs(text, is_split_into_words: bool) -> bool:
    """Whether `text` is a batch of `(text, pair)` tuples (of strings, or of word lists when pre-split)."""
    if isinstance(text, str) or not isinstance(text, (list, tuple)) or not text:
        return False
    first = text[0]
    if not isinstance(first, tuple) or len(first) != 2:
        return False
    if is_split_into_words:
        return all(isinstance(side, (list, tuple)) for side in first)
    return all(isinstance(side, str) for side in first)


def _nesting_depth(value) -> int:
    """Levels of list nesting of `value` down to its first int (0 for an int)."""
    depth = 0
    while isinstance(value, (list, tuple)):
        if not value:
            return depth + 1
        value, depth = value[0], depth + 1
    return depth


def check_tokenizer(
    tokenizer: "ElmoTokenizer | None",
    model_config: Mapping[str, Any] | Any,
    name: str | os.PathLike,
    files: Iterable[str] | None = None,
) -> None:
    """
    The one check of a tokenizer against the config of its model `name` (`model_config`: an `ElmoConfig`, or the
    dict `config.json` holds): a one-line `ValueError` where they disagree.

    With `files` (the names of the tokenizer files present), before the tokenizer is made: a file the config needs is
    missing: `char_vocab.json` for a learned character vocabulary, `word_input_vocab.json` for a word input, and
    `tokenizer_config.json` (the pre-tokenizer, the characters per token) wherever there is any tokenizer file.
    Without them the tokenizer would give other ids or other units, and the model other vectors, without a word; a
    model with no tokenizer file at all and a byte alphabet takes the default tokenizer.

    With a `tokenizer`: it gives the model other rows than the config reads: another number of characters per token,
    another character vocabulary, word inputs where the config has none or none where it has some, word-input ids
    past the config's table of word inputs, or word-vector ids from a word vocabulary of another size than the word
    vectors' table.
    """
    field = model_config.get if isinstance(model_config, Mapping) else lambda key: getattr(model_config, key, None)
    if files is not None:
        present = set(files)
        needed = [CHAR_VOCAB_FILE] if field("char_vocab_size") is not None else []
        needed += [WORD_INPUT_VOCAB_FILE] if field("word_input_vocab_size") is not None else []
        if needed or present & set(ElmoTokenizer.vocab_files_names.values()):
            needed.append(TOKENIZER_CONFIG_FILE)
        missing = [file for file in needed if file not in present]
        if missing:
            raise ValueError(
                f"{name} lacks {' and '.join(missing)}, which its tokenizer needs (without, the model would read "
                "other ids or units); copy or download the model folder again"
            )
    if tokenizer is None:
        return
    alphabet = CharacterAlphabet.from_config(
        SimpleNamespace(char_vocab_size=field("char_vocab_size"), char_markers=field("char_markers"))
    )
    disagreements = []
    if tokenizer.max_characters_per_token != field("max_characters_per_token"):
        disagreements.append(
            f"max_characters_per_token {tokenizer.max_characters_per_token} (the config's: "
            f"{field('max_characters_per_token')})"
        )
    ours = tokenizer.alphabet
    if (ours.learned, ours.size, ours.markers) != (alphabet.learned, alphabet.size, alphabet.markers):
        disagreements.append(
            f"a character vocabulary of {ours.size} (the config's: {alphabet.size}, or other markers)"
        )
    if (tokenizer.word_input_vocab is None) != (field("word_input_vocab_size") is None):
        disagreements.append("word inputs" if field("word_input_vocab_size") is None else "no word inputs")
    elif tokenizer.word_input_vocab is not None:
        largest, rows = max(tokenizer.word_input_vocab.values()), field("word_input_vocab_size")
        if is_integer(rows) and largest >= rows:  # a config.json read raw is checked when the model loads
            disagreements.append(f"word-input ids up to {largest:,} (the config's word inputs: {rows:,})")
    if tokenizer.word_vector_ids and tokenizer.word_vocab_size != field("word_vector_vocab_size"):
        disagreements.append(
            f"a word vocabulary of {tokenizer.word_vocab_size} words (the word vectors': "
            f"{field('word_vector_vocab_size')})"
        )
    if disagreements:
        raise ValueError(
            f"the tokenizer of {name} disagrees with its config: it has {'; '.join(disagreements)}; copy or download "
            "the model folder again"
        )


def _read_model_config(folder: str) -> dict | None:
    """The ELMo model config (`config.json`) beside a tokenizer's files; None where there is none (a tokenizer saved
    alone) or it is not an ELMo config that can be read, which loading the model itself reports."""
    model_config = json_object_or_none(os.path.join(folder, CONFIG_NAME)) or {}
    return model_config if model_config.get("model_type") == "elmo" else None


def _read_word_input_vocab(path: str) -> dict[str, int]:
    """A word-input vocabulary (JSON object word -> id) with `<oov>` and `<pad>`; anything else is a one-line
    `FileContentError` naming the field."""
    fix = "copy or download the model folder again"
    vocab = JsonFields.of_file(path, fix)
    for word in vocab.data:
        vocab.take(word, int, minimum=0)
    for word in (WORD_INPUT_UNKNOWN, WORD_INPUT_PADDING):
        vocab.take(word, int)
    return vocab.data


def _read_word_vocab(vocab_file: str) -> Tokenizer:
    """Loads a `tokenizers` `WordLevel` JSON and checks it holds the three special words."""
    try:
        tokenizer = Tokenizer.from_file(str(vocab_file))
    except Exception as error:  # tokenizers raises a bare Exception for unreadable files
        raise ValueError(f"{vocab_file} is not a readable tokenizers JSON: {error}") from error
    if type(tokenizer.model).__name__ != "WordLevel":
        raise ValueError(f"{vocab_file} holds a {type(tokenizer.model).__name__} model; a WordLevel one is needed")
    missing = [token for token in (BOS_TOKEN, EOS_TOKEN, UNK_TOKEN) if tokenizer.token_to_id(token) is None]
    if missing:
        raise ValueError(f"the word vocabulary {vocab_file} lacks {missing}")
    return tokenizer


def _int64_tensor(value: list, return_tensors: str):
    """A rectangular nested list of ints as an int64 torch tensor (`"pt"`) or numpy array (`"np"`)."""
    array = np.array(value, dtype=np.int64)
    if return_tensors == "np":
        return array
    import torch

    return torch.from_numpy(array)


def _to_list(value):
    """Tensors and arrays to nested lists; lists unchanged."""
    if hasattr(value, "tolist"):
        return value.tolist()
    return value


__all__ = ["ElmoTokenizer", "ElmoBatchEncoding", "check_tokenizer", "pool_to_words", "word_start_positions"]
