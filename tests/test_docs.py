"""Every Python and shell snippet of README.md and docs/*.md runs here, so that a changed behaviour fails a test
instead of leaving the docs behind.

A snippet is a fenced block whose info string starts with `python` or `bash`. It runs as written, in a fresh folder
(the test's `tmp_path`, its working directory) that holds the inputs the docs leave to the reader:

- `outputs/elmo-original`, `model`, `path/to/elmo`, `path/to/elmo-folder`: a tiny random `ElmoModel` with its
  `ElmoTokenizer` (`tiny_config()`), in place of the released English ELMo; for a Python block that names them,
  `ko-morphemes` (the same with the `korean_morphemes` pre-tokenizer) and `my-elmo-onnx` (its ONNX export), which
  the shell blocks above it write.
- `options.json`, `weights.hdf5` and `original/`: a tiny checkpoint in the original layout.
- the text files a snippet names (`corpus.txt`, `train.txt`, `train.csv`, `train.conll`, ...): a few lines each; the
  CSV files have "text" and "label" columns, the labels names (`SENTIMENTS`), as users' files have them.

Shell lines are `hf-elmo ...` (run in process by `hf_elmo.cli.main`) and `python examples/...` or `python
conversion/...` (run in process as `__main__`), each of which must exit with 0. `MODEL` and `ELMO_FOLDER` stand for
`model`, `OPTIONS` and `WEIGHTS` for `original/options.json` and `original/weights.hdf5`; every other upper-case name
(`DIR`, `OUT`, ...) is a folder of that name, made from the tiny model where a line reads it before any line writes
it. `hf-elmo pretrain` runs one step (`PRETRAIN_LIMIT`): the same command, seconds long. A line commented `# the
same` repeats the line above by another route: the output folder of that line is removed before it runs.

Python blocks run in process, each in a fresh namespace holding the names the prose leaves to the reader
(`python_names`): `folder` is a copy of the bundled `ko-nsmc`; `model` a sentence classifier with `label2id` (in
docs/transformers.md a biLM, with `batch`, `state` and `classifier`); `tokenizer` the tiny model's; `words`, `tags`,
`labels`, `elmo_folder`, `train_dataset`, `eval_dataset` a tagging task; `reference_texts` a few dozen sentences.
README.md's blocks name no such input: they run as a user copies them, on the bundled models and `train.csv`.

A marker says what is not run, and why: an HTML comment on the line before the fence, or the rest of the info string
after the language (where a comment line does not fit, as in README.md):

- `not run: REASON` or `network: REASON`: the block is skipped with that reason (`pytest -rs` lists them);
- `not run, lines with "TEXT": REASON`: the lines holding TEXT are left out of a shell block;
- `continues the block above`: the Python block above in the same file runs first, in the same namespace.
"""

import re
import runpy
import shlex
import shutil
import sys
from pathlib import Path

import pytest
import torch
from utils import tiny_config, write_original_checkpoint

import hf_elmo
from hf_elmo import ElmoForSequenceClassification, ElmoModel, ElmoTokenizer

ROOT = Path(__file__).resolve().parents[1]
DOCUMENTS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
LANGUAGES = {"python", "bash"}
FENCE = re.compile(r"^```(\S*)[ \t]*(.*)$")
COMMENT = re.compile(r"^<!--\s*(.*?)\s*-->$")
SKIP = re.compile(r"^(not run|network): (.+)$")
SKIP_LINES = re.compile(r'^not run, lines with "([^"]+)": (.+)$')
CONTINUES = "continues the block above"
SHELL_NAMES = {
    "MODEL": "model",
    "ELMO_FOLDER": "model",
    "OPTIONS": "original/options.json",
    "WEIGHTS": "original/weights.hdf5",
}
PRETRAIN_LIMIT = ["--max-steps", "1"]  # the same model, trained for one step instead of minutes
TINY_MODEL_FOLDERS = ["model", "outputs/elmo-original", "path/to/elmo", "path/to/elmo-folder"]
ENGLISH = ["the cat sat on the mat .", "dogs bark at the cat .", "a good movie", "an awful plot"]
KOREAN = ["배가 고프다", "배를 타고 여행을 가다", "정말 재미있고 감동적인 영화였어요", "배를 깎아 먹었다"]
SENTIMENTS = ["positive", "positive", "positive", "negative"]  # the CSV files' labels, one per sentence of ENGLISH
# The README's promise of a page a user reads through: depth goes to docs/.
README_LINES = 120


class Block:
    """A fenced block: where it starts (`file:line`), its language, its code and the marker before it."""

    def __init__(self, path: Path, line: int, language: str, code: str, marker: str, previous):
        self.id, self.line = f"{path.relative_to(ROOT)}:{line}", line
        self.path, self.language, self.code, self.marker, self.previous = path, language, code, marker, previous

    def __repr__(self):
        return self.id


def read_blocks(path: Path) -> list[Block]:
    """The Python and shell blocks of one Markdown file; `previous` is the Python block above, for `continues`."""
    blocks, lines = [], path.read_text(encoding="utf-8").splitlines()
    previous_python, index = None, 0
    while index < len(lines):
        fence = FENCE.match(lines[index])
        if not fence:
            index += 1
            continue
        start, language, info = index, fence.group(1), fence.group(2)
        index += 1
        while not lines[index].startswith("```"):
            index += 1
        code = "\n".join(lines[start + 1 : index])
        index += 1
        if language not in LANGUAGES:
            continue
        comment = COMMENT.match(lines[start - 1]) if start else None
        marker = info or (comment.group(1) if comment else "")
        block = Block(path, start + 1, language, code, marker, previous_python)
        blocks.append(block)
        if language == "python":
            previous_python = block
    return blocks


BLOCKS = [block for path in DOCUMENTS for block in read_blocks(path)]


def test_every_marker_is_understood_and_says_why():
    for block in BLOCKS:
        if block.marker:
            assert SKIP.match(block.marker) or SKIP_LINES.match(block.marker) or block.marker == CONTINUES, block.id
        if block.marker == CONTINUES:
            assert block.previous is not None, block.id
    assert len(BLOCKS) > 40


# -- the inputs the docs leave to the reader --------------------------------------------------------------------------


@pytest.fixture(scope="session")
def inputs(tmp_path_factory) -> Path:
    """The models and files every block may read, built once: copied into each block's working directory."""
    folder = tmp_path_factory.mktemp("docs-inputs")
    torch.manual_seed(0)
    ElmoModel(tiny_config()).save_pretrained(folder / "tiny")
    ElmoTokenizer(max_characters_per_token=20).save_pretrained(folder / "tiny")
    ElmoModel(tiny_config()).save_pretrained(folder / "ko-morphemes")
    ElmoTokenizer(max_characters_per_token=20, pre_tokenizer="korean_morphemes").save_pretrained(
        folder / "ko-morphemes"
    )
    write_original_checkpoint(folder / "original", tiny_config(), seed=3)
    from hf_elmo.onnx_elmo import export_onnx

    export_onnx(folder / "tiny", folder / "my-elmo-onnx")
    return folder


def write_text_files(folder: Path) -> None:
    """The text, CSV and CoNLL files the snippets name, a few lines each."""
    lines = ENGLISH + KOREAN
    for name in ["corpus.txt", "korean_sentences.txt", "train.txt", "valid.txt", "pretraining-text.txt"]:
        (folder / name).write_text("\n".join(lines * 3) + "\n", encoding="utf-8")
    rows = [f'"{text}",{label}' for text, label in zip(ENGLISH * 2, SENTIMENTS * 2, strict=True)]
    for name in ["train.csv", "validation.csv", "test.csv"]:
        (folder / name).write_text("text,label\n" + "\n".join(rows) + "\n", encoding="utf-8")
    tagged = "Ada B-PER\nwent O\nto O\nParis B-LOC\n\nBob B-PER\nsat O\n"
    for name in ["train.conll", "dev.conll", "test.conll"]:
        (folder / name).write_text(tagged * 3, encoding="utf-8")


@pytest.fixture
def workdir(inputs, tmp_path, monkeypatch) -> Path:
    """The block's working directory with its inputs, offline; datasets' cache inside it."""
    import datasets

    for name in TINY_MODEL_FOLDERS:
        shutil.copytree(inputs / "tiny", tmp_path / name)
    shutil.copytree(inputs / "original", tmp_path / "original")
    for name in ["options.json", "weights.hdf5"]:
        shutil.copy(inputs / "original" / name, tmp_path / name)
    write_text_files(tmp_path)
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setattr(datasets.config, "HF_DATASETS_CACHE", str(tmp_path / "datasets-cache"))
    return tmp_path


def python_names(block: Block, folder: Path, inputs: Path) -> dict:
    """The names a block uses without making them, bound as the prose around it describes them; the folders it reads
    that a shell block above it writes."""
    import datasets

    for name in ["ko-morphemes", "my-elmo-onnx"]:
        if f'"{name}"' in block.code:
            shutil.copytree(inputs / name, folder / name)
    names = {}
    if re.search(r"\bfolder\b", block.code):
        names["folder"] = str(shutil.copytree(hf_elmo.bundled_model_path("ko-nsmc"), folder / "folder"))
    tokenizer = ElmoTokenizer.from_pretrained(folder / "model")
    sentence_labels = {"negative": 0, "positive": 1}
    names["reference_texts"] = (ENGLISH + KOREAN) * 4
    names["words"] = [["Ada", "went", "to", "Paris"], ["Bob", "sat"]]
    names["labels"] = ["O", "B-PER", "B-LOC"]
    names["tags"] = [[1, 0, 0, 2], [1, 0]]
    names["elmo_folder"] = str(folder / "model")
    names["tokenizer"] = tokenizer
    encoding = tokenizer(names["words"], is_split_into_words=True)
    tagged = [
        [-100 if word is None else names["tags"][i][word] for word in encoding.word_ids(i)]
        for i in range(len(names["words"]))
    ]
    tagged_rows = {"input_ids": encoding["input_ids"], "attention_mask": encoding["attention_mask"], "labels": tagged}
    names["train_dataset"] = names["eval_dataset"] = datasets.Dataset.from_dict(tagged_rows)
    if block.path.name == "transformers.md":  # a biLM, a batch and its state; a classifier for PEFT
        names["model"] = ElmoModel.from_pretrained(folder / "model").eval()
        names["batch"] = tokenizer(ENGLISH, padding=True, return_tensors="pt")
        names["state"] = None
        names["classifier"] = ElmoForSequenceClassification.from_pretrained(folder / "model", num_labels=2)
    else:  # a sentence classifier with string labels
        names["model"] = ElmoForSequenceClassification.from_pretrained(
            folder / "model", num_labels=2, id2label={0: "negative", 1: "positive"}, label2id=sentence_labels
        )
    return names


# -- running a block --------------------------------------------------------------------------------------------------


def run_python(block: Block, namespace: dict) -> None:
    if block.marker == CONTINUES:
        run_python(block.previous, namespace)
    exec(compile(block.code, block.id, "exec"), namespace)


def shell_lines(block: Block) -> list[str]:
    """The block's commands, continuation lines joined, those a marker leaves out dropped."""
    left_out = SKIP_LINES.match(block.marker)
    lines = block.code.replace("\\\n", " ").splitlines()
    return [
        line
        for line in lines
        if line.strip() and not line.lstrip().startswith("#") and not (left_out and left_out.group(1) in line)
    ]


def arguments_of(line: str) -> list[str]:
    """The line's words with the placeholders bound; `hf-elmo pretrain` for one step (`PRETRAIN_LIMIT`)."""
    arguments = [SHELL_NAMES.get(word, word) for word in shlex.split(line, comments=True)]
    return (
        arguments + PRETRAIN_LIMIT
        if arguments[:2] == ["hf-elmo", "pretrain"] and "--help" not in arguments
        else arguments
    )


def value_after(arguments: list[str], *options: str) -> str | None:
    for option in options:
        if option in arguments[:-1]:
            return arguments[arguments.index(option) + 1]
    return None


def read_folder(arguments: list[str]) -> str | None:
    """The model folder a command reads."""
    if arguments[1:2] in (["embed"], ["info"]) and len(arguments) > 2:
        return arguments[2]
    return value_after(arguments, "--model-dir", "--model_name_or_path")


def run_command(arguments: list[str]) -> int:
    """`hf-elmo ARGS` by `hf_elmo.cli.main`, `python SCRIPT ARGS` as `__main__`: the exit status."""
    if arguments[0] == "hf-elmo":
        from hf_elmo.cli import main

        try:
            return main(arguments[1:])
        except SystemExit as exit:  # `--help`
            return exit.code or 0
    assert arguments[0] == "python" and (ROOT / arguments[1]).is_file(), f"not a command the test runs: {arguments}"
    saved = sys.argv, sys.path
    sys.argv, sys.path = arguments[1:], [str((ROOT / arguments[1]).parent), *sys.path]  # as `python SCRIPT` sets them
    try:
        runpy.run_path(str(ROOT / arguments[1]), run_name="__main__")
    except SystemExit as exit:
        return exit.code or 0
    finally:
        sys.argv, sys.path = saved
    return 0


def run_shell(block: Block, folder: Path, tiny: Path) -> None:
    written, previous_output = set(), None
    for line in shell_lines(block):
        arguments = arguments_of(line)
        if not arguments:
            continue
        reads = read_folder(arguments)
        if reads and reads not in written and not (folder / reads).exists() and reads not in hf_elmo.BUNDLED_MODELS:
            shutil.copytree(tiny, folder / reads)
        if "# the same" in line and previous_output:
            shutil.rmtree(folder / previous_output)
        code = run_command(arguments)
        assert code == 0, f"{block.id}: {line!r} exited with {code}"
        previous_output = value_after(arguments, "--output-dir", "--output_dir")
        written.add(previous_output)


@pytest.mark.parametrize("block", BLOCKS, ids=[block.id for block in BLOCKS])
def test_snippet_runs(block, workdir, inputs):
    skip = SKIP.match(block.marker)
    if skip:
        pytest.skip(block.marker)
    if block.language == "python":
        run_python(block, python_names(block, workdir, inputs))
    else:
        run_shell(block, workdir, inputs / "tiny")


# -- README.md --------------------------------------------------------------------------------------------------------


def test_the_readme_is_a_page_a_user_reads_through():
    lines = (ROOT / "README.md").read_text(encoding="utf-8").splitlines()
    assert len(lines) <= README_LINES, (
        f"README.md has {len(lines)} lines, more than {README_LINES}: move depth to docs/"
    )


def readme_python_block(heading: str) -> Block:
    """The first Python block of README.md under `## heading`."""
    lines = (ROOT / "README.md").read_text(encoding="utf-8").splitlines()
    start = lines.index(f"## {heading}") + 1
    readme = [block for block in BLOCKS if block.path.name == "README.md" and block.language == "python"]
    return next(block for block in readme if block.line > start)


def test_the_readme_use_block_gives_the_layers_it_describes(workdir):
    """On the bundled `ko-nsmc`, as written: the top layer `(batch, units + 2, 512)` and 3 layers."""
    namespace = {}
    run_python(readme_python_block("Use"), namespace)
    output, batch = namespace["output"], namespace["batch"]
    assert output.last_hidden_state.shape == (*batch["attention_mask"].shape, 512)
    assert len(output.hidden_states) == 3
    assert torch.equal(output.hidden_states[-1], output.last_hidden_state)


def test_the_readme_fine_tuning_block_trains_on_a_csv_of_label_names(workdir):
    """The README's Fine-tuning block as written, on a CSV file whose labels are names: `load_dataset` reads them as
    strings, the cast makes them the class ids of a `ClassLabel`, the model's `id2label` is its names, and the
    `Trainer` runs its steps (3 epochs of one batch), logs a loss from the first step, and leaves the trained model
    with its tokenizer in the output folder, which loads, and no checkpoint beside it."""
    from datasets import load_dataset

    assert load_dataset("csv", data_files="train.csv")["train"].features["label"].dtype == "large_string"
    namespace = {}
    run_python(readme_python_block("Fine-tuning"), namespace)
    train, model = namespace["train"], namespace["model"]
    assert train.features["label"].names == ["negative", "positive"]
    assert list(train["label"]) == [["negative", "positive"].index(label) for label in SENTIMENTS * 2]
    assert model.config.id2label == {0: "negative", 1: "positive"}
    trainer = namespace["trainer"]
    assert trainer.state.global_step == 3 and "loss" in trainer.state.log_history[0]
    folder = workdir / "outputs/my-classifier"
    assert not list(folder.glob("checkpoint-*"))
    reloaded = ElmoForSequenceClassification.from_pretrained(folder)
    assert reloaded.config.id2label == {0: "negative", 1: "positive"}
    for name, parameter in model.state_dict().items():
        assert torch.equal(reloaded.state_dict()[name], parameter), name
    assert ElmoTokenizer.from_pretrained(folder).pre_tokenizer == namespace["tokenizer"].pre_tokenizer
