import itertools
import json
import shutil
import types

import numpy as np
import pytest
import torch
from transformers import AutoTokenizer, DataCollatorWithPadding, pipeline
from utils import require, tiny_config, word_vocab_tokenizer

from hf_elmo import ElmoTokenizer, bundled_model_path
from hf_elmo.tokenization_elmo import check_tokenizer, word_start_positions


def expected_row(byte_values, width=50):
    """The original mapping written out: BOW, bytes, EOW, padding, then +1."""
    row = [258, *byte_values, 259] + [260] * (width - 2 - len(byte_values))
    return [i + 1 for i in row]


def test_ascii_word():
    assert ElmoTokenizer(50).word_to_row("cat") == expected_row([99, 97, 116])


def test_multibyte_word_is_cut_in_the_middle_of_a_character():
    word = "é" * 30  # 60 UTF-8 bytes; 48 fit, which splits no character, so add one byte in front
    cut = ("a" + word).encode("utf-8")[:48]
    assert cut[-1] == 0xC3  # the cut leaves the first byte of an "é" behind
    assert ElmoTokenizer(50).word_to_row("a" + word) == expected_row(list(cut))


def test_lone_surrogates_vanish():
    assert ElmoTokenizer(50).word_to_row("a\ud800b") == expected_row([97, 98])


def test_other_row_widths():
    expected = expected_row(list(b"abcdefghijklmnopqrstuvwxyzab"), width=30)
    assert ElmoTokenizer(30).word_to_row("abcdefghijklmnopqrstuvwxyzabcdefghij") == expected


def test_boundary_rows_and_their_words():
    tokenizer = ElmoTokenizer()
    encoded = tokenizer([["a"]], is_split_into_words=True)["input_ids"][0]
    bos = [259, 257, 260] + [261] * 47
    eos = [259, 258, 260] + [261] * 47
    assert encoded[0] == bos and encoded[-1] == eos
    assert ElmoTokenizer(50).word_to_row("<S>") == bos and ElmoTokenizer(50).word_to_row("</S>") == eos


def test_batch_shapes_masks_and_word_ids():
    tokenizer = ElmoTokenizer()
    batch = tokenizer(
        [["The", "cat"], ["A", "new york", "b", "c"]], is_split_into_words=True, padding=True, return_tensors="pt"
    )
    assert batch["input_ids"].shape == (2, 6, 50) and batch["input_ids"].dtype == torch.long
    assert batch["attention_mask"].tolist() == [[1, 1, 1, 1, 0, 0], [1] * 6]
    assert batch["input_ids"][0, 4:].eq(0).all()
    assert batch.word_ids(0) == [None, 0, 1, None, None, None]
    assert batch.word_ids(1) == [None, 0, 1, 2, 3, None]
    # a word with a space stays one position
    assert batch["input_ids"][1, 2].tolist() == ElmoTokenizer(50).word_to_row("new york")


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
    assert encoded["input_ids"] == [ElmoTokenizer(50).word_to_row("a"), ElmoTokenizer(50).word_to_row("b")]
    assert encoded.word_ids() == [0, 1]


def test_truncation_counts_positions():
    tokenizer = ElmoTokenizer()
    encoded = tokenizer([["a", "b", "c", "d", "e"]], is_split_into_words=True, truncation=True, max_length=4)
    assert len(encoded["input_ids"][0]) == 4
    assert encoded.word_ids(0) == [None, 0, 1, None]
    assert encoded["input_ids"][0][-1] == tokenizer._eos_row
    for too_few in (1, 0):  # 0 is a length, not "no limit"
        with pytest.raises(ValueError, match=f"^max_length={too_few} leaves no room for the 2 boundary positions$"):
            tokenizer([["a"]], is_split_into_words=True, truncation=True, max_length=too_few)


def test_truncation_of_pairs_keeps_what_transformers_keeps():
    """Each sentence of a pair keeps as many units as transformers' own truncation keeps of it (its
    `truncate_sequences`, run here on lists of that length), for "longest_first" and "only_second", odd and even
    lengths, ties among them; `max_length` alone truncates as "longest_first", and without it `model_max_length`
    bounds an example."""
    from transformers.tokenization_python import PreTrainedTokenizer
    from transformers.utils import logging

    tokenizer = ElmoTokenizer()
    right = types.SimpleNamespace(truncation_side="right")
    verbosity = logging.get_verbosity()
    logging.set_verbosity_error()  # transformers warns on every pair truncated "longest_first"
    try:
        for first_length, second_length, max_length in itertools.product(range(1, 7), range(1, 7), range(6, 14)):
            first, second = [f"a{i}" for i in range(first_length)], [f"b{i}" for i in range(second_length)]
            remove = first_length + second_length + 4 - max_length
            for strategy in ("longest_first", "only_second"):
                if strategy == "only_second" and remove >= second_length:
                    continue  # no room for the second sentence: refused here, left whole by transformers
                kept = PreTrainedTokenizer.truncate_sequences(right, first, second, remove, strategy)[:2]
                truncation = True if strategy == "longest_first" else strategy
                encoded = tokenizer(
                    [first], [second], is_split_into_words=True, truncation=truncation, max_length=max_length
                )
                types_of = encoded["token_type_ids"][0]
                assert [types_of.count(0) - 2, types_of.count(1) - 2] == [len(kept[0]), len(kept[1])], (
                    first_length,
                    second_length,
                    max_length,
                    strategy,
                )
    finally:
        logging.set_verbosity(verbosity)
    assert len(tokenizer([["a"] * 9], is_split_into_words=True, max_length=5)["input_ids"][0]) == 5
    bounded = ElmoTokenizer(model_max_length=6)
    assert len(bounded([["a"] * 9], is_split_into_words=True, truncation=True)["input_ids"][0]) == 6
    assert len(bounded([["a"] * 9], is_split_into_words=True, truncation=False)["input_ids"][0]) == 11


@pytest.mark.parametrize(
    "arguments, message",
    [
        ({"padding": "longer"}, "longer is not a valid PaddingStrategy"),
        ({"padding": True, "pad_to_multiple_of": 0}, "^pad_to_multiple_of must be an integer of at least 1, got 0$"),
        ({"padding": True, "pad_to_multiple_of": -8}, "got -8$"),
        ({"padding": True, "pad_to_multiple_of": True}, "got True$"),
        ({"truncation": "only_last", "max_length": 4}, "only_last is not a valid TruncationStrategy"),
    ],
)
def test_a_padding_or_truncation_transformers_does_not_name_is_refused(arguments, message):
    """What transformers' tokenizers refuse, this one refuses too, in `__call__` and in `pad`; it used to pad to the
    longest row for any padding string and to ignore a multiple below 1."""
    tokenizer = ElmoTokenizer()
    with pytest.raises(ValueError, match=message):
        tokenizer([["a"], ["a", "b"]], is_split_into_words=True, **arguments)
    if "truncation" not in arguments:
        features = [tokenizer(["a"], is_split_into_words=True), tokenizer(["a", "b"], is_split_into_words=True)]
        with pytest.raises(ValueError, match=message):
            tokenizer.pad(features, **arguments)


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
    features = [
        dict(tokenizer(words, is_split_into_words=True), label=label)
        for words, label in ((["a"], 0), (["b", "c", "d"], 1))
    ]
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


def test_a_loaded_tokenizer_saves_its_settings_not_how_it_was_loaded(tmp_path):
    """transformers puts `is_local` and `local_files_only` in `init_kwargs`, which `save_pretrained` writes; a folder
    saved with them before still loads, and saving it again leaves them out."""
    ElmoTokenizer(max_characters_per_token=30).save_pretrained(tmp_path / "first")
    ElmoTokenizer.from_pretrained(tmp_path / "first").save_pretrained(tmp_path / "again")
    saved = json.loads((tmp_path / "again" / "tokenizer_config.json").read_text())
    assert saved["max_characters_per_token"] == 30 and not {"is_local", "local_files_only"} & set(saved)
    (tmp_path / "again" / "tokenizer_config.json").write_text(
        json.dumps({**saved, "is_local": True, "local_files_only": False})
    )
    loaded = ElmoTokenizer.from_pretrained(tmp_path / "again")
    assert loaded.max_characters_per_token == 30
    loaded.save_pretrained(tmp_path / "third")
    resaved = json.loads((tmp_path / "third" / "tokenizer_config.json").read_text())
    assert resaved == saved


def test_convert_ids_to_tokens_takes_tensors_and_arrays_as_lists():
    """As transformers' tokenizers take a tensor: a row of `input_ids` `(positions, characters)` gives each
    position's symbols, as the nested list does; a 0-d tensor gives one symbol."""
    tokenizer = ElmoTokenizer(max_characters_per_token=6)
    rows = tokenizer(["ab c"], return_tensors="pt")["input_ids"][0]
    as_lists = tokenizer.convert_ids_to_tokens(rows.tolist())
    assert as_lists[1] == ["<bow>", "a", "b", "<eow>", "<pad>", "<pad>"]
    assert tokenizer.convert_ids_to_tokens(rows) == as_lists == tokenizer.convert_ids_to_tokens(rows.numpy())
    assert tokenizer.convert_ids_to_tokens(rows[1]) == as_lists[1]
    assert tokenizer.convert_ids_to_tokens(rows[1, 1]) == "a"
    assert tokenizer.convert_ids_to_tokens(rows, skip_special_tokens=True) == [[], ["a", "b"], ["c"], []]


@pytest.mark.parametrize(
    "call, error, message",
    [
        (lambda t: t([]), ValueError, "^cannot encode an empty batch$"),
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


# -- the transformers tokenizer contract (as ByT5 and CANINE keep it for characters) ----------------------------------


def test_encode_is_the_input_ids_of_one_sentence():
    tokenizer = ElmoTokenizer()
    assert tokenizer.encode("The cat") == tokenizer("The cat")["input_ids"]
    assert tokenizer.encode(["a", "b"], is_split_into_words=True, add_special_tokens=False) == [
        ElmoTokenizer(50).word_to_row("a"),
        ElmoTokenizer(50).word_to_row("b"),
    ]
    with pytest.raises(TypeError, match="use __call__ for batches"):
        tokenizer.encode(["a b", "c"])


def test_tokenize_gives_the_words_of_the_positions():
    tokenizer = ElmoTokenizer(pre_tokenizer="whitespace")
    assert tokenizer.tokenize("The cat, sat") == ["The", "cat", ",", "sat"]
    assert tokenizer.tokenize("a b", "c", add_special_tokens=True) == ["<S>", "a", "b", "</S>", "<S>", "c", "</S>"]
    assert len(tokenizer.tokenize("a b", "c", add_special_tokens=True)) == len(tokenizer.encode("a b", "c"))


def test_decode_and_batch_decode():
    tokenizer = ElmoTokenizer()
    batch = tokenizer(["The cat sat .", "Dogs"], padding=True)["input_ids"]
    assert tokenizer.batch_decode(batch) == ["<S> The cat sat . </S>", "<S> Dogs </S>"]
    assert tokenizer.batch_decode(torch.tensor(batch), skip_special_tokens=True) == ["The cat sat .", "Dogs"]
    assert tokenizer.decode(batch) == tokenizer.batch_decode(batch)  # decode takes batches, as in transformers 5
    assert tokenizer.decode(batch[1][1]) == "Dogs"  # a single row is one word
    with pytest.raises(ValueError, match="3 levels"):
        tokenizer.batch_decode(batch[0])


def test_vocabulary_is_the_characters():
    tokenizer = ElmoTokenizer()
    vocab = tokenizer.get_vocab()
    assert len(tokenizer) == tokenizer.vocab_size == len(vocab) == 262
    assert vocab["a"] == tokenizer.convert_tokens_to_ids("a") == ord("a") + 1 == ElmoTokenizer(50).word_to_row("a")[1]
    assert tokenizer.convert_tokens_to_ids(["<bow>", "<eow>"]) == [259, 260]
    assert tokenizer.convert_tokens_to_ids(["<S>", "</S>"]) == [257, 258] == tokenizer.all_special_ids
    # A boundary is a row, not one id: nothing for the Trainer to copy into the model config.
    assert tokenizer.bos_token_id is None and tokenizer.eos_token_id is None
    assert tokenizer.convert_ids_to_tokens(ord("a") + 1) == "a"
    assert tokenizer.convert_ids_to_tokens([259, 98, 260], skip_special_tokens=True) == ["a"]
    assert sorted(vocab.values()) == list(range(262))
    with pytest.raises(ValueError, match="not one byte"):
        tokenizer.convert_tokens_to_ids("cat")


def test_batch_of_pairs_as_tuples():
    tokenizer = ElmoTokenizer()
    tuples = tokenizer([("a b", "c"), ("d", "e f g")], padding=True)
    explicit = tokenizer(["a b", "d"], text_pair=["c", "e f g"], padding=True)
    assert tuples["input_ids"] == explicit["input_ids"] and tuples["token_type_ids"] == explicit["token_type_ids"]
    split = tokenizer([(["a", "b"], ["c"])], is_split_into_words=True)
    assert split["input_ids"] == [tokenizer("a b", text_pair="c")["input_ids"]]
    assert split.word_ids(0) == [None, 0, 1, None, None, 0, None]


def test_standard_keywords():
    tokenizer = ElmoTokenizer()
    encoded = tokenizer("The  <S> cat", return_special_tokens_mask=True, return_offsets_mapping=True)
    assert encoded["special_tokens_mask"] == [1, 0, 0, 0, 1]
    assert encoded["offset_mapping"] == [(0, 0), (0, 3), (5, 8), (9, 12), (0, 0)]
    assert encoded["input_ids"][2] == ElmoTokenizer(50).word_to_row("<S>")  # the word <S> is a boundary row ...
    split = tokenizer("The <S>", split_special_tokens=True)["input_ids"][2]
    assert split[1:4] == [ord("<") + 1, ord("S") + 1, ord(">") + 1]  # ... unless special tokens are split
    with pytest.raises(ValueError, match="no target side"):
        tokenizer("a", text_target="b")
    with pytest.raises(ValueError, match="overflowing"):
        tokenizer("a b c", max_length=3, truncation=True, return_overflowing_tokens=True)
    assert tokenizer.num_special_tokens_to_add() == 2 and tokenizer.num_special_tokens_to_add(pair=True) == 4


def test_only_second_truncation_trims_the_context_alone():
    tokenizer = ElmoTokenizer(20)
    question, context = "who sat on it ?", "the cat sat on the mat all day"
    trimmed = tokenizer(question, context, truncation="only_second", max_length=12)
    assert trimmed.word_ids() == [None, 0, 1, 2, 3, 4, None, None, 0, 1, 2, None]  # the question whole
    longest_first = tokenizer(question, context, truncation=True, max_length=12)
    assert longest_first.word_ids() != trimmed.word_ids()  # the default trims the longer sentence
    with pytest.raises(ValueError, match="no room for the second sentence"):
        tokenizer(question, context, truncation="only_second", max_length=9)
    # "only_first" is its mirror: the first sentence trimmed, the second whole.
    trimmed = tokenizer(context, question, truncation="only_first", max_length=12)
    assert trimmed.word_ids() == [None, 0, 1, 2, None, None, 0, 1, 2, 3, 4, None]  # the question whole
    with pytest.raises(ValueError, match="no room for the first sentence beside the second"):
        tokenizer(context, question, truncation="only_first", max_length=9)


def test_overflowing_windows_cover_the_context_with_the_stride():
    """Each window holds the whole question and the next units of the context, `stride` units shared."""
    tokenizer = ElmoTokenizer(20)
    context = " ".join(f"w{index}" for index in range(11))
    encoding = tokenizer(
        ["q1 q2", "only"],
        [context, "short context"],
        truncation="only_second",
        max_length=10,
        stride=2,
        return_overflowing_tokens=True,
        return_offsets_mapping=True,
        padding=True,
    )
    # 10 positions - 4 marks - 2 question units: 4 context units a window, 2 new ones each after the first.
    assert encoding["overflow_to_sample_mapping"] == [0, 0, 0, 0, 0, 1]
    windows = [[word for word in encoding.word_ids(row)[5:] if word is not None] for row in range(5)]
    assert windows == [[0, 1, 2, 3], [2, 3, 4, 5], [4, 5, 6, 7], [6, 7, 8, 9], [8, 9, 10]]
    last = [word for word in encoding.word_ids(5)[4:] if word is not None]
    assert last == [0, 1]  # the second pair fits in one window
    for row in range(5):
        for position, word in enumerate(encoding.word_ids(row)):
            if word is not None and encoding["token_type_ids"][row][position] == 1:
                start, end = encoding["offset_mapping"][row][position]
                assert context[start:end] == f"w{word}"  # offsets in the whole context
    with pytest.raises(ValueError, match="stride"):
        tokenizer("q", context, truncation="only_second", max_length=8, stride=3, return_overflowing_tokens=True)


def learned_tokenizer(tmp_path):
    """A learned alphabet with a word-input vocabulary, as converted from ELMoForManyLangs."""
    from hf_elmo.alphabet_elmo import learn_character_vocabulary

    learn_character_vocabulary(["한국어 abc"]).save(tmp_path / "chars.json")
    words = {"<oov>": 0, "<bos>": 1, "<eos>": 2, "<pad>": 3, "한국어": 4, "abc": 5}
    (tmp_path / "words.json").write_text(json.dumps(words, ensure_ascii=False), encoding="utf-8")
    return ElmoTokenizer(
        max_characters_per_token=5,
        char_vocab_file=str(tmp_path / "chars.json"),
        word_input_vocab_file=str(tmp_path / "words.json"),
    )


def test_learned_alphabet_with_word_inputs(tmp_path):
    tokenizer = learned_tokenizer(tmp_path)
    assert tokenizer.model_input_names == ["input_ids", "attention_mask", "word_input_ids"]
    assert (tokenizer.bos_token, tokenizer.eos_token) == ("<bos>", "<eos>")
    batch = tokenizer([["한국어", "abcd", "x"], ["abc"]], is_split_into_words=True, padding=True)
    assert batch["word_input_ids"] == [[1, 4, 5, 0, 2], [1, 5, 2, 3, 3]]  # "abcd" is cut to "abc"; padding <pad>
    assert tokenizer.batch_decode(batch["input_ids"], skip_special_tokens=True) == ["한국어 abc \ufffd", "abc"]
    assert len(tokenizer) == len(tokenizer.get_vocab()) == tokenizer.alphabet.size + 1
    assert tokenizer.convert_tokens_to_ids("?") == tokenizer.alphabet.markers["unknown"] + 1


@pytest.mark.parametrize("rows", [6, 5])
def test_word_input_ids_past_the_configs_table_are_refused(tmp_path, rows):
    """Word-input ids up to 5 need a table of 6 word inputs: with 5 the embedding would be indexed past its end."""
    tokenizer = learned_tokenizer(tmp_path)
    config = dict(
        max_characters_per_token=5,
        **tokenizer.alphabet.config_fields(),
        word_input_vocab_size=rows,
    )
    if rows == 6:
        check_tokenizer(tokenizer, config, "words")
        return
    with pytest.raises(ValueError) as raised:
        check_tokenizer(tokenizer, config, "words")
    assert str(raised.value) == (
        "the tokenizer of words disagrees with its config: it has word-input ids up to 5 (the config's word inputs: "
        "5); copy or download the model folder again"
    )


@pytest.mark.parametrize(
    "words, field",
    [
        ([1], "the file is a list of 1 item, not an object"),
        ({"<oov>": 0, "<pad>": 1, "a": -2}, "a is the number -2, not an integer of at least 0"),
        ({"<oov>": 0, "<pad>": 1, "a": "2"}, 'a is the string "2", not an integer'),
        ({"<oov>": 0, "a": 1}, '"<pad>" is missing'),
    ],
)
def test_a_word_input_vocabulary_of_another_shape_is_one_line_naming_the_field(tmp_path, words, field):
    learned_tokenizer(tmp_path)  # writes chars.json and words.json, the latter replaced here
    (tmp_path / "words.json").write_text(json.dumps(words), encoding="utf-8")
    with pytest.raises(ValueError) as raised:
        ElmoTokenizer(
            max_characters_per_token=5,
            char_vocab_file=str(tmp_path / "chars.json"),
            word_input_vocab_file=str(tmp_path / "words.json"),
        )
    assert str(raised.value) == f"{tmp_path / 'words.json'}: {field}; copy or download the model folder again"


@pytest.mark.parametrize("learned", [False, True])
def test_decoding_an_id_that_is_no_character_is_one_line(tmp_path, learned):
    """`decode` refuses what `convert_ids_to_tokens` refuses; a learned alphabet's decode raised a `KeyError`."""
    tokenizer = learned_tokenizer(tmp_path) if learned else ElmoTokenizer(max_characters_per_token=5)
    row = tokenizer(["abc"], is_split_into_words=True)["input_ids"][1]
    assert tokenizer.decode([row]) == "abc"
    last = tokenizer.vocab_size - 1
    # A bool and a float are no ids, though a dict lookup takes `True` for 1 and `5.0` for 5.
    for bad in (tokenizer.vocab_size, -1, True, float(row[1])):
        with pytest.raises(ValueError, match=rf"^{bad!r} is not a character id \(0\.\.{last}\)$"):
            tokenizer.decode([row, [bad] * len(row)])
        with pytest.raises(ValueError, match=rf"^{bad!r} is not a character id \(0\.\.{last}\)$"):
            tokenizer.convert_ids_to_tokens(bad)
    assert tokenizer.convert_ids_to_tokens(np.int64(row[1])) == tokenizer.convert_ids_to_tokens(row[1])


def test_learned_tokenizer_pads_saves_and_loads(tmp_path):
    tokenizer = learned_tokenizer(tmp_path)
    features = [tokenizer(words, is_split_into_words=True) for words in (["abc"], ["한국어", "abc", "x"])]
    collated = DataCollatorWithPadding(tokenizer)(features)
    sentences = [["abc"], ["한국어", "abc", "x"]]
    direct = tokenizer(sentences, is_split_into_words=True, padding=True, return_tensors="pt")
    for key in ("input_ids", "attention_mask", "word_input_ids"):
        assert torch.equal(collated[key], direct[key]), key
    with pytest.raises(ValueError, match="lack them"):
        tokenizer.pad([{"input_ids": features[0]["input_ids"]}])
    tokenizer.save_pretrained(tmp_path / "saved")
    loaded = ElmoTokenizer.from_pretrained(tmp_path / "saved")
    assert loaded(["한국어 abcd"])["input_ids"] == tokenizer(["한국어 abcd"])["input_ids"]
    assert loaded(["한국어 abcd"])["word_input_ids"] == tokenizer(["한국어 abcd"])["word_input_ids"]


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


def test_a_model_folder_without_a_tokenizer_file_its_config_needs_is_refused_by_every_route(tmp_path):
    """Without `char_vocab.json`, the classifier's tokenizer would read bytes instead of its learned characters and
    the pipeline would give other scores without a word; without `tokenizer_config.json`, other units and widths.
    The tokenizer's own loading refuses both in one line, so `pipeline` and `AutoTokenizer` do."""
    folder = tmp_path / "model"
    shutil.copytree(bundled_model_path("ko-nsmc-sentiment"), folder)
    refusal = (
        f"{folder} lacks char_vocab.json, which its tokenizer needs (without, the model would read other ids or "
        "units); copy or download the model folder again"
    )
    (folder / "char_vocab.json").unlink()
    with pytest.raises(ValueError) as raised:
        pipeline("text-classification", model=str(folder))
    assert str(raised.value) == refusal
    with pytest.raises(ValueError) as raised:
        AutoTokenizer.from_pretrained(folder)
    assert str(raised.value) == refusal
    shutil.copy(bundled_model_path("ko-nsmc-sentiment") + "/char_vocab.json", folder)
    (folder / "tokenizer_config.json").unlink()
    with pytest.raises(ValueError, match=r"lacks tokenizer_config\.json, which its tokenizer needs"):
        ElmoTokenizer.from_pretrained(folder)


def test_string_labels_are_refused_in_one_line_naming_the_fix_before_the_collator_fails():
    """The Trainer's collator pads through the tokenizer: labels read from a CSV as strings are refused there, in one
    line naming the cast, where transformers' "excessive nesting" error came as a 40-line traceback."""
    tokenizer = ElmoTokenizer()
    features = [{**tokenizer(text), "label": label} for text, label in (("a good film", "1"), ("bad", "0"))]
    with pytest.raises(ValueError) as raised:
        DataCollatorWithPadding(tokenizer)(features)
    assert str(raised.value) == (
        "the features' 'label' hold strings ('1'), where a head needs class ids: cast the column first, e.g. "
        'dataset = dataset.cast_column("label", ClassLabel(names=[...])) (from datasets)'
    )
    tagged = [{**tokenizer(["Ada", "runs"], is_split_into_words=True), "labels": ["B-PER", "O"]}]
    with pytest.raises(ValueError, match=r"^the features' 'labels' hold strings \('B-PER'\), where a head needs"):
        tokenizer.pad(tagged, return_tensors="pt")
    features = [{**feature, "label": int(feature["label"])} for feature in features]
    assert DataCollatorWithPadding(tokenizer)(features)["labels"].tolist() == [1, 0]


@pytest.mark.parametrize("return_tensors", ["pt", "np"])
def test_tokenizer_tensors_equal_its_lists(return_tensors):
    """The direct numpy conversion of padded batches gives what transformers' generic conversion gives."""
    import numpy as np
    from transformers import BatchEncoding

    from hf_elmo import ElmoTokenizer

    tokenizer = ElmoTokenizer(max_characters_per_token=20)
    words = [["a", "longer", "sentence", "é"], ["short"], ["x"] * 7]
    pairs = [["b"], ["c", "d"], ["e"]]
    for kwargs in ({}, {"text_pair": pairs, "return_length": True}, {"padding": "max_length", "max_length": 12}):
        kwargs = {"padding": True, **kwargs}
        lists = tokenizer(words, is_split_into_words=True, **kwargs)
        tensors = tokenizer(words, is_split_into_words=True, return_tensors=return_tensors, **kwargs)
        generic = BatchEncoding(dict(lists), tensor_type=return_tensors)
        assert sorted(tensors.keys()) == sorted(generic.keys())
        for key in generic:
            assert type(tensors[key]) is type(generic[key])
            assert tensors[key].dtype == generic[key].dtype
            assert np.array_equal(np.asarray(tensors[key]), np.asarray(generic[key]))
        assert tensors.word_ids(1) == lists.word_ids(1)


def test_word_start_positions_are_where_each_run_of_one_word_id_begins():
    tokenizer = ElmoTokenizer()
    pair = tokenizer("a cat", "a dog sat")  # both sentences count their words from 0
    assert pair.word_ids() == [None, 0, 1, None, None, 0, 1, 2, None]
    assert word_start_positions(pair.word_ids()) == [1, 2, 5, 6, 7]
    # Several positions of one word (a Korean word's morphemes) start once; padding and boundaries are no word.
    assert word_start_positions([None, 0, 0, 1, 1, 1, 2, None, None]) == [1, 3, 6]
    assert word_start_positions([0, 0, None, 0]) == [0, 3]


# -- word-vector ids: the word vocabulary's id of every position, for a head's word vectors ---------------------------

VOCABULARY = ["the", "cat", "sat", "on", "a", "mat"]


def expected_word_vector_ids(tokenizer: ElmoTokenizer, input_ids: list[list[list[int]]]) -> list[list[int]]:
    """The id each row of `input_ids` must have: its word's (`<S>` and `</S>` for the boundaries), `</S>`'s where
    the row is padding."""
    eos = tokenizer.word_to_id("</S>")
    return [[tokenizer.word_to_id(tokenizer.decode(row)) if any(row) else eos for row in rows] for rows in input_ids]


def test_word_vector_ids_stay_aligned_with_the_rows_through_padding_truncation_and_windows(tmp_path):
    tokenizer = word_vocab_tokenizer(tmp_path, VOCABULARY, word_vector_ids=True)
    assert tokenizer.model_input_names == ["input_ids", "attention_mask", "word_vector_ids"]
    ids = tokenizer.word_to_id
    sentences = [["the", "cat", "sat"], ["a", "dog"]]  # "dog" is no word of the vocabulary
    batch = tokenizer(sentences, is_split_into_words=True, padding=True, return_word_labels=True)
    assert batch["word_vector_ids"] == [
        [ids("<S>"), ids("the"), ids("cat"), ids("sat"), ids("</S>")],
        [ids("<S>"), ids("a"), ids("<UNK>"), ids("</S>"), ids("</S>")],
    ]
    # The ids of return_word_labels=True, and at padding a word's id instead of -100.
    assert batch["labels"] == [
        [i if valid else -100 for i, valid in zip(row, mask)]
        for row, mask in zip(batch["word_vector_ids"], batch["attention_mask"])
    ]
    context = "the cat sat on a mat and the cat sat"
    encodings = [
        tokenizer(sentences, is_split_into_words=True, padding="max_length", max_length=9),
        tokenizer(
            sentences, is_split_into_words=True, padding=True, pad_to_multiple_of=4, truncation=True, max_length=3
        ),
        tokenizer(["the cat", "on a mat"], ["a cat sat", "the mat"], padding=True),
        tokenizer(
            ["a cat", "mat"],
            [context, "on the mat"],
            truncation="only_second",
            max_length=8,
            stride=1,
            return_overflowing_tokens=True,
            padding=True,
        ),
    ]
    for encoding in encodings:
        assert encoding["word_vector_ids"] == expected_word_vector_ids(tokenizer, encoding["input_ids"])
    assert [len(rows) for rows in encodings[1]["word_vector_ids"]] == [4, 4]
    assert len(encodings[3]["word_vector_ids"]) == len(encodings[3]["overflow_to_sample_mapping"]) > 2
    tensors = tokenizer(sentences, is_split_into_words=True, padding=True, return_tensors="pt")
    assert tensors["word_vector_ids"].tolist() == batch["word_vector_ids"]
    assert tensors["word_vector_ids"].shape == tensors["input_ids"].shape[:2]


def test_word_vector_ids_are_padded_by_the_stock_collator_and_required_by_it(tmp_path):
    tokenizer = word_vocab_tokenizer(tmp_path, VOCABULARY, word_vector_ids=True)
    sentences = [["a"], ["the", "cat", "sat"]]
    features = [tokenizer(words, is_split_into_words=True) for words in sentences]
    collated = DataCollatorWithPadding(tokenizer)(features)
    direct = tokenizer(sentences, is_split_into_words=True, padding=True, return_tensors="pt")
    assert torch.equal(collated["word_vector_ids"], direct["word_vector_ids"])
    with pytest.raises(
        ValueError, match=r"^this tokenizer gives word_vector_ids \(word_vector_ids=True\): the features"
    ):
        tokenizer.pad([{"input_ids": features[0]["input_ids"]}])


def test_word_vector_ids_are_saved_with_the_tokenizer_and_need_a_word_vocabulary(tmp_path):
    tokenizer = word_vocab_tokenizer(tmp_path, VOCABULARY, word_vector_ids=True)
    tokenizer.save_pretrained(tmp_path / "saved")
    saved = json.loads((tmp_path / "saved" / "tokenizer_config.json").read_text(encoding="utf-8"))
    assert saved["word_vector_ids"] is True
    text = ["the cat sat on a mat", "a dog"]
    for loaded in (
        ElmoTokenizer.from_pretrained(tmp_path / "saved"),
        AutoTokenizer.from_pretrained(tmp_path / "saved"),
    ):
        assert loaded.word_vector_ids and "word_vector_ids" in loaded.model_input_names
        assert loaded(text, padding=True)["word_vector_ids"] == tokenizer(text, padding=True)["word_vector_ids"]
    plain = word_vocab_tokenizer(tmp_path / "plain", VOCABULARY)
    assert "word_vector_ids" not in plain(text) and plain.model_input_names == ["input_ids", "attention_mask"]
    with pytest.raises(ValueError, match="^word_vector_ids=True needs a word vocabulary: create the tokenizer with"):
        ElmoTokenizer(word_vector_ids=True)


@pytest.mark.parametrize(
    ("setting", "value", "problem"),
    [
        # A row of 10^9 characters per word: `embed` grew to 21 GB and was killed, without a word.
        ("max_characters_per_token", 1_000_000_000, "max_characters_per_token must be an integer from 3 to 1000"),
        ("max_characters_per_token", "50", "max_characters_per_token must be an integer from 3 to 1000"),
        ("pre_tokenizer", ["whitespace"], "pre_tokenizer must be one of ['bert', 'korean_morphemes', 'whitespace',"),
        ("word_vector_ids", "yes", "word_vector_ids must be True or False"),
        ("analyser_versions", {"kiwipiepy": 21}, "analyser_versions must be None or a dict of package names to"),
    ],
)
def test_a_tokenizer_config_out_of_bounds_is_one_line_naming_the_file_and_the_setting(
    tmp_path, setting, value, problem
):
    from hf_elmo.loading import load_model_and_tokenizer
    from hf_elmo.modeling_elmo import ElmoModel

    ElmoModel(tiny_config()).save_pretrained(tmp_path)
    ElmoTokenizer(tiny_config().max_characters_per_token).save_pretrained(tmp_path)
    path = tmp_path / "tokenizer_config.json"
    path.write_text(json.dumps({**json.loads(path.read_text()), setting: value}))
    message = f"{path}: {problem}"
    for load in (ElmoTokenizer.from_pretrained, AutoTokenizer.from_pretrained):
        with pytest.raises(ValueError) as refused:
            load(tmp_path)
        assert str(refused.value).startswith(message), str(refused.value)
        assert str(refused.value).endswith(f", got {value!r}; copy or download the model folder again")
    with pytest.raises(ValueError) as refused:
        load_model_and_tokenizer(tmp_path)
    assert str(refused.value).startswith(f"cannot load {tmp_path} as an hf_elmo model: {message}")
    assert "\n" not in str(refused.value)


def test_made_directly_the_tokenizer_checks_the_same_settings():
    with pytest.raises(ValueError, match=r"^max_characters_per_token must be an integer from 3 to 1000, got 1001$"):
        ElmoTokenizer(1001)
    with pytest.raises(ValueError, match=r"^max_characters_per_token must be an integer from 3 to 1000, got 2$"):
        ElmoTokenizer(2)
    with pytest.raises(ValueError, match=r"^word_vector_ids must be True or False, got 1$"):
        ElmoTokenizer(word_vector_ids=1)


def test_a_text_and_its_words_give_the_same_rows_each_decoding_to_its_cut_bytes():
    """For any text (Hypothesis: every Unicode category, lone surrogates and blanks included): its words are
    `text.split()`, as bilm-tf and `hf-elmo embed` split it (U+001C..U+001F stayed inside words); `tokenizer(text)` is
    `tokenizer(words, is_split_into_words=True)`, a blank text's `[]` too (it was "an empty batch", where transformers
    reads `[]` as a sentence of no words); and each word's row decodes to its first bytes, as bilm-tf cuts them
    (`max_characters_per_token - 2`, a character cut in two replaced)."""
    hypothesis = require("hypothesis", reason="the property tests need the test extra's hypothesis")
    strategies = require("hypothesis.strategies")
    tokenizer = ElmoTokenizer(max_characters_per_token=7)
    boundary = {tokenizer.bos_token, tokenizer.eos_token}

    def cut(word: str) -> str:
        return word.encode("utf-8", "ignore")[:5].decode("utf-8", "replace")

    @hypothesis.settings(max_examples=300, deadline=None, derandomize=True, database=None)
    @hypothesis.given(
        strategies.text(max_size=40) | strategies.sampled_from(["", " \t\n", "<S> a </S>", "배" * 4, "a\x1fb"])
    )
    def check(text):
        words = tokenizer.split_words(text)
        assert words == text.split()
        rows = tokenizer(text)["input_ids"]
        assert rows == tokenizer(words, is_split_into_words=True)["input_ids"]
        assert len(rows) == len(words) + 2
        for word, row in zip(words, rows[1:-1], strict=True):
            assert tokenizer.decode([row]) == (word if word in boundary else cut(word))
        kept = [cut(word) for word in words if word not in boundary]
        assert tokenizer.decode(rows, skip_special_tokens=True) == " ".join(kept)

    check()


@pytest.mark.parametrize("pre_tokenizer", ["whitespace_split", "whitespace", "bert", "korean_morphemes"])
def test_every_pre_tokenizer_splits_at_an_information_separator_with_its_span_in_the_text(pre_tokenizer):
    """U+001C..U+001F split words as a space does (Python's `str.split` takes them for whitespace), and the spans
    still index the text as given."""
    if pre_tokenizer == "korean_morphemes":
        require("kiwipiepy", reason="the Korean pre-tokenizer needs the korean extra (kiwipiepy)")
    tokenizer = ElmoTokenizer(pre_tokenizer=pre_tokenizer)
    for separator in map(chr, range(0x1C, 0x20)):
        text = f"abc{separator}de"
        assert tokenizer.split_words(text) == tokenizer.split_words("abc de") == ["abc", "de"]
        offsets = tokenizer(text, return_offsets_mapping=True)["offset_mapping"]
        assert [text[start:end] for start, end in offsets[1:-1]] == ["abc", "de"]
