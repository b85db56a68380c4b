"""
Property-based tests (Hypothesis) of the readers of every file the package reads: generated files with fields of
the wrong type, huge and negative numbers, missing and unknown keys, damaged nesting and cut or random bytes. Each
reader ends in a result the package can use, or in one line (the package's own exception type, a message of one
line), within a time bound (each example's `deadline`) and a memory bound (`MEMORY_LIMIT`, the peak `tracemalloc`
sees). The seed is fixed (`derandomize`) and the examples few, so that the file runs in seconds on one core and the
same cases run everywhere. A case the fuzz once found a reader mishandling is kept as a test of its own (the end of
the file).
"""

import copy
import io
import json
import math
import tempfile
import tracemalloc
import types
from pathlib import Path

import numpy as np
import pytest
from transformers import TrainerControl, TrainerState
from utils import package_calls, require, word_vocab_tokenizer

from hf_elmo import ElmoConfig, ElmoTokenizer, quickstart
from hf_elmo.alphabet_elmo import CharacterAlphabet, learn_character_vocabulary
from hf_elmo.conversion_original import read_options
from hf_elmo.embedding_files import _check_identity, check_part
from hf_elmo.errors import CommandError, ElmoConversionError, FileContentError, JsonFields, read_json_file
from hf_elmo.pretraining import asks_for_more_steps, read_run_text, read_trainer_state
from hf_elmo.sentence_encoder import read_settings
from hf_elmo.sentence_weighting import WordCounts

NEEDS = "the fuzz tests need the test extra's hypothesis"
hypothesis, st, hnp = (
    require(name, reason=NEEDS) for name in ("hypothesis", "hypothesis.strategies", "hypothesis.extra.numpy")
)
given, settings, HealthCheck = hypothesis.given, hypothesis.settings, hypothesis.HealthCheck

FUZZ = settings(
    max_examples=40,
    deadline=2000,  # milliseconds per example: a reader that loops or reads without a bound fails it
    derandomize=True,
    database=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
)
# The most memory one reading may take: far above what these small files need, far below what a size read from a
# file and allocated before it is bounded would take.
MEMORY_LIMIT = 64 << 20

# JSON values of every kind, with the numbers a bound must catch: huge, negative, not finite, not integers.
NUMBERS = st.one_of(
    st.integers(-(2**70), 2**70),
    st.sampled_from([0, -1, 1, 2**31, 2**53 + 1, 10**9, 10**30]),
    st.floats(allow_nan=True, allow_infinity=True),
)
JSON_VALUES = st.recursive(
    st.none() | st.booleans() | NUMBERS | st.text(max_size=12),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=4),
    max_leaves=8,
)


def json_paths(value, prefix=()) -> list[tuple]:
    """Every place in a JSON document (keys and list indices from its top), the top itself first."""
    paths = [prefix]
    if isinstance(value, dict):
        for key, inner in value.items():
            paths += json_paths(inner, (*prefix, key))
    elif isinstance(value, list):
        for index, inner in enumerate(value[:3]):
            paths += json_paths(inner, (*prefix, index))
    return paths


def replaced(document, path: tuple, value):
    """`document` with the value at `path` replaced by `value`, or removed where `value` is `REMOVED`."""
    if not path:
        return value
    changed = copy.deepcopy(document)
    parent = changed
    for step in path[:-1]:
        parent = parent[step]
    if value is REMOVED:
        del parent[path[-1]]
    else:
        parent[path[-1]] = value
    return changed


REMOVED = object()


def damaged_json(document) -> st.SearchStrategy[bytes]:
    """The bytes of `document` damaged: a value anywhere in it replaced (by any JSON value) or removed, a key added,
    its text cut anywhere, or random bytes."""
    text = json.dumps(document, ensure_ascii=False).encode()
    paths = json_paths(document)
    removable = [path for path in paths if path]
    changed = st.one_of(
        st.builds(replaced, st.just(document), st.sampled_from(paths), JSON_VALUES),
        st.builds(replaced, st.just(document), st.sampled_from(removable), st.just(REMOVED)),
        st.builds(lambda key, value: {**document, key: value}, st.text(max_size=10), JSON_VALUES),
    )
    return st.one_of(
        changed.map(lambda value: json.dumps(value, ensure_ascii=False).encode()),
        st.integers(0, len(text)).map(lambda end: text[:end]),
        st.binary(max_size=80),
    )


def result_or_one_line(read, *args, errors: tuple[type[BaseException], ...] = (ValueError,)):
    """
    `read(*args)`: its result, or the error it raised where that is one of `errors` with a message of one line. Any
    other exception fails the example as it is raised; so does a message of several lines, or a reading whose memory
    peaks over `MEMORY_LIMIT`.
    """
    tracemalloc.start()
    try:
        result = read(*args)
    except errors as error:
        message = str(error).strip()
        assert message and "\n" not in message, message
        result = error
    finally:
        _, peak = tracemalloc.get_traced_memory()
        tracemalloc.stop()
    assert peak < MEMORY_LIMIT, f"{read.__name__} took {peak:,} bytes"
    return result


def written(folder: Path, name: str, data: bytes) -> Path:
    (folder / name).write_bytes(data)
    return folder / name


# -- errors.read_json_file: any bytes ---------------------------------------------------------------------------------


@FUZZ
@given(data=st.one_of(st.binary(max_size=200), damaged_json({"a": [1, {"b": None}], "c": "d"})))
def test_any_bytes_read_as_json_or_refused_in_one_line(data):
    with tempfile.TemporaryDirectory() as folder:
        path = written(Path(folder), "file.json", data)
        value = result_or_one_line(read_json_file, path, "fix it")
        if isinstance(value, FileContentError):
            assert str(value).endswith("; fix it") and str(path) in str(value)
        else:
            assert value == json.loads(data.decode("utf-8"))


def test_a_file_cut_short_is_told_from_one_that_is_not_json_or_not_there(tmp_path):
    """A file that ends inside its JSON (a write that was stopped: `cut_short`, which a reader may take for one never
    finished) is told from JSON broken inside it, and both from a file the system cannot read."""
    cut = written(tmp_path, "cut.json", b'{"a": [1, 2')
    with pytest.raises(FileContentError) as raised:
        read_json_file(cut, "fix it")
    assert raised.value.cut_short and str(raised.value) == f"{cut} ends before its JSON does; fix it"
    broken = written(tmp_path, "broken.json", b'{"a": ], "b": 1}')
    with pytest.raises(FileContentError) as raised:
        read_json_file(broken, "fix it")
    assert not raised.value.cut_short
    assert str(raised.value) == f"{broken} is not JSON (Expecting value at character 6); fix it"
    with pytest.raises(FileContentError) as raised:
        read_json_file(tmp_path / "missing.json", "fix it")
    assert str(raised.value) == f"cannot read {tmp_path / 'missing.json'}: No such file or directory"


def test_a_file_larger_than_its_bound_is_refused_before_it_is_read(tmp_path):
    path = written(tmp_path, "big.json", b"[" + b"1," * 5000 + b"1]")
    with pytest.raises(FileContentError, match=r"holds 10,003 bytes, more than the 1,000 it may; fix it$"):
        read_json_file(path, "fix it", max_bytes=1000)
    deep = written(tmp_path, "deep.json", b"[" * 100_000 + b"]" * 100_000)
    with pytest.raises(FileContentError, match="is not JSON that can be read"):
        read_json_file(deep, "fix it")


def test_every_json_file_the_package_reads_goes_through_read_json_file():
    """One reader of JSON files, bounded before it reads, that never waits on a pipe: `json.load` and `json.loads`
    appear in the package only inside `errors.read_json_file`."""
    import ast

    def reads_json(call: ast.Call) -> bool:
        function = call.func
        return (
            isinstance(function, ast.Attribute)
            and function.attr in ("load", "loads")
            and isinstance(function.value, ast.Name)
            and function.value.id == "json"
        )

    assert package_calls(reads_json) == [("hf_elmo/errors.py", "read_json_file")]


# The readers of the small JSON files of a model folder or checkpoint that are not read as configs or tokenizer
# files: each file's content as saved, and the reader that takes it from its folder.
SMALL_FILES = {
    "word_counts.json": ({"words": 9, "counts": [0, 0, 0, 4, 3]}, lambda folder: WordCounts.from_pretrained(folder)),
    "sense_counts.json": ({"train.txt": {"배": {"boat": 2, "belly": 1}}}, quickstart.read_sense_counts),
    "sentence_bert_config.json": ({"sif_a": 0.001, "layer_weights": [0.5, 0.5, 0.0]}, read_settings),
    "options.json": ({"lstm": {"dim": 8}}, lambda folder: read_options(folder / "options.json")),
    "word_input_vocab.json": (
        {"<oov>": 0, "<pad>": 1, "한국어": 2},
        lambda folder: ElmoTokenizer(
            max_characters_per_token=5,
            char_vocab_file=str(folder / "char_vocab.json"),
            word_input_vocab_file=str(folder / "word_input_vocab.json"),
        ),
    ),
}


@pytest.mark.parametrize("name", SMALL_FILES)
@FUZZ
@given(data=st.data())
def test_the_small_files_of_a_folder_read_whole_or_are_refused_in_one_line(name, data):
    saved, read = SMALL_FILES[name]
    content = data.draw(damaged_json(saved))
    with tempfile.TemporaryDirectory() as folder:
        folder = Path(folder)
        learn_character_vocabulary(["한국어"]).save(folder / "char_vocab.json")
        written(folder, name, content)
        result_or_one_line(read, folder, errors=(ValueError, ElmoConversionError))


# -- alphabet_elmo: char_vocab.json -----------------------------------------------------------------------------------

LEARNED = learn_character_vocabulary(["ab c"])
CHAR_VOCAB = {"markers": LEARNED.markers, "symbols": LEARNED.symbols}


@FUZZ
@given(data=damaged_json(CHAR_VOCAB))
def test_a_character_vocabulary_reads_whole_or_is_refused_in_one_line(data):
    """What is accepted encodes a word into ids of its own table; what is not names the file."""
    with tempfile.TemporaryDirectory() as folder:
        path = written(Path(folder), "char_vocab.json", data)
        alphabet = result_or_one_line(CharacterAlphabet.from_file, path)
        if isinstance(alphabet, FileContentError):
            assert str(alphabet).startswith(str(path))
        else:
            row = alphabet.word_row("ab", 8)
            assert len(row) == 8 and all(0 < i < alphabet.table_rows for i in row)


# -- pretraining: trainer_state.json and the record of the text -------------------------------------------------------

TRAINER_STATE = json.loads(
    json.dumps(
        {
            **vars(TrainerState(global_step=40, max_steps=80, num_train_epochs=2, epoch=1.0)),
            "log_history": [{"loss": 3.2, "step": 20}, {"eval_perplexity": 40.1, "step": 40}],
            "stateful_callbacks": {"TrainerControl": {"args": vars(TrainerControl()), "attributes": {}}},
        }
    )
)
# What `asks_for_more_steps` reads of the command's `TrainingArguments`: its steps and epochs.
COMMAND_STEPS = types.SimpleNamespace(max_steps=0, num_train_epochs=3)


@FUZZ
@given(data=damaged_json(TRAINER_STATE))
def test_a_trainer_state_reads_whole_as_incomplete_or_is_refused_in_one_line(data):
    """An accepted state is one the Trainer loads (`TrainerState(**state)`, its control restored) and this module
    compares with the command; a cut one is a checkpoint stopped while being saved (None)."""
    with tempfile.TemporaryDirectory() as folder:
        (Path(folder) / "checkpoint-40").mkdir()
        path = written(Path(folder) / "checkpoint-40", "trainer_state.json", data)
        state = result_or_one_line(read_trainer_state, path)
        if isinstance(state, FileContentError):
            assert str(state).startswith(str(path)) and "remove checkpoint-40" in str(state)
        elif state is not None:
            TrainerState(**state)
            assert asks_for_more_steps(state, COMMAND_STEPS) in (True, False)
            saved = (state.get("stateful_callbacks") or {}).get("TrainerControl", [])
            for entry in saved if isinstance(saved, list) else [saved]:
                TrainerControl(**entry.get("args", {}))


RUN_TEXT = {
    "train_file": [{"path": "/data/train.txt", "size": 1200, "sha256": "ab" * 32}],
    "validation_file": [{"path": "/data/valid.txt", "size": 300, "sha256": "cd" * 32}],
}


@FUZZ
@given(data=damaged_json(RUN_TEXT))
def test_the_record_of_a_runs_text_reads_whole_or_is_refused_in_one_line(data):
    with tempfile.TemporaryDirectory() as folder:
        path = written(Path(folder), "hf_elmo_pretrain_text.json", data)
        record = result_or_one_line(read_run_text, path)
        if not isinstance(record, FileContentError):  # what check_same_text compares
            for files in record.values():
                assert all(isinstance(file["size"], int) and isinstance(file["sha256"], str) for file in files)


def test_each_reader_takes_its_intact_file_whole(tmp_path):
    """The fuzz tests above accept a refusal of any file; here each reader must take the file it is fuzzed from,
    undamaged, and give back what it holds, so that a reader that refuses everything fails."""
    path = written(tmp_path, "char_vocab.json", json.dumps(CHAR_VOCAB).encode())
    assert CharacterAlphabet.from_file(path).symbols == LEARNED.symbols
    (tmp_path / "checkpoint-40").mkdir()
    path = written(tmp_path / "checkpoint-40", "trainer_state.json", json.dumps(TRAINER_STATE).encode())
    state = read_trainer_state(path)
    assert (state["global_step"], state["num_train_epochs"], state["epoch"]) == (40, 2, 1.0)
    path = written(tmp_path, "hf_elmo_pretrain_text.json", json.dumps(RUN_TEXT).encode())
    assert read_run_text(path) == RUN_TEXT
    learn_character_vocabulary(["한국어"]).save(tmp_path / "char_vocab.json")
    for name, (saved, read) in SMALL_FILES.items():
        written(tmp_path, name, json.dumps(saved, ensure_ascii=False).encode())
        assert not isinstance(read(tmp_path), Exception), name
    assert WordCounts.from_pretrained(tmp_path).counts.tolist() == [0, 0, 0, 4, 3]
    assert quickstart.read_sense_counts(tmp_path) == {"배": {"boat": 2, "belly": 1}}


@pytest.mark.parametrize(
    "value, kinds, bounds, expected",
    [
        (12, int, {"minimum": 0, "maximum": 9}, "the number 12, not an integer from 0 to 9"),
        (-1, int, {"minimum": 0}, "the number -1, not an integer of at least 0"),
        (12, int, {"maximum": 9}, "the number 12, not an integer of at most 9"),
        (math.nan, float, {}, "the number NaN, not a number that is finite"),
        ("2.5", float, {}, 'the string "2.5", not a number'),
        (True, float, {}, "true, not a number"),
        (True, int, {}, "true, not an integer"),
    ],
)
def test_a_field_out_of_its_bounds_or_kind_is_named_with_them(value, kinds, bounds, expected):
    fields = JsonFields({"n": value}, "f.json", "fix it")
    with pytest.raises(FileContentError) as raised:
        fields.take("n", kinds, **bounds)
    assert str(raised.value) == f"f.json: n is {expected}; fix it"


def test_a_list_or_object_of_more_items_than_it_may_hold_is_named_with_its_size():
    fields = JsonFields({"n": [1, 2, 3], "m": {"a": 1, "b": 2}}, "f.json", "fix it")
    assert fields.take("n", list, maximum=3) == [1, 2, 3]
    for key, kind in (("n", list), ("m", dict)):
        with pytest.raises(FileContentError) as raised:
            fields.take(key, kind, maximum=1)
        assert (
            str(raised.value) == f"f.json: {key} holds {len(fields.data[key])} items, more than the 1 it may; fix it"
        )


# -- embedding_files: the parts and the run state of embed ------------------------------------------------------------


def npz_bytes(arrays: dict[str, np.ndarray]) -> bytes:
    buffer = io.BytesIO()
    np.savez(buffer, **arrays)
    return buffer.getvalue()


GOOD_PART = npz_bytes({"4": np.ones((3, 5, 8), np.float32), "7": np.zeros((3, 2, 8), np.float32)})
ARRAYS = hnp.arrays(
    dtype=st.sampled_from([np.float32, np.float64, np.int32, np.bool_, np.dtype(">f4")]),
    shape=hnp.array_shapes(min_dims=0, max_dims=4, max_side=4),
)
PARTS = st.one_of(
    st.integers(0, len(GOOD_PART)).map(lambda end: GOOD_PART[:end]),
    st.tuples(st.integers(0, len(GOOD_PART) - 1), st.integers(1, 255)).map(
        lambda change: GOOD_PART[: change[0]] + bytes([GOOD_PART[change[0]] ^ change[1]]) + GOOD_PART[change[0] + 1 :]
    ),
    st.dictionaries(st.sampled_from(["0", "12", "x", "3.npy"]), ARRAYS, min_size=1, max_size=3).map(npz_bytes),
    st.binary(max_size=200),
)


@FUZZ
@given(data=PARTS)
def test_an_embed_part_is_whole_or_refused_in_one_line(data):
    """An accepted part is one `finish` assembles: every array it holds loads, float32, without pickles."""
    with tempfile.TemporaryDirectory() as folder:
        path = written(Path(folder), "4.npz", data)
        checked = result_or_one_line(check_part, path, errors=(FileContentError,))
        if not isinstance(checked, FileContentError):
            with np.load(path) as arrays:
                for name in arrays.files:
                    assert name.isdigit() and arrays[name].dtype == np.float32


@FUZZ
@given(array=ARRAYS, cut=st.integers(0, 16))
def test_an_npy_part_is_whole_or_refused_in_one_line(array, cut):
    buffer = io.BytesIO()
    np.save(buffer, array)
    with tempfile.TemporaryDirectory() as folder:
        path = written(Path(folder), "3.npy", buffer.getvalue()[: len(buffer.getvalue()) - cut])
        checked = result_or_one_line(check_part, path, errors=(FileContentError,))
        if not isinstance(checked, FileContentError):
            assert np.load(path).dtype == np.float32 and cut == 0


EMBED_STATE = {"input file": "/data/in.txt (12 bytes)", "model": "ko-nsmc", "layers": "top", "pooled": False}


@FUZZ
@given(data=damaged_json(EMBED_STATE))
def test_embeds_run_state_resumes_only_its_own_run_or_is_refused_in_one_line(data):
    with tempfile.TemporaryDirectory() as folder:
        path = written(Path(folder), "hf_elmo_embed.json", data)
        outcome = result_or_one_line(_check_identity, path, EMBED_STATE, Path(folder), errors=(CommandError,))
        if outcome is None:  # resumed: what it holds is the run's identity
            assert {key: json.loads(data)[key] for key in EMBED_STATE} == EMBED_STATE


# -- configuration_elmo and tokenization_elmo (called, not edited here) -----------------------------------------------

CONFIG = {key: value for key, value in ElmoConfig().to_dict().items() if not key.startswith("_")}


@FUZZ
@given(key=st.sampled_from(sorted(CONFIG)), value=JSON_VALUES, remove=st.booleans())
def test_a_config_is_made_or_refused_in_one_line(key, value, remove):
    document = {name: field for name, field in CONFIG.items() if not (remove and name == key)}
    if not remove:
        document[key] = value
    config = result_or_one_line(ElmoConfig.from_dict, document)
    if not isinstance(config, ValueError):
        assert math.prod(size for _, size in config.filters) >= 0  # a config whose fields hold what they declare


@FUZZ
@given(
    data=st.one_of(
        st.integers(0, len(text := json.dumps(CONFIG).encode())).map(lambda end: text[:end]), st.binary(max_size=80)
    )
)
def test_a_config_file_cut_or_of_random_bytes_is_refused_in_one_line(data):
    with tempfile.TemporaryDirectory() as folder:
        path = written(Path(folder), "config.json", data)
        result_or_one_line(ElmoConfig.from_json_file, path, errors=(ValueError, OSError))


@pytest.fixture(scope="module")
def tokenizer_files(tmp_path_factory) -> dict[str, bytes]:
    """The JSON files of a tokenizer with a word vocabulary and a learned character vocabulary, by name."""
    folder = tmp_path_factory.mktemp("tokenizer")
    learn_character_vocabulary(["ab c"]).save(folder / "chars.json")
    word_vocab_tokenizer(folder, ["a", "b", "c"], char_vocab_file=str(folder / "chars.json")).save_pretrained(
        folder / "saved"
    )
    return {path.name: path.read_bytes() for path in (folder / "saved").glob("*.json")}


@FUZZ
@given(name=st.sampled_from(["tokenizer_config.json", "word_vocab.json", "char_vocab.json"]), data=st.data())
def test_a_tokenizer_folder_with_a_damaged_file_loads_or_is_refused_in_one_line(tokenizer_files, name, data):
    damaged = data.draw(damaged_json(json.loads(tokenizer_files[name])))
    with tempfile.TemporaryDirectory() as folder:
        for file, content in tokenizer_files.items():
            written(Path(folder), file, damaged if file == name else content)
        tokenizer = result_or_one_line(ElmoTokenizer.from_pretrained, folder, errors=(ValueError, OSError))
        if not isinstance(tokenizer, (ValueError, OSError)):
            rows = tokenizer(["a b"])["input_ids"][0]
            assert len(rows) == 4 and all(len(row) == tokenizer.max_characters_per_token for row in rows)


# -- cases the fuzz found that these readers mishandled ---------------------------------------------------------------


@pytest.mark.parametrize(
    "key, value",
    [
        ("crf_constraint", []),
        ("dtype", "no_such_dtype"),
        ("dtype", [None, {}]),
        ("id2label", [[0]]),
        ("label2id", [1]),
        ("architectures", True),
    ],
)
def test_a_transformers_field_or_crf_constraint_of_another_type_is_one_line_naming_it(key, value):
    refusal = result_or_one_line(ElmoConfig.from_dict, {**CONFIG, key: value})
    assert isinstance(refusal, ValueError) and str(refusal).startswith(f"{key} must be ")


def test_a_config_file_of_json_that_is_no_object_is_one_line_naming_it(tmp_path):
    path = written(tmp_path, "config.json", b"0")
    refusal = result_or_one_line(ElmoConfig.from_json_file, path)
    assert isinstance(refusal, FileContentError) and str(refusal).startswith(f"{path}: the file is the number 0")


def test_a_tokenizer_config_of_json_that_is_no_object_is_one_line_naming_it(tokenizer_files, tmp_path):
    for file, content in tokenizer_files.items():
        written(tmp_path, file, content)
    path = written(tmp_path, "tokenizer_config.json", b"null")
    refusal = result_or_one_line(ElmoTokenizer.from_pretrained, tmp_path)
    assert isinstance(refusal, FileContentError) and str(refusal).startswith(f"{path}: the file is null")


@pytest.mark.parametrize(
    "key, value",
    [
        ("bos_token", []),
        ("eos_token", {"content": 1}),
        ("added_tokens_decoder", None),
        ("added_tokens_decoder", {"0": 5}),
    ],
)
def test_a_special_token_of_another_type_is_one_line_naming_it(tokenizer_files, tmp_path, key, value):
    for file, content in tokenizer_files.items():
        written(tmp_path, file, content)
    path = written(
        tmp_path,
        "tokenizer_config.json",
        json.dumps({**json.loads(tokenizer_files["tokenizer_config.json"]), key: value}).encode(),
    )
    refusal = result_or_one_line(ElmoTokenizer.from_pretrained, tmp_path)
    assert isinstance(refusal, FileContentError) and str(refusal).startswith(f"{path}: {key} must be ")
