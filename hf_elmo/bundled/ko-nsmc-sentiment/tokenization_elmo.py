"""ELMo tokenizer: each word becomes a fixed row of character ids.

The mapping is the one the released weights were trained with (bilm-tf's `UnicodeCharsVocabulary`, AllenNLP's
`ELMoCharacterMapper`): a word's UTF-8 bytes, cut to `max_characters_per_token - 2` bytes, wrapped in begin- and
end-of-word markers and padded; every id is then shifted by one so that an all-zero row means "no word here".
"""

import os
from collections.abc import Sequence

import numpy as np
from tokenizers import Tokenizer, pre_tokenizers
from transformers import BatchEncoding, PreTrainedTokenizerBase

BEGIN_OF_SENTENCE_CHAR = 256
END_OF_SENTENCE_CHAR = 257
BEGIN_OF_WORD_CHAR = 258
END_OF_WORD_CHAR = 259
PADDING_CHAR = 260

BOS_TOKEN = "<S>"
EOS_TOKEN = "</S>"
UNK_TOKEN = "<UNK>"
WORD_VOCAB_FILE = "word_vocab.json"

PRE_TOKENIZERS = {
    "whitespace_split": pre_tokenizers.WhitespaceSplit,
    "whitespace": pre_tokenizers.Whitespace,
    "bert": pre_tokenizers.BertPreTokenizer,
}


def word_to_char_ids(word: str, max_characters_per_token: int) -> list[int]:
    """
    The shifted character ids of one word, a list of `max_characters_per_token` ints in [1, 261]. The words `<S>`
    and `</S>` are the sentence boundaries, as in the original vocabulary.
    """
    if not isinstance(word, str):
        raise TypeError(f"a word must be a str, got {type(word).__name__}: {word!r}")
    if word in (BOS_TOKEN, EOS_TOKEN):
        marker = BEGIN_OF_SENTENCE_CHAR if word == BOS_TOKEN else END_OF_SENTENCE_CHAR
        return boundary_char_ids(marker, max_characters_per_token)
    encoded = word.encode("utf-8", "ignore")[: max_characters_per_token - 2]
    ids = [BEGIN_OF_WORD_CHAR, *encoded, END_OF_WORD_CHAR]
    ids += [PADDING_CHAR] * (max_characters_per_token - len(ids))
    return [i + 1 for i in ids]


def boundary_char_ids(marker: int, max_characters_per_token: int) -> list[int]:
    """The shifted character ids of the `<S>` (marker 256) or `</S>` (257) row."""
    ids = [BEGIN_OF_WORD_CHAR, marker, END_OF_WORD_CHAR] + [PADDING_CHAR] * (max_characters_per_token - 3)
    return [i + 1 for i in ids]


class ElmoBatchEncoding(BatchEncoding):
    """A `BatchEncoding` that also knows which word each position holds."""

    def __init__(self, data=None, word_ids=None, tensor_type=None, prepend_batch_axis=False):
        super().__init__(data, tensor_type=tensor_type, prepend_batch_axis=prepend_batch_axis)
        self._word_ids = word_ids

    def word_ids(self, batch_index: int = 0) -> list[int | None]:
        """Word index of each position of sequence `batch_index`; `None` for `<S>`, `</S>` and padding."""
        if self._word_ids is None:
            raise ValueError("word_ids() is only available on the output of the tokenizer's __call__")
        return self._word_ids[batch_index]


class ElmoTokenizer(PreTrainedTokenizerBase):
    r"""
    Turns sentences into rows of character ids, one row per word, with `<S>` and `</S>` rows around each sentence.

    `input_ids` has shape `(batch, positions, max_characters_per_token)` and `attention_mask` `(batch, positions)`.
    A word given in a pre-split list is always one position, whatever characters it holds.

    Args:
        max_characters_per_token (`int`): length of each character row (50 for the released models).
        pre_tokenizer (`str`): how raw strings are split into words, one of `"whitespace_split"` (split on
            whitespace only, the default: the released models read whitespace-tokenised text), `"whitespace"`
            (`\w+|[^\w\s]+`) or `"bert"` (whitespace and punctuation).
        vocab_file (`str`, *optional*): a `tokenizers` `WordLevel` tokenizer JSON holding the word vocabulary of a
            language model (with `<S>`, `</S>` and `<UNK>`); it lets `__call__(..., return_word_labels=True)` give
            the word id of every position as `labels`. Saved and loaded with the tokenizer.
    """

    model_input_names = ["input_ids", "attention_mask"]
    vocab_files_names = {"vocab_file": WORD_VOCAB_FILE}

    def __init__(
        self,
        max_characters_per_token: int = 50,
        pre_tokenizer: str = "whitespace_split",
        vocab_file: str | None = None,
        **kwargs,
    ):
        if max_characters_per_token < 3:
            raise ValueError(f"max_characters_per_token must be at least 3, got {max_characters_per_token}")
        if pre_tokenizer not in PRE_TOKENIZERS:
            raise ValueError(f"pre_tokenizer must be one of {sorted(PRE_TOKENIZERS)}, got {pre_tokenizer!r}")
        if kwargs.get("padding_side", "right") != "right":
            raise ValueError("ElmoTokenizer pads on the right only: the backward LSTM reads each row from its end")
        kwargs.setdefault("bos_token", BOS_TOKEN)
        kwargs.setdefault("eos_token", EOS_TOKEN)
        self.max_characters_per_token = max_characters_per_token
        self.pre_tokenizer = pre_tokenizer
        self._splitter = PRE_TOKENIZERS[pre_tokenizer]()
        self._bos_row = boundary_char_ids(BEGIN_OF_SENTENCE_CHAR, max_characters_per_token)
        self._eos_row = boundary_char_ids(END_OF_SENTENCE_CHAR, max_characters_per_token)
        self._pad_row = [0] * max_characters_per_token
        self._row_cache: dict[str, list[int]] = {}
        self.word_tokenizer = None if vocab_file is None else _read_word_vocab(vocab_file)
        self._word_to_id = None if vocab_file is None else self.word_tokenizer.get_vocab()
        super().__init__(max_characters_per_token=max_characters_per_token, pre_tokenizer=pre_tokenizer, **kwargs)

    # -- the vocabulary is the fixed byte alphabet: nothing to save or add ------------------------------------------

    @property
    def vocab_size(self) -> int:
        return 262

    def get_vocab(self) -> dict[str, int]:
        return {}

    @property
    def added_tokens_decoder(self) -> dict:
        return {}

    def convert_tokens_to_ids(self, tokens: str | list[str]) -> None | list[None]:
        """There are no token ids (a word is a row of character ids): every token maps to `None`."""
        return None if isinstance(tokens, str) else [None] * len(tokens)

    def save_vocabulary(self, save_directory: str, filename_prefix: str | None = None) -> tuple[str, ...]:
        """Writes the word vocabulary (if any) as a `tokenizers` JSON; the character alphabet needs no file."""
        if self.word_tokenizer is None:
            return ()
        path = os.path.join(save_directory, (filename_prefix + "-" if filename_prefix else "") + WORD_VOCAB_FILE)
        self.word_tokenizer.save(path)
        return (path,)

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
        """Splits a raw string into words with the configured `tokenizers` pre-tokenizer."""
        if not isinstance(text, str):
            raise TypeError(f"text must be a str, got {type(text).__name__}")
        return [word for word, _ in self._splitter.pre_tokenize_str(text)]

    def word_to_row(self, word: str) -> list[int]:
        """The character-id row of one word (cached)."""
        row = self._row_cache.get(word)
        if row is None:
            row = word_to_char_ids(word, self.max_characters_per_token)
            if len(self._row_cache) < 1_000_000:
                self._row_cache[word] = row
        return row

    def __call__(
        self,
        text=None,
        text_pair=None,
        is_split_into_words: bool = False,
        add_special_tokens: bool = True,
        padding=False,
        truncation=None,
        max_length: int | None = None,
        pad_to_multiple_of: int | None = None,
        return_tensors=None,
        return_attention_mask: bool | None = None,
        return_token_type_ids: bool | None = None,
        return_length: bool = False,
        return_word_labels: bool = False,
        **kwargs,
    ) -> ElmoBatchEncoding:
        """
        Encodes one sentence or a batch.

        `text` is a string, a list of strings, or, with `is_split_into_words=True`, a list of words or a list of
        such lists. `text_pair`, of the same form, gives second sentences (e.g. for NLI): each is encoded after the
        first as its own `<S> ... </S>` and marked by `token_type_ids` 1. With `return_word_labels=True` (needs a
        word vocabulary), `labels` holds the word id of every position, `<S>` and `</S>` included, -100 at padding:
        the targets of [`ElmoForPreTraining`].
        """
        unknown = set(kwargs) - {"verbose", "return_special_tokens_mask", "return_offsets_mapping",
                                 "return_overflowing_tokens", "stride", "padding_side"}
        if unknown:
            raise TypeError(f"ElmoTokenizer.__call__ got unexpected arguments: {sorted(unknown)}")
        if kwargs.get("padding_side", "right") != "right":
            raise ValueError("ElmoTokenizer pads on the right only")
        batched, firsts = self._as_batch_of_words(text, is_split_into_words, "text")
        seconds = None
        if text_pair is not None:
            pair_batched, seconds = self._as_batch_of_words(text_pair, is_split_into_words, "text_pair")
            if pair_batched != batched or len(seconds) != len(firsts):
                raise ValueError("text and text_pair must both be single sentences or batches of the same size")
        if max_length is not None and truncation is None:
            truncation = True
        limit = (max_length or self.model_max_length) if truncation not in (None, False, "do_not_truncate") else None

        if return_word_labels and self._word_to_id is None:
            raise ValueError("return_word_labels=True needs a word vocabulary: create the tokenizer with vocab_file=")
        rows_batch, word_ids_batch, type_ids_batch, labels_batch = [], [], [], []
        for i, words in enumerate(firsts):
            pair = seconds[i] if seconds is not None else None
            rows, word_ids, type_ids = self._encode_one(words, pair, add_special_tokens, limit)
            rows_batch.append(rows)
            word_ids_batch.append(word_ids)
            type_ids_batch.append(type_ids)
            if return_word_labels:
                labels_batch.append(self._word_labels(words, pair, rows, word_ids, type_ids))

        data = {"input_ids": rows_batch}
        if return_attention_mask is not False:
            data["attention_mask"] = [[1] * len(rows) for rows in rows_batch]
        if return_token_type_ids or (return_token_type_ids is None and seconds is not None):
            data["token_type_ids"] = type_ids_batch
        if return_length:
            data["length"] = [len(rows) for rows in rows_batch]
        if padding not in (False, None, "do_not_pad"):
            target = max_length if padding == "max_length" else None
            data = self._pad_lists(data, target, pad_to_multiple_of)
            word_ids_batch = [ids + [None] * (len(data["input_ids"][0]) - len(ids)) for ids in word_ids_batch]
            labels_batch = [ids + [-100] * (len(data["input_ids"][0]) - len(ids)) for ids in labels_batch]
        if return_word_labels:
            data["labels"] = labels_batch
        if not batched:
            data = {key: value[0] for key, value in data.items()}
            return ElmoBatchEncoding(data, word_ids=word_ids_batch, tensor_type=return_tensors, prepend_batch_axis=True)
        if return_tensors in ("pt", "np") and len({len(rows) for rows in data["input_ids"]}) == 1:
            # transformers' generic conversion walks the nested lists item by item; numpy reads them ~10x faster.
            data = {key: _int64_tensor(value, return_tensors) for key, value in data.items()}
        return ElmoBatchEncoding(data, word_ids=word_ids_batch, tensor_type=return_tensors)

    def _as_batch_of_words(self, text, is_split_into_words: bool, name: str) -> tuple[bool, list[list[str]]]:
        """Normalises the accepted input forms to `(was_batched, list of word lists)`."""
        if isinstance(text, str):
            if is_split_into_words:
                raise ValueError(f"{name} is a str but is_split_into_words=True: pass a list of words")
            return False, [self.split_words(text)]
        if not isinstance(text, Sequence) or isinstance(text, bytes):
            raise TypeError(f"{name} must be a str or a list, got {type(text).__name__}")
        if len(text) == 0:
            raise ValueError("cannot encode an empty batch")
        if not is_split_into_words:
            return True, [self.split_words(t) for t in text]
        batched = any(isinstance(t, Sequence) and not isinstance(t, str) for t in text)
        sentences = text if batched else [text]
        for sentence in sentences:
            if isinstance(sentence, str) or not isinstance(sentence, Sequence):
                raise TypeError(f"with is_split_into_words=True, {name} must be a list of words or a list of "
                                f"lists of words; got an element of type {type(sentence).__name__}")
            for word in sentence:
                if not isinstance(word, str):
                    raise TypeError(f"a word must be a str, got {type(word).__name__}: {word!r}")
        return batched, [list(sentence) for sentence in sentences]

    def _encode_one(self, words, pair, add_special_tokens, limit):
        """Rows, word ids and token type ids of one (possibly paired) example, truncated to `limit` positions."""
        n_special = (2 if add_special_tokens else 0) * (1 if pair is None else 2)
        if limit is not None:
            room = limit - n_special
            if room < 0:
                raise ValueError(f"max_length={limit} leaves no room for the {n_special} boundary positions")
            if pair is None:
                words = words[:room]
            else:
                words, pair = list(words), list(pair)
                while len(words) + len(pair) > room:
                    (words if len(words) >= len(pair) else pair).pop()
        rows, word_ids, type_ids = [], [], []
        for type_id, sentence in enumerate([words] if pair is None else [words, pair]):
            if add_special_tokens:
                rows.append(self._bos_row)
                word_ids.append(None)
            rows.extend(self.word_to_row(word) for word in sentence)
            word_ids.extend(range(len(sentence)))
            if add_special_tokens:
                rows.append(self._eos_row)
                word_ids.append(None)
            type_ids.extend([type_id] * (len(rows) - len(type_ids)))
        return rows, word_ids, type_ids

    def _word_labels(self, words, pair, rows, word_ids, type_ids) -> list[int]:
        """The word-vocabulary id of every position of one encoded example."""
        bos_id, eos_id = self.word_to_id(BOS_TOKEN), self.word_to_id(EOS_TOKEN)
        labels = []
        for row, word_id, type_id in zip(rows, word_ids, type_ids):
            if word_id is None:
                labels.append(bos_id if row is self._bos_row else eos_id)
            else:
                labels.append(self.word_to_id((words if type_id == 0 else pair)[word_id]))
        return labels

    # -- padding ----------------------------------------------------------------------------------------------------

    def _pad_lists(self, data: dict, max_length: int | None, pad_to_multiple_of: int | None) -> dict:
        """Pads every per-position list of a batch on the right to a common length."""
        longest = max(len(rows) for rows in data["input_ids"])
        target = max(longest, max_length or 0)
        if pad_to_multiple_of:
            target = -(-target // pad_to_multiple_of) * pad_to_multiple_of
        pad_values = {"input_ids": self._pad_row, "attention_mask": 0, "token_type_ids": 0,
                      "special_tokens_mask": 1}
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
        `input_ids`, `attention_mask`, `token_type_ids` and `special_tokens_mask` are passed through unchanged.
        """
        if padding_side not in (None, "right"):
            raise ValueError("ElmoTokenizer pads on the right only")
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
        if return_attention_mask is not False and "attention_mask" not in data:
            data["attention_mask"] = [[1] * len(rows) for rows in data["input_ids"]]
        if padding not in (False, None, "do_not_pad"):
            data = self._pad_lists(data, max_length if padding == "max_length" else None, pad_to_multiple_of)
        return ElmoBatchEncoding(data, tensor_type=return_tensors)

    # -- decoding (words are not recoverable beyond their first bytes, but rows decode faithfully) -------------------

    def decode(self, token_ids, skip_special_tokens: bool = False, **kwargs) -> str:
        """Joins the decoded words of one sequence of character rows with spaces."""
        words = []
        for row in _to_list(token_ids):
            if not any(row):
                continue
            if row == self._bos_row or row == self._eos_row:
                if not skip_special_tokens:
                    words.append(BOS_TOKEN if row == self._bos_row else EOS_TOKEN)
                continue
            data = bytes(i - 1 for i in row if 1 <= i <= 256)
            words.append(data.decode("utf-8", "replace"))
        return " ".join(words)


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


__all__ = ["ElmoTokenizer", "ElmoBatchEncoding", "word_to_char_ids"]
