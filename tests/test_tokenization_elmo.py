import numpy as np
import pytest
import torch
from transformers import DataCollatorWithPadding

from hf_elmo import ElmoTokenizer
from hf_elmo.tokenization_elmo import word_to_char_ids


def expected_row(byte_values, width=50):
    """The original mapping written out: BOW, bytes, EOW, padding, then +1."""
    row = [258, *byte_values, 259] + [260] * (width - 2 - len(byte_values))
    return [i + 1 for i in row]


def test_ascii_word():
    assert word_to_char_ids("cat", 50) == expected_row([99, 97, 116])


def test_multibyte_word_is_cut_in_the_middle_of_a_character():
    word = "é" * 30  # 60 UTF-8 bytes; 48 fit, which splits no character, so add one byte in front
    cut = ("a" + word).encode("utf-8")[:48]
    assert cut[-1] == 0xC3  # the cut leaves the first byte of an "é" behind
    assert word_to_char_ids("a" + word, 50) == expected_row(list(cut))


def test_lone_surrogates_vanish():
    assert word_to_char_ids("a\ud800b", 50) == expected_row([97, 98])


def test_other_row_widths():
    expected = expected_row(list(b"abcdefghijklmnopqrstuvwxyzab"), width=30)
    assert word_to_char_ids("abcdefghijklmnopqrstuvwxyzabcdefghij", 30) == expected


def test_boundary_rows_and_their_words():
    tokenizer = ElmoTokenizer()
    encoded = tokenizer([["a"]], is_split_into_words=True)["input_ids"][0]
    bos = [259, 257, 260] + [261] * 47
    eos = [259, 258, 260] + [261] * 47
    assert encoded[0] == bos and encoded[-1] == eos
    assert word_to_char_ids("<S>", 50) == bos and word_to_char_ids("</S>", 50) == eos


def test_batch_shapes_masks_and_word_ids():
    tokenizer = ElmoTokenizer()
    batch = tokenizer([["The", "cat"], ["A", "new york", "b", "c"]], is_split_into_words=True, padding=True,
                      return_tensors="pt")
    assert batch["input_ids"].shape == (2, 6, 50) and batch["input_ids"].dtype == torch.long
    assert batch["attention_mask"].tolist() == [[1, 1, 1, 1, 0, 0], [1] * 6]
    assert batch["input_ids"][0, 4:].eq(0).all()
    assert batch.word_ids(0) == [None, 0, 1, None, None, None]
    assert batch.word_ids(1) == [None, 0, 1, 2, 3, None]
    # a word with a space stays one position
    assert batch["input_ids"][1, 2].tolist() == word_to_char_ids("new york", 50)


def test_raw_strings_are_split_by_the_pre_tokenizer():
    tokenizer = ElmoTokenizer()
    single = tokenizer("The  cat sat.", return_tensors="np")
    assert single["input_ids"].shape == (1, 5, 50) and isinstance(single["input_ids"], np.ndarray)
    assert tokenizer.decode(single["input_ids"][0]) == "<S> The cat sat. </S>"
    punctuation = ElmoTokenizer(pre_tokenizer="bert")
    assert punctuation.split_words("The cat sat.") == ["The", "cat", "sat", "."]


def test_without_special_tokens():
    tokenizer = ElmoTokenizer()
    encoded = tokenizer(["a", "b"], is_split_into_words=True, add_special_tokens=False)
    assert encoded["input_ids"] == [word_to_char_ids("a", 50), word_to_char_ids("b", 50)]
    assert encoded.word_ids() == [0, 1]


def test_truncation_counts_positions():
    tokenizer = ElmoTokenizer()
    encoded = tokenizer([["a", "b", "c", "d", "e"]], is_split_into_words=True, truncation=True, max_length=4)
    assert len(encoded["input_ids"][0]) == 4
    assert encoded.word_ids(0) == [None, 0, 1, None]
    assert encoded["input_ids"][0][-1] == tokenizer._eos_row
    with pytest.raises(ValueError, match="no room"):
        tokenizer([["a"]], is_split_into_words=True, truncation=True, max_length=1)


def test_pairs_get_their_own_boundaries_and_type_ids():
    tokenizer = ElmoTokenizer()
    encoded = tokenizer([["a", "b"]], [["c"]], is_split_into_words=True)
    assert encoded["token_type_ids"][0] == [0, 0, 0, 0, 1, 1, 1]
    assert encoded.word_ids(0) == [None, 0, 1, None, None, 0, None]


def test_pad_to_multiple_and_max_length():
    tokenizer = ElmoTokenizer()
    encoded = tokenizer([["a"], ["a", "b", "c"]], is_split_into_words=True, padding=True, pad_to_multiple_of=4)
    assert [len(rows) for rows in encoded["input_ids"]] == [8, 8]
    encoded = tokenizer([["a"]], is_split_into_words=True, padding="max_length", max_length=6, truncation=False)
    assert len(encoded["input_ids"][0]) == 6 and encoded["attention_mask"][0] == [1, 1, 1, 0, 0, 0]


def test_stock_collator_pads_encoded_features():
    tokenizer = ElmoTokenizer()
    features = [dict(tokenizer(words, is_split_into_words=True), label=label)
                for words, label in ((["a"], 0), (["b", "c", "d"], 1))]
    batch = DataCollatorWithPadding(tokenizer)(features)
    direct = tokenizer([["a"], ["b", "c", "d"]], is_split_into_words=True, padding=True, return_tensors="pt")
    assert torch.equal(batch["input_ids"], direct["input_ids"])
    assert torch.equal(batch["attention_mask"], direct["attention_mask"])
    assert batch["labels"].tolist() == [0, 1]


def test_save_and_load(tmp_path):
    tokenizer = ElmoTokenizer(max_characters_per_token=30, pre_tokenizer="whitespace")
    tokenizer.save_pretrained(tmp_path)
    loaded = ElmoTokenizer.from_pretrained(tmp_path)
    assert (loaded.max_characters_per_token, loaded.pre_tokenizer) == (30, "whitespace")
    text = "Hello, wörld!"
    assert loaded(text)["input_ids"] == tokenizer(text)["input_ids"]


@pytest.mark.parametrize(
    "call, error, message",
    [
        (lambda t: t([], is_split_into_words=True), ValueError, "empty batch"),
        (lambda t: t([]), ValueError, "empty batch"),
        (lambda t: t([["a", 3]], is_split_into_words=True), TypeError, "a word must be a str"),
        (lambda t: t(["a", None], is_split_into_words=True), TypeError, "NoneType"),
        (lambda t: t(42), TypeError, "text must be a str or a list"),
        (lambda t: t("a b", is_split_into_words=True), ValueError, "list of words"),
        (lambda t: t(["a"], padding_side="left"), ValueError, "right only"),
        (lambda t: t(["a"], bogus=True), TypeError, "bogus"),
        (lambda t: t.pad([]), ValueError, "empty"),
    ],
)
def test_bad_input_is_refused(call, error, message):
    with pytest.raises(error, match=message):
        call(ElmoTokenizer())


def test_bad_settings_are_refused():
    with pytest.raises(ValueError, match="right only"):
        ElmoTokenizer(padding_side="left")
    with pytest.raises(ValueError, match="pre_tokenizer"):
        ElmoTokenizer(pre_tokenizer="sentencepiece")


def test_a_missing_path_is_an_error(tmp_path, monkeypatch):
    monkeypatch.setattr("huggingface_hub.constants.HF_HUB_OFFLINE", True)
    with pytest.raises(OSError):  # transformers refuses a path that cannot be a Hub id
        ElmoTokenizer.from_pretrained(str(tmp_path / "does-not-exist"))
    with pytest.raises(OSError, match="outputs/does-not-exist is not a folder, and no ElmoTokenizer files were found"):
        ElmoTokenizer.from_pretrained("outputs/does-not-exist")  # a relative path could also be a Hub id
    ElmoTokenizer(max_characters_per_token=20).save_pretrained(tmp_path / "saved")
    assert ElmoTokenizer.from_pretrained(tmp_path / "saved").max_characters_per_token == 20
    (tmp_path / "no-tokenizer-files").mkdir()  # a folder without tokenizer files gives the default tokenizer
    assert ElmoTokenizer.from_pretrained(tmp_path / "no-tokenizer-files").max_characters_per_token == 50
