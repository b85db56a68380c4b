"""The fine-tuning examples run end to end on tiny local files; their output folders reload with the Auto classes."""

import csv
import errno
import json
import os
import random
import re
import subprocess
import sys
import types
from collections import Counter
from pathlib import Path

import numpy as np
import pytest
import torch
from transformers import AutoModelForSequenceClassification, AutoModelForTokenClassification, AutoTokenizer, pipeline
from utils import FLOAT32_TOLERANCE, require, tiny_config, word_vocab_tokenizer, write_original_checkpoint

from hf_elmo import ElmoForPreTraining, ElmoModel, ElmoTokenizer
from hf_elmo.errors import run_entry_point
from hf_elmo.folder_layout import SIF_A
from hf_elmo.folders import lock_output
from hf_elmo.loading import read_weights_with_prefix
from hf_elmo.modeling_elmo import word_vectors_from_softmax

require("datasets")
require("seqeval")
require("accelerate")
ROOT = Path(__file__).resolve().parents[1]
POSITIVE, NEGATIVE = ["good", "great", "fine", "nice"], ["bad", "awful", "poor", "sad"]
UNSEEN = ["never", "written"]  # words of a word vocabulary that `write_sentences` never writes
FILLER = ["the", "movie", "was", "a", "plot", "and", "it", "felt"]
PLACES, PEOPLE = ["Paris", "Rome", "Oslo", "Lima"], ["Ada", "Bob", "Eve"]


def run_example(script: str, arguments: list, tmp_path: Path) -> subprocess.CompletedProcess:
    """The example run as a script, offline on one thread; it must succeed."""
    env = {
        **os.environ,
        "PYTHONPATH": str(ROOT),
        "OMP_NUM_THREADS": "1",
        "CUDA_VISIBLE_DEVICES": "",
        "HF_HUB_OFFLINE": "1",
        "HF_DATASETS_CACHE": str(tmp_path / "datasets-cache"),
    }
    command = [
        sys.executable,
        str(ROOT / "examples" / script),
        *map(str, arguments),
        "--report_to",
        "none",
        "--save_strategy",
        "no",
        "--disable_tqdm",
        "true",
        "--seed",
        "0",
    ]
    result = subprocess.run(command, env=env, capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr[-4000:]
    return result


def front_matter(card: str) -> list[str]:
    assert card.startswith("---\n")
    return card.split("---\n")[1].splitlines()


def write_sentences(path: Path, n: int, seed: int, pairs: bool = False) -> list[dict]:
    """Sentences labelled "pos" when they hold positive words, "neg" when negative ones (csv, or json lines)."""
    rng = random.Random(seed)
    rows = []
    for _ in range(n):
        label = rng.randrange(2)
        words = rng.sample(FILLER, 1) + rng.sample(POSITIVE if label else NEGATIVE, 2)
        rng.shuffle(words)
        row = {"text": " ".join(words), "label": ["neg", "pos"][label]}
        if pairs:
            row["text_pair"] = " ".join(rng.sample(FILLER, 2))
        rows.append(row)
    if path.suffix == ".csv":
        with open(path, "w", newline="", encoding="utf-8") as handle:
            writer = csv.DictWriter(handle, fieldnames=list(rows[0]))
            writer.writeheader()
            writer.writerows(rows)
    else:
        path.write_text("".join(json.dumps(row) + "\n" for row in rows), encoding="utf-8")
    return rows


def tagged_sentences(
    n: int, seed: int, fillers=FILLER, places=PLACES, people=PEOPLE, n_fillers: int = 3
) -> list[tuple[list[str], list[str]]]:
    """`n` sentences of `n_fillers` fillers, a place (B-LOC) and a person (B-PER) in random order, with their tags."""
    rng = random.Random(seed)
    sentences = []
    for _ in range(n):
        words = rng.sample(fillers, n_fillers) + rng.sample(places, 1) + rng.sample(people, 1)
        rng.shuffle(words)
        sentences.append((words, ["B-LOC" if w in places else "B-PER" if w in people else "O" for w in words]))
    return sentences


def write_conll(path: Path, sentences) -> None:
    blocks = ["".join(f"{word} NN {tag}\n" for word, tag in zip(words, tags)) for words, tags in sentences]
    path.write_text("-DOCSTART- -X- O\n\n" + "\n".join(blocks), encoding="utf-8")


def test_run_classification(base_model, tmp_path):
    train_rows = write_sentences(tmp_path / "train.csv", 48, seed=0)
    write_sentences(tmp_path / "validation.csv", 16, seed=1)
    test_rows = write_sentences(tmp_path / "test.csv", 16, seed=2)
    output_dir = tmp_path / "classifier"
    result = run_example(
        "run_classification.py",
        [
            "--model_name_or_path",
            base_model,
            "--train_file",
            tmp_path / "train.csv",
            "--validation_file",
            tmp_path / "validation.csv",
            "--test_file",
            tmp_path / "test.csv",
            "--do_train",
            "--do_eval",
            "--do_predict",
            "--output_dir",
            output_dir,
            "--max_steps",
            "4",
            "--per_device_train_batch_size",
            "8",
            "--learning_rate",
            "0.05",
            "--task_lstm_dim",
            "4",
            "--pooling",
            "mean_max",
        ],
        tmp_path,
    )

    results = json.loads((output_dir / "all_results.json").read_text())
    for split in ("eval", "test"):
        for metric in ("accuracy", "macro_f1"):
            assert 0.0 <= results[f"{split}_{metric}"] <= 1.0
            assert f"{metric} = {results[f'{split}_{metric}']:.4f}" in result.stdout
    assert results["train_runtime"] > 0

    # The saved folder reloads with the Auto classes and predicts what the script predicted.
    tokenizer = AutoTokenizer.from_pretrained(output_dir)
    model = AutoModelForSequenceClassification.from_pretrained(output_dir).eval()
    assert model.config.id2label == {0: "neg", 1: "pos"} and model.config.task_lstm_dim == 4
    assert model.config.freeze_bilm and not any(p.requires_grad for p in model.elmo.parameters())
    batch = tokenizer([row["text"] for row in test_rows], padding=True, return_tensors="pt")
    with torch.no_grad():
        predicted = [model.config.id2label[i] for i in model(**batch).logits.argmax(-1).tolist()]
    assert predicted == (output_dir / "test_predictions.txt").read_text().split()
    gold = [row["label"] for row in test_rows]
    assert results["test_accuracy"] == pytest.approx(np.mean([p == g for p, g in zip(predicted, gold)]))

    header = front_matter((output_dir / "README.md").read_text())
    assert {"library_name: hf_elmo", "pipeline_tag: text-classification", "license: apache-2.0"} <= set(header)
    assert not any(line.startswith("base_model:") for line in header)  # a temporary folder is not worth naming
    assert (
        f"| test | {results['test_accuracy']:.4f} | {results['test_macro_f1']:.4f} |"
        in (output_dir / "README.md").read_text()
    )

    # The fine-tuned folder is itself a model to evaluate: same labels, same test figures (json lines, pairs absent).
    # Only --do_predict: the training file given beside it is not trained on.
    for name, rows in (("test", test_rows), ("train", train_rows)):
        (tmp_path / f"{name}.jsonl").write_text("".join(json.dumps(row) + "\n" for row in rows), encoding="utf-8")
    run_example(
        "run_classification.py",
        [
            "--model_name_or_path",
            output_dir,
            "--test_file",
            tmp_path / "test.jsonl",
            "--train_file",
            tmp_path / "train.jsonl",
            "--do_predict",
            "--output_dir",
            tmp_path / "evaluation",
        ],
        tmp_path,
    )
    again = json.loads((tmp_path / "evaluation" / "all_results.json").read_text())
    assert "train_runtime" not in again and not (tmp_path / "evaluation" / "model.safetensors").exists()
    assert again["test_accuracy"] == pytest.approx(results["test_accuracy"])
    assert again["test_macro_f1"] == pytest.approx(results["test_macro_f1"])


@pytest.fixture(scope="module")
def pretraining_folder(tmp_path_factory) -> Path:
    """A random tiny `ElmoForPreTraining` folder as `hf-elmo pretrain` saves it: the biLM, its word softmax, and a
    tokenizer whose word vocabulary holds the words of `write_sentences` and the `UNSEEN` ones."""
    folder = tmp_path_factory.mktemp("pretraining")
    tokenizer = word_vocab_tokenizer(folder, [*FILLER, *POSITIVE, *NEGATIVE, *UNSEEN])
    torch.manual_seed(0)
    config = tiny_config(word_vocab_size=tokenizer.word_vocab_size, n_negative_samples=4)
    ElmoForPreTraining(config).save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    return folder


def test_run_classification_starts_word_vectors_from_the_pretraining_softmax(
    pretraining_folder, tmp_path, in_process, capsys
):
    """`--word_vectors_from_softmax`: the softmax's rows, at its width, train beside the frozen biLM, and the folder's
    tokenizer gives their ids to the text-classification pipeline unasked."""
    write_sentences(tmp_path / "train.csv", 32, seed=0)
    arguments = ["--model_name_or_path", pretraining_folder, "--train_file", tmp_path / "train.csv", "--do_train"]
    output_dir = tmp_path / "classifier"
    code, stderr = in_process(
        "run_classification.py",
        [
            *arguments,
            "--word_vectors_from_softmax",
            "--output_dir",
            output_dir,
            "--max_steps",
            "3",
            "--per_device_train_batch_size",
            "8",
            "--learning_rate",
            "0.05",
        ],
        capsys,
    )
    assert code == 0, stderr
    model = AutoModelForSequenceClassification.from_pretrained(output_dir).eval()
    tokenizer = AutoTokenizer.from_pretrained(output_dir)
    assert (model.config.word_vector_dim, model.config.word_vector_vocab_size) == (8, tokenizer.word_vocab_size)
    softmax = word_vectors_from_softmax(read_weights_with_prefix(pretraining_folder, "softmax."))
    table = model.task_encoder.word_vectors.weight
    unseen, trained = ([tokenizer.word_to_id(word) for word in words] for words in (UNSEEN, POSITIVE + NEGATIVE))
    assert torch.equal(table[unseen], softmax[unseen])  # copied, and in no training sentence
    assert not torch.equal(table[trained], softmax[trained])
    bilm = ElmoModel.from_pretrained(pretraining_folder).state_dict()
    assert all(torch.equal(value, bilm[name]) for name, value in model.elmo.state_dict().items())  # frozen

    texts = ["a good movie", "the plot felt awful", "new words"]
    results = pipeline("text-classification", model=str(output_dir))(texts)
    with torch.no_grad():
        probabilities = model(**tokenizer(texts, padding=True, return_tensors="pt")).logits.softmax(-1)
    assert [result["label"] for result in results] == [
        model.config.id2label[i] for i in probabilities.argmax(-1).tolist()
    ]
    for result, row in zip(results, probabilities):
        assert result["score"] == pytest.approx(row.max().item(), abs=FLOAT32_TOLERANCE)

    code, stderr = in_process(
        "run_classification.py",
        [*arguments, "--word_vector_dim", "4", "--output_dir", tmp_path / "scratch", "--max_steps", "1"],
        capsys,
    )
    assert code == 0, stderr
    config = AutoModelForSequenceClassification.from_pretrained(tmp_path / "scratch").config
    assert (config.word_vector_dim, config.word_vector_vocab_size) == (4, tokenizer.word_vocab_size)
    assert AutoTokenizer.from_pretrained(tmp_path / "scratch").word_vector_ids
    code, stderr = in_process(
        "run_classification.py",
        [*arguments, "--word_vectors_from_softmax", "--word_vector_dim", "4", "--output_dir", tmp_path / "no"],
        capsys,
    )
    assert (code, stderr) == (
        2,
        "run_classification.py: error: --word_vector_dim 4: the word vectors from the softmax are its 8 values wide; "
        "leave --word_vector_dim out\n",
    )


def test_examples_take_a_bundled_model_and_refuse_an_unknown_name_at_once(tmp_path, in_process, capsys):
    """`--model_name_or_path ko-nsmc` is the bundled biLM; offline, a name that is neither a folder nor bundled is one
    line naming HF_HUB_OFFLINE=1 instead of minutes of Hub retries and a traceback."""
    write_sentences(tmp_path / "validation.csv", 8, seed=1)
    write_conll(tmp_path / "dev.conll", tagged_sentences(4, seed=1))
    evaluations = {
        "run_classification.py": ["--validation_file", tmp_path / "validation.csv"],
        "run_token_classification.py": ["--validation_file", tmp_path / "dev.conll"],
    }
    for script, data in evaluations.items():
        output_dir = tmp_path / script
        evaluated = run_example(
            script, ["--model_name_or_path", "ko-nsmc", *data, "--do_eval", "--output_dir", output_dir], tmp_path
        )
        assert 0.0 <= json.loads((output_dir / "all_results.json").read_text())["eval_accuracy"] <= 1.0
        assert "pin_memory" not in evaluated.stderr  # no GPU here: no pinned memory, and no warning about it

        arguments = ["--model_name_or_path", "someone/elmo", *data, "--do_eval", "--output_dir", tmp_path / "no"]
        assert in_process(script, arguments, capsys) == (
            1,
            f"{script}: error: no such model folder or bundled model (ko-nsmc, ko-nsmc-sentiment): someone/elmo; "
            "as a Hub id it is not in the Hub cache, and HF_HUB_OFFLINE=1 is set (unset it to download it)\n",
        )
        assert not (tmp_path / "no").exists()


def import_example(name: str):
    """An example script of `examples/` as a module, to call its functions (and `main`) in this process."""
    sys.path.insert(0, str(ROOT / "examples"))
    try:
        return __import__(name)
    finally:
        sys.path.remove(str(ROOT / "examples"))


# What every in-process run of an example adds: no reports, no checkpoints, no GPU, one seed.
QUIET = ["--report_to", "none", "--save_strategy", "no", "--disable_tqdm", "true", "--seed", "0", "--use_cpu"]


@pytest.fixture
def in_process(monkeypatch, tmp_path):
    """Runs an example's `main` here, as the script runs it (through `run_entry_point`, its name in `sys.argv[0]`,
    offline, datasets' cache in `tmp_path`); returns its exit status and what it printed on stderr."""
    import datasets

    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setattr("huggingface_hub.constants.HF_HUB_OFFLINE", True)  # read once, as huggingface_hub loaded
    monkeypatch.setattr(datasets.config, "HF_DATASETS_CACHE", str(tmp_path / "datasets-cache"))

    def run(script: str, arguments: list, capsys, after_quiet: tuple = ()) -> tuple[int, str]:
        """`after_quiet`: options that override QUIET's (`--save_strategy steps`)."""
        module = import_example(script.removesuffix(".py"))
        monkeypatch.setattr(sys, "argv", [script])
        capsys.readouterr()
        try:
            code = run_entry_point(module.main, [*map(str, arguments), *QUIET, *map(str, after_quiet)])
        except SystemExit as exit:  # argparse's, which run_entry_point lets pass
            code = exit.code
        return code, capsys.readouterr().err

    return run


@pytest.fixture
def no_model_loads(monkeypatch):
    """Any model loaded from a folder fails the test: the mistakes below are found before."""
    from transformers import PreTrainedModel

    def refuse(cls, *args, **kwargs):
        raise AssertionError(f"{cls.__name__}.from_pretrained was called")

    monkeypatch.setattr(PreTrainedModel, "from_pretrained", classmethod(refuse))


def write_csv(path: Path, header: list[str], rows: list[list[str]]) -> Path:
    with open(path, "w", newline="", encoding="utf-8") as handle:
        writer = csv.writer(handle)
        writer.writerow(header)
        writer.writerows(rows)
    return path


def snapshot(folder: Path) -> dict[str, bytes]:
    """Every file under `folder` by relative path, with its bytes."""
    return {str(path.relative_to(folder)): path.read_bytes() for path in folder.rglob("*") if path.is_file()}


def stale_result_folder(folder: Path) -> Path:
    """What an earlier run of run_classification.py left: a model, a checkpoint and its evaluation."""
    (folder / "checkpoint-10").mkdir(parents=True)
    (folder / "checkpoint-10" / "trainer_state.json").write_text("{}")
    (folder / "model.safetensors").write_bytes(b"an earlier model")
    (folder / "eval_results.json").write_text(json.dumps({"eval_accuracy": 0.72}))
    (folder / "all_results.json").write_text(json.dumps({"eval_accuracy": 0.72}))
    return folder


@pytest.mark.parametrize("script", ["run_classification.py", "run_token_classification.py"])
def test_examples_refuse_an_output_folder_that_exists_in_one_line(base_model, tmp_path, in_process, capsys, script):
    if script == "run_classification.py":
        data = tmp_path / "train.csv"
        write_sentences(data, 8, seed=0)
    else:
        data = tmp_path / "train.conll"
        write_conll(data, tagged_sentences(8, seed=0))
    output_dir = stale_result_folder(tmp_path / "out")
    before = snapshot(output_dir)
    arguments = ["--model_name_or_path", base_model, "--train_file", data, "--do_train", "--output_dir", output_dir]
    code, stderr = in_process(script, arguments, capsys)
    assert (code, stderr) == (
        2,
        f"{script}: error: --output_dir {output_dir} exists and is not empty (pass --overwrite_output_dir to "
        "replace it)\n",
    )
    assert snapshot(output_dir) == before
    assert sorted(path.name for path in tmp_path.iterdir() if path.name.startswith(".")) == []


def test_overwrite_output_dir_replaces_the_folder_whole(base_model, tmp_path, in_process, capsys):
    """The issue's run: trained again into a folder of an earlier run with evaluation, now without; nothing of the
    earlier run is left (checkpoint, eval_results.json, its accuracy in all_results.json), and the card says that this
    run evaluated nothing instead of showing an empty table."""
    write_sentences(tmp_path / "train.csv", 8, seed=0)
    output_dir = stale_result_folder(tmp_path / "out")
    arguments = ["--model_name_or_path", base_model, "--train_file", tmp_path / "train.csv", "--do_train"]
    arguments += ["--output_dir", output_dir, "--overwrite_output_dir", "--max_steps", "1"]
    code, stderr = in_process("run_classification.py", arguments, capsys)
    assert code == 0, stderr

    assert not (output_dir / "checkpoint-10").exists() and not (output_dir / "eval_results.json").exists()
    results = json.loads((output_dir / "all_results.json").read_text())
    assert "train_loss" in results and not any(name.startswith("eval_") for name in results)
    assert (output_dir / "model.safetensors").read_bytes() != b"an earlier model"
    assert AutoModelForSequenceClassification.from_pretrained(output_dir).config.id2label == {0: "neg", 1: "pos"}
    card = (output_dir / "README.md").read_text()
    assert "| split |" not in card and "This run evaluated the model on no split" in card
    assert not any(line.startswith("metrics:") for line in front_matter(card))
    assert sorted(path.name for path in tmp_path.iterdir()) == ["datasets-cache", "out", "train.csv"]


def test_the_output_folder_appears_complete_or_not_at_all(tmp_path):
    """What a run writes goes to a staging folder beside the output folder, which replaces it only when the run ends
    well: a failed run leaves the earlier folder as it was and no staging folder; a stopped run's staging folder is
    removed by the next run."""
    from transformers import TrainingArguments

    run_steps = import_example("run_steps")
    output_dir = stale_result_folder(tmp_path / "out")
    before = snapshot(output_dir)
    args = TrainingArguments(output_dir=str(output_dir), use_cpu=True, report_to="none")
    with pytest.raises(RuntimeError, match="killed"):
        with run_steps.output_written_whole(args, lock_output(output_dir)) as staging:
            assert args.output_dir == str(staging) and staging.parent == tmp_path
            (staging / "model.safetensors").write_bytes(b"half a model")
            raise RuntimeError("killed")
    assert snapshot(output_dir) == before and args.output_dir == str(output_dir)
    assert sorted(path.name for path in tmp_path.iterdir()) == ["out"]

    (tmp_path / ".out.partial").mkdir()  # left by a run killed with SIGKILL
    (tmp_path / ".out.partial" / "checkpoint-5").mkdir()
    with run_steps.output_written_whole(args, lock_output(output_dir)) as staging:
        assert list(staging.iterdir()) == []
        (staging / "all_results.json").write_text("{}")
    assert snapshot(output_dir) == {"all_results.json": b"{}"}
    assert sorted(path.name for path in tmp_path.iterdir()) == ["out"]


@pytest.mark.parametrize("script", ["run_classification.py", "run_token_classification.py", "run_qa.py"])
def test_an_empty_output_dir_is_refused_before_anything_runs(tmp_path, monkeypatch, in_process, capsys, script):
    """`--output_dir "$OUT"` with OUT not set, and `--overwrite_output_dir`: the folder the script runs in would be
    replaced. One line, exit status 2; the folder is left as it was."""
    monkeypatch.chdir(tmp_path)
    (tmp_path / "mine.txt").write_text("kept", encoding="utf-8")
    arguments = ["--model_name_or_path", "ko-nsmc", "--do_eval", "--validation_file", "mine.txt"]
    assert in_process(script, [*arguments, "--output_dir", "", "--overwrite_output_dir"], capsys) == (
        2,
        f"{script}: error: an empty argument (after --output_dir; a variable that is not set?); give a value\n",
    )
    assert [path.name for path in tmp_path.iterdir()] == ["mine.txt"]


@pytest.mark.parametrize("script", ["run_classification.py", "run_token_classification.py"])
def test_a_second_run_into_an_output_folder_being_written_is_refused_in_one_line(
    base_model, tmp_path, in_process, no_model_loads, capsys, script
):
    """A run started while another writes the same --output_dir (here this process holds its lock, as the first
    run's process would) would remove the first's staging folder and checkpoints: it ends in one line, exit status 1,
    before any model loads, touching nothing."""
    data = tmp_path / "train.csv"
    write_sentences(data, 8, seed=0)  # read once the output folder is settled
    output_dir = tmp_path / "out"
    (tmp_path / ".out.partial" / "checkpoint-40").mkdir(parents=True)  # the first run's
    arguments = ["--model_name_or_path", base_model, "--train_file", data, "--do_train", "--output_dir", output_dir]
    with lock_output(output_dir):
        code, stderr = in_process(script, arguments, capsys)
        assert (code, stderr) == (
            1,
            f"{script}: error: another run (process {os.getpid()}) is writing {output_dir}; wait for it to end, or "
            "stop it first\n",
        )
    assert sorted(path.name for path in tmp_path.iterdir()) == [".out.partial", "train.csv"]
    assert (tmp_path / ".out.partial" / "checkpoint-40").is_dir()


@pytest.mark.parametrize("script", ["run_classification.py", "run_token_classification.py"])
def test_a_link_where_the_lock_file_would_be_is_refused_in_one_line_and_not_followed(
    base_model, tmp_path, in_process, no_model_loads, capsys, script
):
    """`ln -s mine.txt .out.lock`: the run ends in one line, exit status 1, before any model loads; `mine.txt` does
    not get the run's process id (issue 50)."""
    write_sentences(tmp_path / "train.csv", 8, seed=0)
    mine, link, output_dir = tmp_path / "mine.txt", tmp_path / ".out.lock", tmp_path / "out"
    mine.write_bytes(b"the user's own bytes\n")
    link.symlink_to(mine)
    arguments = ["--model_name_or_path", base_model, "--train_file", tmp_path / "train.csv", "--do_train"]
    code, stderr = in_process(script, [*arguments, "--output_dir", output_dir], capsys)
    assert (code, stderr) == (
        1,
        f"{script}: error: {link} is a link (to {mine}) where hf_elmo makes its lock file; it was not followed and "
        "nothing was written through it: remove the link and run again\n",
    )
    assert mine.read_bytes() == b"the user's own bytes\n" and link.is_symlink() and not output_dir.exists()


def test_a_link_where_the_staging_folder_would_be_is_refused_and_what_it_names_is_unchanged(
    base_model, tmp_path, in_process, capsys
):
    """`ln -s mine .out.partial`, a folder of the user's: the run would train into it and replace the output with
    it; it ends in one line, exit status 1, and the user's folder holds what it held."""
    write_sentences(tmp_path / "train.csv", 8, seed=0)
    mine, link, output_dir = tmp_path / "mine", tmp_path / ".out.partial", tmp_path / "out"
    mine.mkdir()
    (mine / "keep.txt").write_text("kept")
    link.symlink_to(mine)
    arguments = ["--model_name_or_path", base_model, "--train_file", tmp_path / "train.csv", "--do_train"]
    code, stderr = in_process(
        "run_classification.py", [*arguments, "--max_steps", "1", "--output_dir", output_dir], capsys
    )
    assert (code, stderr) == (
        1,
        f"run_classification.py: error: cannot write {output_dir}: {link} is a link (to {mine}) where hf_elmo makes "
        "its staging folder; it was not followed and nothing was written through it: remove the link and run again\n",
    )
    assert [path.name for path in mine.iterdir()] == ["keep.txt"] and link.is_symlink() and not output_dir.exists()


def training_data(script: str, folder: Path) -> Path:
    """A small training file of the script's kind."""
    if script == "run_classification.py":
        write_sentences(folder / "train.csv", 8, seed=0)
        return folder / "train.csv"
    write_conll(folder / "train.conll", tagged_sentences(8, seed=0))
    return folder / "train.conll"


SAVING = ("--save_strategy", "steps", "--save_steps", "1")


@pytest.mark.parametrize("script", ["run_classification.py", "run_token_classification.py"])
def test_checkpoints_are_kept_beside_the_output_folder_never_in_it(base_model, tmp_path, in_process, capsys, script):
    """The folder called ready for the Hub holds no checkpoint and no optimizer state: the Trainer's checkpoints are
    in `OUTPUT.checkpoints/`, whole."""
    output_dir = tmp_path / "out"
    arguments = ["--model_name_or_path", base_model, "--train_file", training_data(script, tmp_path), "--do_train"]
    arguments += ["--max_steps", "2", "--output_dir", output_dir]
    code, stderr = in_process(script, arguments, capsys, after_quiet=SAVING)
    assert code == 0, stderr
    published = [path.relative_to(output_dir).as_posix() for path in output_dir.rglob("*")]
    assert "model.safetensors" in published
    assert not [name for name in published if name.startswith("checkpoint-") or name.endswith("optimizer.pt")]
    checkpoints = tmp_path / "out.checkpoints"
    assert sorted(path.name for path in checkpoints.iterdir()) == ["checkpoint-1", "checkpoint-2"]
    assert (checkpoints / "checkpoint-2" / "optimizer.pt").is_file()
    assert (checkpoints / "checkpoint-2" / "trainer_state.json").is_file()
    assert sorted(path.name for path in tmp_path.iterdir() if path.name.startswith(".")) == []


def test_an_earlier_runs_checkpoints_are_replaced_only_with_overwrite_output_dir(
    base_model, tmp_path, in_process, capsys
):
    data = training_data("run_classification.py", tmp_path)
    checkpoints = tmp_path / "out.checkpoints"
    (checkpoints / "checkpoint-10").mkdir(parents=True)
    (checkpoints / "checkpoint-10" / "optimizer.pt").write_bytes(b"an earlier run's")
    arguments = ["--model_name_or_path", base_model, "--train_file", data, "--do_train", "--max_steps", "1"]
    arguments += ["--output_dir", tmp_path / "out"]
    code, stderr = in_process("run_classification.py", arguments, capsys, after_quiet=SAVING)
    assert (code, stderr) == (
        2,
        f"run_classification.py: error: {checkpoints} exists, the checkpoints of an earlier run into --output_dir "
        f"{tmp_path / 'out'} (pass --overwrite_output_dir to replace them)\n",
    )
    assert (checkpoints / "checkpoint-10" / "optimizer.pt").read_bytes() == b"an earlier run's"
    code, stderr = in_process(
        "run_classification.py", [*arguments, "--overwrite_output_dir"], capsys, after_quiet=SAVING
    )
    assert code == 0, stderr
    assert [path.name for path in checkpoints.iterdir()] == ["checkpoint-1"]
    # A run that saves no checkpoint leaves none of the earlier run's beside the folder it replaces.
    code, stderr = in_process("run_classification.py", [*arguments, "--overwrite_output_dir"], capsys)
    assert code == 0, stderr
    assert not checkpoints.exists() and (tmp_path / "out" / "model.safetensors").is_file()


def test_a_link_where_the_checkpoints_would_go_is_refused_and_what_it_names_is_unchanged(
    base_model, tmp_path, in_process, capsys
):
    """`ln -s mine out.checkpoints`: even with --overwrite_output_dir, it ends in one line, exit status 1, the link
    not followed, the user's folder as it was and no output folder made."""
    mine, link, output_dir = tmp_path / "mine", tmp_path / "out.checkpoints", tmp_path / "out"
    mine.mkdir()
    (mine / "keep.txt").write_text("kept")
    link.symlink_to(mine)
    arguments = ["--model_name_or_path", base_model, "--train_file", training_data("run_classification.py", tmp_path)]
    arguments += ["--do_train", "--max_steps", "1", "--output_dir", output_dir, "--overwrite_output_dir"]
    code, stderr = in_process("run_classification.py", arguments, capsys, after_quiet=SAVING)
    error = stderr.splitlines()[-1]  # after the progress bars of the loading and the training
    assert code == 1 and error.startswith(f"run_classification.py: error: cannot write {output_dir}: ")
    assert f"{link} is a link (to {mine})" in error and "Traceback" not in stderr
    assert [path.name for path in mine.iterdir()] == ["keep.txt"] and link.is_symlink() and not output_dir.exists()


def test_a_full_disk_or_a_read_only_folder_is_one_line_and_leaves_nothing(
    base_model, tmp_path, in_process, monkeypatch, capsys
):
    """A model that cannot be saved (what safetensors raised on a full disk), or an output folder on a read-only
    filesystem (where the run's lock is the first thing it writes): one line, exit status 1, nothing left behind."""
    from safetensors import SafetensorError
    from transformers import modeling_utils

    from hf_elmo import folders

    write_sentences(tmp_path / "train.csv", 8, seed=0)
    output_dir = tmp_path / "out"
    arguments = ["--model_name_or_path", base_model, "--train_file", tmp_path / "train.csv", "--do_train"]
    arguments += ["--max_steps", "1", "--output_dir", output_dir]

    def full_disk(*args, **kwargs):
        raise SafetensorError("Error while serializing: I/O error: No space left on device (os error 28)")

    with monkeypatch.context() as patch:
        patch.setattr(modeling_utils, "safe_save_file", full_disk)
        code, stderr = in_process("run_classification.py", arguments, capsys)
    assert (code, stderr.splitlines()[-1], "Traceback" in stderr) == (
        1,
        f"run_classification.py: error: cannot write {output_dir}: No space left on device (os error 28); free some "
        "space and run again",
        False,
    )
    assert sorted(path.name for path in tmp_path.iterdir()) == ["datasets-cache", "train.csv"]

    def read_only_open(path, *args, **kwargs):
        if Path(path).parent == tmp_path:
            raise OSError(errno.EROFS, os.strerror(errno.EROFS))
        return os.open(path, *args, **kwargs)

    with monkeypatch.context() as patch:  # the folders module's own `os`, so that nothing else sees it
        patch.setattr(folders, "os", types.SimpleNamespace(**{**vars(os), "open": read_only_open}))
        code, stderr = in_process("run_classification.py", arguments, capsys)
    assert (code, stderr.splitlines()[-1], "Traceback" in stderr) == (
        1,
        f"run_classification.py: error: cannot write {output_dir}: Read-only file system; write to a folder on a "
        "writable filesystem",
        False,
    )
    assert sorted(path.name for path in tmp_path.iterdir()) == ["datasets-cache", "train.csv"]


def usage_mistakes(tmp_path: Path, base_model: Path) -> dict[str, tuple[str, list, str]]:
    """Each mistake of the issue: (script, arguments, the one line it gets after `SCRIPT: error: `)."""
    train = tmp_path / "train.csv"
    write_sentences(train, 4, seed=0)
    (tmp_path / "empty.csv").write_text("")
    write_csv(tmp_path / "header.csv", ["text", "label"], [])
    write_csv(tmp_path / "other.csv", ["sentence", "label"], [["a good movie", "pos"]])
    write_csv(tmp_path / "words.csv", ["words", "tags"], [["Ada lives in Paris", "B-PER O O B-LOC"]])
    write_conll(tmp_path / "train.conll", tagged_sentences(4, seed=0))
    model = ["--model_name_or_path", base_model, "--output_dir", tmp_path / "out"]
    train_on = [*model, "--do_train", "--train_file"]
    kept, kept_train = tmp_path / "kept", tmp_path / "kept" / "train.csv"
    kept.mkdir()
    write_sentences(kept_train, 4, seed=0)
    return {
        "missing train file": (
            "run_classification.py",
            [*train_on, tmp_path / "nope.csv"],
            f"no such file: {tmp_path / 'nope.csv'} (--train_file)",
        ),
        "missing validation file": (
            "run_classification.py",
            [*train_on, train, "--do_eval", "--validation_file", tmp_path / "valid.csv"],
            f"no such file: {tmp_path / 'valid.csv'} (--validation_file)",
        ),
        "other column names": (
            "run_classification.py",
            [*train_on, tmp_path / "other.csv"],
            f"the train file {tmp_path / 'other.csv'} has no column 'text' (columns: sentence, label); set "
            "--text_column",
        ),
        "empty csv": (
            "run_classification.py",
            [*train_on, tmp_path / "empty.csv"],
            f"{tmp_path / 'empty.csv'} is empty (--train_file)",
        ),
        "header-only csv": (
            "run_classification.py",
            [*train_on, tmp_path / "header.csv"],
            f"{tmp_path / 'header.csv'} holds no rows below its header",
        ),
        "invalid head option": (
            "run_classification.py",
            [*train_on, train, "--pooling", "maxx"],
            "--pooling must be 'mean', 'max' or 'mean_max', got 'maxx'",
        ),
        "a negative word vector size": (
            "run_classification.py",
            [*train_on, train, "--word_vector_dim", "-1"],
            "--word_vector_dim must be an integer >= 0, got -1",
        ),
        "word vectors without a word vocabulary": (
            "run_classification.py",
            [*train_on, train, "--word_vector_dim", "8"],
            "word vectors are looked up in the word vocabulary (word_vocab.json) of a pre-trained biLM's tokenizer: "
            f"{base_model} has none",
        ),
        "word vectors from a biLM-only folder": (
            "run_classification.py",
            [
                "--model_name_or_path",
                "ko-nsmc",
                *model[2:],
                "--do_train",
                "--train_file",
                train,
                "--word_vectors_from_softmax",
            ],
            "--word_vectors_from_softmax: ko-nsmc holds no pre-training softmax: give the folder hf-elmo pretrain "
            "saved, or --word_vector_dim N alone to learn the word vectors from scratch",
        ),
        "no tokens column": (
            "run_token_classification.py",
            [*train_on, tmp_path / "words.csv"],
            f"the train file {tmp_path / 'words.csv'} has no column 'tokens' (columns: words, tags); set "
            "--tokens_column",
        ),
        "missing conll file": (
            "run_token_classification.py",
            [*train_on, tmp_path / "nope.conll"],
            f"no such file: {tmp_path / 'nope.conll'} (--train_file)",
        ),
        "a crf constraint without a crf": (
            "run_token_classification.py",
            [*train_on, tmp_path / "train.conll", "--crf_constraint", "BIO"],
            "--crf_constraint BIO constrains a CRF: pass --use_crf too",
        ),
        "no data file": (
            "run_token_classification.py",
            [*model, "--do_train"],
            "give at least one of --train_file, --validation_file, --test_file",
        ),
        "evaluation into the model folder": (
            "run_classification.py",
            [
                *model[:2],
                "--output_dir",
                base_model,
                "--overwrite_output_dir",
                "--do_eval",
                "--validation_file",
                train,
            ],
            f"--output_dir {base_model} is the model folder: without --do_train, give another folder",
        ),
        "a data file inside the output folder": (
            "run_classification.py",
            [*model[:2], "--output_dir", kept, "--overwrite_output_dir", "--do_train", "--train_file", kept_train],
            f"{kept_train} is inside {kept}, which --overwrite_output_dir replaces whole: write to another folder",
        ),
    }


MISTAKES = [
    "missing train file",
    "missing validation file",
    "other column names",
    "empty csv",
    "header-only csv",
    "invalid head option",
    "a negative word vector size",
    "word vectors without a word vocabulary",
    "word vectors from a biLM-only folder",
    "no tokens column",
    "missing conll file",
    "a crf constraint without a crf",
    "no data file",
    "evaluation into the model folder",
    "a data file inside the output folder",
]


@pytest.mark.parametrize("mistake", MISTAKES)
def test_each_mistake_is_one_line_and_exit_status_2_before_the_model_loads(
    base_model, tmp_path, in_process, no_model_loads, capsys, mistake
):
    script, arguments, message = usage_mistakes(tmp_path, base_model)[mistake]
    before = snapshot(base_model)
    code, stderr = in_process(script, arguments, capsys)
    assert (code, stderr) == (2, f"{script}: error: {message}\n")
    assert not (tmp_path / "out").exists() and snapshot(base_model) == before


def test_the_folder_the_script_runs_in_is_never_replaced(base_model, tmp_path, monkeypatch, in_process, capsys):
    """`--output_dir . --overwrite_output_dir`, or a folder above the working one: the run would replace the folder
    the user works in, with all it holds. One line, exit status 2, before the model loads."""
    write_sentences(tmp_path / "train.csv", 4, seed=0)
    work = tmp_path / "work" / "inner"
    work.mkdir(parents=True)
    (work / "mine.txt").write_text("kept", encoding="utf-8")
    monkeypatch.chdir(work)
    for output_dir in (".", tmp_path / "work"):
        arguments = ["--model_name_or_path", base_model, "--output_dir", output_dir, "--overwrite_output_dir"]
        code, stderr = in_process(
            "run_classification.py", [*arguments, "--do_train", "--train_file", tmp_path / "train.csv"], capsys
        )
        shown = work if output_dir == "." else tmp_path / "work"
        assert (code, stderr) == (
            2,
            f"run_classification.py: error: {shown} holds the folder this command runs in, and "
            "--overwrite_output_dir replaces it whole: write elsewhere\n",
        )
        assert [path.name for path in work.iterdir()] == ["mine.txt"]


def test_an_argument_of_the_wrong_type_is_one_line_without_the_usage(base_model, tmp_path, in_process, capsys):
    """argparse prints the usage above its error: with every TrainingArguments option, hundreds of lines."""
    write_sentences(tmp_path / "train.csv", 4, seed=0)
    arguments = ["--model_name_or_path", base_model, "--train_file", tmp_path / "train.csv", "--do_train"]
    code, stderr = in_process("run_classification.py", [*arguments, "--max_steps", "many"], capsys)
    assert code == 2 and stderr.count("\n") == 1, stderr
    assert stderr.startswith("run_classification.py: error: argument --max_steps") and "'many'" in stderr


def test_run_classification_predicts_unlabelled_text_with_a_fine_tuned_classifier(
    base_model, tmp_path, in_process, capsys
):
    """A test file without labels, for a classifier that has its own: the predictions, named by its labels."""
    classifier = AutoModelForSequenceClassification.from_pretrained(
        base_model, num_labels=2, id2label={0: "neg", 1: "pos"}, label2id={"neg": 0, "pos": 1}
    )
    classifier.save_pretrained(tmp_path / "classifier")
    AutoTokenizer.from_pretrained(base_model).save_pretrained(tmp_path / "classifier")
    write_csv(tmp_path / "test.csv", ["text"], [["a good movie"], ["sad"], ["the plot"]])
    arguments = ["--model_name_or_path", tmp_path / "classifier", "--test_file", tmp_path / "test.csv"]
    code, stderr = in_process(
        "run_classification.py", [*arguments, "--do_predict", "--output_dir", tmp_path / "out"], capsys
    )
    assert code == 0, stderr
    predicted = (tmp_path / "out" / "test_predictions.txt").read_text().split()
    assert len(predicted) == 3 and set(predicted) <= {"neg", "pos"}


@pytest.mark.parametrize(
    "base, front, text",
    [
        ("someone/elmo", "base_model: someone/elmo", "from the Hub model `someone/elmo`: "),
        ("ko-nsmc", None, 'from `ko-nsmc`, a model shipped inside the hf_elmo package (`hf_elmo.bundled_model_path("'),
        ("LOCAL", None, "from the local folder `LOCAL`: "),
    ],
    ids=["hub id", "bundled", "local folder"],
)
def test_the_fine_tuned_card_names_its_base_model_in_base_model_only_when_it_is_a_hub_id(tmp_path, base, front, text):
    """`base_model` must be a Hub id: a bundled model or a local folder is named in the card's text instead. With
    results, the card has their table; without, a sentence saying that the run evaluated nothing."""
    model_card = import_example("model_card")
    base = str(tmp_path) if base == "LOCAL" else base
    text = text.replace("LOCAL", str(tmp_path))
    common = dict(script="run_classification.py", pipeline_tag="text-classification", tags=["text-classification"])
    common |= dict(license="apache-2.0", head="sentence classification", freeze_bilm=True, data_files=["train.csv"])
    common |= dict(auto_class="AutoModelForSequenceClassification", usage="model(**batch)")
    results = {"validation": {"accuracy": 0.5, "macro_f1": 0.25}, "test": {"accuracy": 0.75}}
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    card = model_card.write_fine_tuned_card(tmp_path / "a", model_name_or_path=base, results=results, **common)
    card = card.read_text()
    header = front_matter(card)
    assert [line for line in header if line.startswith("base_model:")] == ([front] if front else [])
    assert text in card and "http" not in card
    table = [
        "| split | accuracy | macro_f1 |",
        "| --- | --- | --- |",
        "| validation | 0.5000 | 0.2500 |",
        "| test | 0.7500 |  |",
    ]
    assert "\n".join(table) + "\n" in card
    assert header[-3:] == ["metrics:", "- accuracy", "- macro_f1"]

    card = model_card.write_fine_tuned_card(tmp_path / "b", model_name_or_path=base, results={}, **common).read_text()
    assert "| split |" not in card and "This run evaluated the model on no split" in card
    assert not any(line.startswith("metrics:") for line in front_matter(card))


def test_convert_original_elmo_takes_the_files_it_asks_for_and_keeps_a_folder_that_exists(tmp_path, capsys):
    """Its offline advice ("pass its local path instead") names flags it has; `--help` lists them; without network
    the public URLs are only defaults; an output folder that exists is replaced only with --overwrite."""
    require("h5py")
    from hf_elmo.conversion_original import ORIGINAL_OPTIONS_URL, ORIGINAL_WEIGHTS_URL

    script = import_example("convert_original_elmo")
    with pytest.raises(SystemExit) as exit:
        script.main(["--help"])
    assert exit.value.code == 0
    shown = capsys.readouterr().out
    assert all(flag in shown for flag in ("--options-file", "--weight-file", "--output-dir", "--overwrite"))
    defaults = script.parse_arguments([])
    assert (defaults.options_file, defaults.weight_file) == (ORIGINAL_OPTIONS_URL, ORIGINAL_WEIGHTS_URL)
    assert defaults.output_dir == "outputs/elmo-original"

    options, weights = write_original_checkpoint(tmp_path / "original", tiny_config(), seed=1)
    arguments = ["--options-file", str(options), "--weight-file", str(weights), "--output-dir", str(tmp_path / "elmo")]
    assert script.main(arguments) == 0
    assert "cos(bank: finance, bank: river)" in capsys.readouterr().out
    assert ElmoModel.from_pretrained(tmp_path / "elmo").config.projection_dim == tiny_config().projection_dim
    before = snapshot(tmp_path / "elmo")
    capsys.readouterr()
    assert script.main(arguments) == 1
    stderr = capsys.readouterr().err
    assert (
        stderr.startswith(f"convert_original_elmo.py: error: {tmp_path / 'elmo'} exists") and "--overwrite" in stderr
    )
    assert stderr.count("\n") == 1 and snapshot(tmp_path / "elmo") == before
    assert script.main([*arguments, "--overwrite"]) == 0


@pytest.mark.parametrize("crf_arguments", [[], ["--use_crf", "--crf_constraint", "BIO"]], ids=["softmax", "crf"])
def test_run_token_classification(base_model, tmp_path, crf_arguments):
    write_conll(tmp_path / "train.conll", tagged_sentences(48, seed=0))
    validation = tagged_sentences(16, seed=1)
    (tmp_path / "validation.json").write_text(json.dumps([{"tokens": w, "tags": t} for w, t in validation]))
    test = tagged_sentences(16, seed=2)
    with open(tmp_path / "test.csv", "w", newline="", encoding="utf-8") as handle:
        writer = csv.writer(handle)
        writer.writerow(["tokens", "tags"])
        writer.writerows([" ".join(words), " ".join(tags)] for words, tags in test)
    output_dir = tmp_path / "tagger"
    run_example(
        "run_token_classification.py",
        [
            "--model_name_or_path",
            base_model,
            "--train_file",
            tmp_path / "train.conll",
            "--validation_file",
            tmp_path / "validation.json",
            "--test_file",
            tmp_path / "test.csv",
            "--do_train",
            "--do_eval",
            "--do_predict",
            "--output_dir",
            output_dir,
            "--max_steps",
            "4",
            "--per_device_train_batch_size",
            "8",
            "--learning_rate",
            "0.05",
            *crf_arguments,
        ],
        tmp_path,
    )

    results = json.loads((output_dir / "all_results.json").read_text())
    for split in ("eval", "test"):
        for metric in ("precision", "recall", "f1", "accuracy"):
            assert 0.0 <= results[f"{split}_{metric}"] <= 1.0

    tokenizer = AutoTokenizer.from_pretrained(output_dir)
    model = AutoModelForTokenClassification.from_pretrained(output_dir).eval()
    assert set(model.config.label2id) == {"O", "B-LOC", "B-PER"} and model.config.id2label[0] == "O"
    # With --use_crf, predict_word_labels gives the Viterbi path: the written predictions and metrics are its.
    assert (model.config.use_crf, model.config.crf_constraint) == ((True, "BIO") if crf_arguments else (False, None))
    encoding = tokenizer([words for words, _ in test], is_split_into_words=True, padding=True, return_tensors="pt")
    predicted = [[tag for tag, _ in sentence] for sentence in model.predict_word_labels(encoding)]
    written = [
        [line.split()[1] for line in block.splitlines()]
        for block in (output_dir / "test_predictions.conll").read_text().strip().split("\n\n")
    ]
    assert predicted == written
    words_written = [
        [line.split()[0] for line in block.splitlines()]
        for block in (output_dir / "test_predictions.conll").read_text().strip().split("\n\n")
    ]
    assert words_written == [words for words, _ in test]
    gold = [tag for _, tags in test for tag in tags]
    flat = [tag for sentence in predicted for tag in sentence]
    assert results["test_accuracy"] == pytest.approx(np.mean([p == g for p, g in zip(flat, gold)]))

    header = front_matter((output_dir / "README.md").read_text())
    assert {"library_name: hf_elmo", "pipeline_tag: token-classification"} <= set(header)


def test_run_token_classification_tags_words_of_korean_morphemes(tmp_path):
    """
    A biLM reading Korean morphemes: the script gives it each sentence's text (given words would stay one position
    each), trains on each word's tag at its first morpheme, and writes one predicted tag per word of the file.
    """
    require("kiwipiepy", reason='the Korean tests need the korean extra: pip install "hf_elmo[korean]"')
    torch.manual_seed(0)
    ElmoModel(tiny_config()).save_pretrained(tmp_path / "korean")
    ElmoTokenizer(max_characters_per_token=20, pre_tokenizer="korean_morphemes").save_pretrained(tmp_path / "korean")
    vocabulary = {
        "fillers": ["어제", "친구와", "함께", "영화를", "보았다", "밥을"],
        "places": ["서울에서", "부산에"],
        "people": ["철수가", "영희는"],
        "n_fillers": 2,
    }
    write_conll(tmp_path / "train.conll", tagged_sentences(16, seed=0, **vocabulary))
    test = tagged_sentences(6, seed=1, **vocabulary)
    write_conll(tmp_path / "test.conll", test)
    output_dir = tmp_path / "tagger"
    run_example(
        "run_token_classification.py",
        [
            "--model_name_or_path",
            tmp_path / "korean",
            "--train_file",
            tmp_path / "train.conll",
            "--test_file",
            tmp_path / "test.conll",
            "--do_train",
            "--do_predict",
            "--output_dir",
            output_dir,
            "--max_steps",
            "2",
            "--per_device_train_batch_size",
            "8",
        ],
        tmp_path,
    )
    written = [
        [line.split() for line in block.splitlines()]
        for block in (output_dir / "test_predictions.conll").read_text().strip().split("\n\n")
    ]
    assert [[word for word, _ in sentence] for sentence in written] == [words for words, _ in test]
    tokenizer = AutoTokenizer.from_pretrained(output_dir)
    model = AutoModelForTokenClassification.from_pretrained(output_dir).eval()
    encoding = tokenizer([" ".join(words) for words, _ in test], padding=True, return_tensors="pt")
    assert encoding["input_ids"].shape[1] > max(len(words) for words, _ in test) + 2  # morphemes, not words
    predicted = [[tag for tag, _ in sentence] for sentence in model.predict_word_labels(encoding)]
    assert predicted == [[tag for _, tag in sentence] for sentence in written]


def test_run_token_classification_scores_the_viterbi_path_of_a_crf_tagger(base_model, tmp_path):
    # A CRF tagger whose transitions forbid any tag twice in a row, so that its path cannot be the emissions' argmax;
    # given as it is (without --use_crf: it keeps its CRF), the example writes and scores that path.
    tags = ["O", "B-LOC", "B-PER"]
    tagger = AutoModelForTokenClassification.from_pretrained(
        base_model,
        num_labels=3,
        use_crf=True,
        crf_constraint="BIO",
        id2label=dict(enumerate(tags)),
        label2id={tag: i for i, tag in enumerate(tags)},
    ).eval()
    with torch.no_grad():
        tagger.crf.transitions.fill_diagonal_(-10.0)
    tagger.save_pretrained(tmp_path / "tagger")
    tokenizer = AutoTokenizer.from_pretrained(base_model)
    tokenizer.save_pretrained(tmp_path / "tagger")
    test = tagged_sentences(16, seed=2)
    write_conll(tmp_path / "test.conll", test)
    output_dir = tmp_path / "predicted"
    run_example(
        "run_token_classification.py",
        ["--model_name_or_path", tmp_path / "tagger", "--test_file", tmp_path / "test.conll"]
        + ["--do_predict", "--output_dir", output_dir],
        tmp_path,
    )

    written = [
        [line.split()[1] for line in block.splitlines()]
        for block in (output_dir / "test_predictions.conll").read_text().strip().split("\n\n")
    ]
    encoding = tokenizer([words for words, _ in test], is_split_into_words=True, padding=True, return_tensors="pt")
    assert written == [[tag for tag, _ in sentence] for sentence in tagger.predict_word_labels(encoding)]
    assert all(a != b for sentence in written for a, b in zip(sentence, sentence[1:]))
    words = torch.tensor([[word is not None for word in encoding.word_ids(i)] for i in range(len(test))])
    with torch.no_grad():
        argmax = tagger(**encoding).logits.argmax(dim=-1)
    assert written != [[tags[i] for i in row[keep].tolist()] for row, keep in zip(argmax, words)]
    results = json.loads((output_dir / "all_results.json").read_text())
    gold = [tag for _, sentence_tags in test for tag in sentence_tags]
    flat = [tag for sentence in written for tag in sentence]
    assert results["test_accuracy"] == pytest.approx(np.mean([p == g for p, g in zip(flat, gold)]))


def test_prepare_nsmc_splits_by_movie_and_nests_the_training_sizes(tmp_path):
    sys.path.insert(0, str(ROOT / "examples" / "nsmc"))
    try:
        import prepare_nsmc
    finally:
        sys.path.remove(str(ROOT / "examples" / "nsmc"))
    import gzip

    rng = random.Random(0)
    raw = tmp_path / "reviews.tsv.gz"
    with gzip.open(raw, "wt", encoding="utf-8") as handle:
        handle.write("movie_id\treview\trating\n")
        for review in range(600):
            handle.write(f"m{review % 40}\treview {review} of m{review % 40}\t{rng.randint(1, 10)}\n")
    arguments = ["--input", str(raw), "--validation-size", "20", "--test-size", "20", "--train-size", "30"]
    plain = prepare_nsmc.main([*arguments, "--output-dir", str(tmp_path / "plain")])
    nested = prepare_nsmc.main(
        [
            *arguments,
            "--output-dir",
            str(tmp_path / "nested"),
            "--extra-train-sizes",
            "60",
            "0",
            "--pretrain-size",
            "0",
        ]
    )

    def rows(folder, name):
        with open(tmp_path / folder / name, newline="", encoding="utf-8") as handle:
            return list(csv.reader(handle))[1:]

    for name in ("train.csv", "validation.csv", "test.csv"):  # the extra sizes leave the other files as they were
        assert rows("nested", name) == rows("plain", name)
    everything = rows("nested", "train_all.csv")
    assert len(everything) == plain["labelled"]["train"]["available"]
    assert rows("nested", "train_60.csv") == everything[:60] and rows("plain", "train.csv") == everything[:30]
    assert nested["pretrain_train"]["written"] == nested["pretrain_train"]["available"]
    movie = {
        split: {text.rsplit(" ", 1)[-1] for text, _ in rows("nested", f"{split}.csv")}
        for split in ("train_all", "validation", "test")
    }
    assert not movie["train_all"] & movie["test"] and not movie["train_all"] & movie["validation"]


def test_korsts_eval_scores_hf_elmos_sentence_vectors_for_each_variant(tmp_path):
    """The KorSTS table on a tiny folder with word counts and made-up pairs: a score for each choice of layers, common
    component and word weights, those of the default the Spearman correlation of `sentence_embedding`'s cosines."""
    require("sklearn")
    from scipy.stats import spearmanr

    from hf_elmo.pretraining import build_word_vocab
    from hf_elmo.sentence_weighting import WordCounts, reference_directions

    sys.path.insert(0, str(ROOT / "examples" / "nsmc"))
    try:
        import korsts_eval
    finally:
        sys.path.remove(str(ROOT / "examples" / "nsmc"))
    rng = random.Random(0)
    texts = [" ".join(rng.choices(FILLER + POSITIVE, k=rng.randint(2, 6))) for _ in range(30)]
    (tmp_path / "text.txt").write_text("\n".join(texts) + "\n", encoding="utf-8")
    build_word_vocab(texts, min_count=2).save(str(tmp_path / "word_vocab.json"))
    tokenizer = ElmoTokenizer(max_characters_per_token=20, vocab_file=str(tmp_path / "word_vocab.json"))
    folder = tmp_path / "model"
    torch.manual_seed(0)
    model = ElmoModel(tiny_config()).eval()
    model.save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    counts = WordCounts.of_text(tokenizer, [tmp_path / "text.txt"])
    counts.save_pretrained(folder)
    gold = [rng.uniform(0, 5) for _ in range(10)]
    with open(tmp_path / "sts-dev.tsv", "w", encoding="utf-8") as handle:
        handle.write("genre\tfilename\tyear\tid\tscore\tsentence1\tsentence2\n")
        for i, score in enumerate(gold):
            handle.write(f'news\tmade-up\t2024\t{i:04d}\t{score:.3f}\t{texts[2 * i]}\t"{texts[2 * i + 1]}\n')
    first, second = texts[0:20:2], ['"' + text for text in texts[1:20:2]]  # a quote mark is text, not quoting
    table = korsts_eval.main(
        [
            "--model",
            str(folder),
            "--data",
            str(tmp_path / "sts-dev.tsv"),
            "--reference-text",
            str(tmp_path / "text.txt"),
        ]
        + ["--a", "1e-2", "1e-4", "--directions", "2"]
    )
    removals = ("none", "reference text's", "reference text's mean and 2 directions", "KorSTS's own (diagnostic)")
    assert set(table) == {
        (layers, removed)
        for layers in ("layer 0", "layer 1", "layer 2", "average (default)", "layers 0 and 1")
        for removed in removals
    } | {"char 1-4-gram TF-IDF", "held out (mean of the halves)", "folder's own"}
    assert all(len(scores) == 3 for key, scores in table.items() if isinstance(key, tuple))
    assert -100 <= table["held out (mean of the halves)"] <= 100

    def default_vectors(sentences, a=None, **removed):
        batch = tokenizer(sentences, padding=True, return_word_labels=True, return_tensors="pt")
        labels = batch.pop("labels")
        weights = None if a is None else counts.sif_weights(labels, a)
        with torch.no_grad():
            return model.sentence_embedding(**batch, word_weights=weights, **removed)

    for column, a in enumerate([None, 1e-2, 1e-4]):
        cosines = torch.nn.functional.cosine_similarity(default_vectors(first, a), default_vectors(second, a))
        expected = 100 * spearmanr(cosines.numpy(), gold).statistic
        assert table[("average (default)", "none")][column] == pytest.approx(expected, abs=1e-4)
    # All-but-the-top: the reference text's mean and first 2 principal directions of the same vectors, taken out.
    mean, directions = reference_directions(default_vectors(texts, 1e-4), 2)
    removed = {"common_component": directions, "reference_mean": mean}
    cosines = torch.nn.functional.cosine_similarity(
        default_vectors(first, 1e-4, **removed), default_vectors(second, 1e-4, **removed)
    )
    expected = 100 * spearmanr(cosines.numpy(), gold).statistic
    scores = table[("average (default)", "reference text's mean and 2 directions")]
    assert scores[2] == pytest.approx(expected, abs=1e-3)
    # The folder's own vector: its sentence_bert_config.json's defaults (the average, SIF with SIF_A, nothing out).
    cosines = torch.nn.functional.cosine_similarity(default_vectors(first, SIF_A), default_vectors(second, SIF_A))
    assert table["folder's own"] == pytest.approx(100 * spearmanr(cosines.numpy(), gold).statistic, abs=1e-4)


def test_nsmc_frozen_features_probe(base_model, tmp_path):
    """The probe of a frozen biLM: each layer's mean over a review's words (not its boundaries), then a logistic
    regression with C chosen on validation."""
    require("sklearn")
    sys.path.insert(0, str(ROOT / "examples" / "nsmc"))
    try:
        import frozen_features
    finally:
        sys.path.remove(str(ROOT / "examples" / "nsmc"))
    for split, n, seed in (("train", 60, 0), ("validation", 20, 1), ("test", 20, 2)):
        rows = write_sentences(tmp_path / f"{split}.csv", n, seed)
        with open(tmp_path / f"{split}.csv", "w", newline="", encoding="utf-8") as handle:
            writer = csv.DictWriter(handle, fieldnames=["text", "label"])
            writer.writeheader()
            writer.writerows({"text": row["text"], "label": int(row["label"] == "pos")} for row in rows)
    results = frozen_features.main(
        [
            "--model",
            str(base_model),
            "--data-dir",
            str(tmp_path),
            "--output-dir",
            str(tmp_path / "probe"),
            "--batch-size",
            "7",
        ]
    )
    config = ElmoModel.from_pretrained(base_model).config
    assert results["features"] == (config.n_layers + 1) * 2 * config.projection_dim
    assert results["train_reviews"] == 60 and 0.0 <= results["test_accuracy"] <= 1.0
    assert json.loads((tmp_path / "probe" / "frozen_features.json").read_text()) == results

    model, tokenizer = ElmoModel.from_pretrained(base_model).eval(), ElmoTokenizer.from_pretrained(base_model)
    texts = ["the movie was good", "bad"]
    means = frozen_features.layer_means(model, tokenizer, texts, batch_size=2, max_length=64)
    for row, text in enumerate(texts):
        with torch.no_grad():
            layers = model(**tokenizer([text], return_tensors="pt"), output_hidden_states=True).hidden_states
        expected = torch.cat([layer[0, 1:-1].mean(0) for layer in layers])  # the words, without <S> and </S>
        torch.testing.assert_close(torch.from_numpy(means[row]), expected, atol=FLOAT32_TOLERANCE, rtol=0)


def import_nsmc_example(name: str):
    sys.path.insert(0, str(ROOT / "examples" / "nsmc"))
    try:
        return __import__(name)
    finally:
        sys.path.remove(str(ROOT / "examples" / "nsmc"))


def test_homonym_file_gives_each_homonym_one_target_word_and_six_sentences_per_sense():
    """The homonym test's data: 10 homonyms or more, each with 2 senses or more of 6 sentences or more, and one target
    word, the same whitespace word in every sentence of the homonym whatever its sense."""
    homonym_senses = import_nsmc_example("homonym_senses")
    groups = homonym_senses.read_homonyms(homonym_senses.DATA)
    assert len(groups) >= 10
    sentences = [row["sentence"] for group in groups.values() for row in group]
    assert len(set(sentences)) == len(sentences)
    for homonym, group in groups.items():
        senses = Counter(row["sense"] for row in group)
        assert len(senses) >= 2 and min(senses.values()) >= 6, homonym
        (target,) = {row["target"] for row in group}
        assert all(row["sentence"].split().count(target) == 1 for row in group)


def test_homonym_senses_scores_the_context_free_layer_at_chance(base_model, capsys):
    """Every homonym keeps one target word, so layer 0 gives it one vector: all neighbours tie and the layer scores
    exactly chance, the expected score of a random neighbour within the homonym."""
    homonym_senses = import_nsmc_example("homonym_senses")
    results = homonym_senses.main(["--model", str(base_model)])
    groups = homonym_senses.read_homonyms(homonym_senses.DATA)
    chances = []
    for group in groups.values():
        senses = Counter(row["sense"] for row in group)
        chances += [(senses[row["sense"]] - 1) / (len(group) - 1) for row in group]
    assert results["overall"]["chance"] == pytest.approx(np.mean(chances), abs=1e-12)
    assert results["overall"]["layer 0"] == results["overall"]["chance"]
    for homonym, result in results["homonyms"].items():
        assert result["layer 0"] == result["chance"], homonym
        assert all(0.0 <= result[f"layer {number}"] <= 1.0 for number in (1, 2))
    assert "| layer 0 | " in capsys.readouterr().out


def test_homonym_senses_pools_the_target_words_units(base_model, monkeypatch):
    """The target's vector is its whitespace word's: the one unit, the mean of the units that punctuation or morphemes
    split it into, found through offsets (whitespace) or `word_ids()` (morphemes)."""
    from hf_elmo.korean_morphemes import KoreanMorphemes

    homonym_senses = import_nsmc_example("homonym_senses")
    model = ElmoModel.from_pretrained(base_model).eval()
    tokenizer = ElmoTokenizer(max_characters_per_token=20, pre_tokenizer="whitespace")
    sentences, targets = ["그래, 배를 타자", "배를, 깎았다!"], ["배를", "배를,"]
    with torch.no_grad():
        layers = torch.stack(
            model(**tokenizer(sentences, padding=True, return_tensors="pt"), output_hidden_states=True).hidden_states
        )
    expected = torch.stack([layers[:, 0, 3], layers[:, 1, 1:3].mean(1)], dim=1)  # <S> 그래 , 배를 / <S> 배를 ,
    vectors = homonym_senses.target_vectors(model, tokenizer, sentences, targets)
    torch.testing.assert_close(vectors, expected, atol=FLOAT32_TOLERANCE, rtol=0)

    class FirstCharacterApart(KoreanMorphemes):
        """Made-up morphemes: each whitespace word's first character, then the rest."""

        def analyse(self, text):
            units = []
            for index, word in enumerate(re.finditer(r"\S+", text)):
                start, end = word.span()
                units += [(text[start], (start, start + 1), index)]
                units += [(text[start + 1 : end], (start + 1, end), index)] if end > start + 1 else []
            return units

    monkeypatch.setattr(tokenizer, "_splitter", FirstCharacterApart())
    monkeypatch.setattr(tokenizer, "pre_tokenizer", "korean_morphemes")
    with torch.no_grad():
        layers = torch.stack(
            model(**tokenizer(sentences, padding=True, return_tensors="pt"), output_hidden_states=True).hidden_states
        )
    expected = torch.stack([layers[:, 0, 3:5].mean(1), layers[:, 1, 1:3].mean(1)], dim=1)  # 그 래, 배 를 / 배 를,
    vectors = homonym_senses.target_vectors(model, tokenizer, sentences, targets)
    torch.testing.assert_close(vectors, expected, atol=FLOAT32_TOLERANCE, rtol=0)


def test_paired_bootstrap_gives_the_difference_and_an_interval_that_holds_it():
    """The same scores: a difference of 0 in [0, 0]; scores shifted by a constant: that shift, an interval of width 0;
    one model right on half the sentences where the other is right on none: 0.5 inside an interval narrower than
    the binomial one at 4 standard errors."""
    homonym_senses = import_nsmc_example("homonym_senses")
    scores = torch.rand(200, generator=torch.Generator().manual_seed(0), dtype=torch.float64)
    assert homonym_senses.paired_bootstrap(scores, scores) == (0.0, 0.0, 0.0)
    difference, low, high = homonym_senses.paired_bootstrap(scores, scores + 0.25)
    assert difference == pytest.approx(0.25, abs=1e-12) and low == pytest.approx(0.25) and high == pytest.approx(0.25)
    right_on_half = (torch.arange(200) % 2).double()
    difference, low, high = homonym_senses.paired_bootstrap(torch.zeros(200, dtype=torch.float64), right_on_half)
    standard_error = (0.25 / 200) ** 0.5
    assert difference == 0.5 and 0.5 - 4 * standard_error < low < 0.5 < high < 0.5 + 4 * standard_error
    # Seeded: the same draws give the same interval.
    assert homonym_senses.paired_bootstrap(scores, scores.flip(0)) == homonym_senses.paired_bootstrap(
        scores, scores.flip(0)
    )


def test_homonym_senses_compare_gives_the_difference_of_the_two_models_scores(base_model, tmp_path, capsys):
    """`--compare A B`: at each layer, B's mean score minus A's as each model's own run reports them, and at the best
    layer of each; a model against itself differs by 0 everywhere."""
    homonym_senses = import_nsmc_example("homonym_senses")
    other = tmp_path / "other"
    torch.manual_seed(1)
    ElmoModel(tiny_config()).save_pretrained(other)
    ElmoTokenizer(max_characters_per_token=20).save_pretrained(other)
    first = homonym_senses.main(["--model", str(base_model)])["overall"]
    second = homonym_senses.main(["--model", str(other)])["overall"]
    compared = homonym_senses.main(["--compare", str(base_model), str(other)])
    for name in ("layer 0", "layer 1", "layer 2", "average of layers"):
        assert compared[name]["difference"] == pytest.approx(second[name] - first[name], abs=1e-12), name
        low, high = compared[name]["interval"]
        assert low <= compared[name]["difference"] <= high
    best = compared["best layer of each"]
    contextual = ("layer 1", "layer 2", "average of layers")
    assert best["first"] == max(contextual, key=first.get) and best["second"] == max(contextual, key=second.get)
    assert best["difference"] == pytest.approx(second[best["second"]] - first[best["first"]], abs=1e-12)
    assert "| best layer of each (" in capsys.readouterr().out
    itself = homonym_senses.main(["--compare", str(base_model), str(base_model)])
    assert all(row["difference"] == 0 and row["interval"] == (0.0, 0.0) for row in itself.values())


def test_sense_counts_count_a_sense_by_its_cues_alone(tmp_path):
    """An occurrence of the noun counts for the one sense whose cue stands near it (a number before it for 배, times),
    as "several" beside cues of two senses, "no cue" beside none; 배우 (actor), another word, not at all."""
    require("kiwipiepy", reason="sense_counts.py reads morphemes (the korean extra)")
    sense_counts = import_nsmc_example("sense_counts")
    cues = sense_counts.read_cues(sense_counts.CUES)
    lines = [
        "아침을 굶어서 배가 고프다",  # belly
        "우리는 배를 타고 섬에 갔다",  # boat
        "과일 가게에서 배를 샀다",  # pear
        "배가 고파서 배를 깎아 먹었다",  # belly, then several
        "그 배우는 연기를 잘한다",  # 배우, another word
        "가격이 두 배로 올랐다",  # times
        "배를 보았다",  # no cue
    ]
    counts = sense_counts.count_senses(lines, cues)
    # 배 of 배가 고파서 stands beside 고프 alone; 배 of 배를 깎아, beside 깎 and, four morphemes back, 고프.
    assert counts["배"] == {"belly": 2, "boat": 1, "pear": 1, "several": 1, "times": 1, "no cue": 1}
    path = tmp_path / "text.txt"
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    written = tmp_path / "counts.json"
    results = sense_counts.main([str(path), "--json", str(written)])
    assert json.loads(written.read_text(encoding="utf-8")) == results
    assert results[str(path)]["바람"] == {"wind": 0, "wish": 0, "affair": 0}


def squad_file(path: Path, paragraphs: list[tuple[str, list[tuple[str, str]]]]) -> Path:
    """A SQuAD-layout file of one article: each paragraph's context and its (question, answer) pairs, the answer the
    first occurrence of its text in the context."""
    qas = lambda context, pairs, base: [  # noqa: E731
        {"id": f"{base}-{i}", "question": q, "answers": [{"text": a, "answer_start": context.index(a)}]}
        for i, (q, a) in enumerate(pairs)
    ]
    article = {
        "title": "t",
        "paragraphs": [{"context": c, "qas": qas(c, pairs, n)} for n, (c, pairs) in enumerate(paragraphs)],
    }
    path.write_text(json.dumps({"version": "test", "data": [article]}), encoding="utf-8")
    return path


def test_run_qa_trains_scores_and_saves_a_folder_that_answers(base_model, tmp_path, in_process, capsys):
    """A tiny SQuAD file: the head learns where its answers are, KorQuAD's measures score the predictions, and the
    saved folder answers through the pipeline; a long context is read in windows, answers ending inside a word."""
    contexts = [
        ("Ada lives in Paris and Bob lives in Rome today", [("Where does Ada live ?", "Paris")]),
        ("Eve met Bob in Oslo , then they flew to Lima together", [("Who met Bob ?", "Eve")]),
    ]
    data = squad_file(tmp_path / "train.json", contexts * 3)
    output = tmp_path / "qa"
    arguments = ["--model_name_or_path", base_model, "--train_file", data, "--validation_file", data]
    arguments += ["--do_train", "--do_eval", "--output_dir", output, "--num_train_epochs", 40, "--learning_rate"]
    arguments += [0.03, "--per_device_train_batch_size", 6, "--task_lstm_dim", 8, "--max_length", 14, "--stride", 3]
    code, error = in_process("run_qa.py", arguments, capsys)
    assert code == 0, error
    results = json.loads((output / "all_results.json").read_text())
    assert results["eval_exact_match"] == 100.0 and results["eval_f1"] == 100.0
    predictions = json.loads((output / "eval_predictions.json").read_text())
    assert set(predictions.values()) == {"Paris", "Eve"}
    assert "question-answering" in (output / "README.md").read_text()
    from transformers import pipeline

    qa = pipeline("question-answering", model=str(output), trust_remote_code=True)
    answer = qa(question="Where does Ada live ?", context=contexts[0][0], max_length=14, stride=3)
    assert answer["answer"] == "Paris" == contexts[0][0][answer["start"] : answer["end"]]


def test_korquad_measures_normalise_and_count_characters():
    run_qa = import_example("run_qa")
    question = run_qa.Question("1", "언제?", "1397년에 세워졌다", [("1397년", 0), ("《1397년》", 0)])
    assert run_qa.normalise_answer("《서울 (Seoul)》, ‘A’!") == "서울 seoul a"
    assert run_qa.korquad_scores({"1": "1397년"}, [question]) == {"exact_match": 100.0, "f1": 100.0}
    scores = run_qa.korquad_scores({"1": "1397년에"}, [question])  # 5 of 6 characters right, all 5 of the gold's
    assert scores["exact_match"] == 0.0 and abs(scores["f1"] - 100 * 2 * (5 / 6) / (5 / 6 + 1)) < 1e-9
    assert run_qa.korquad_scores({}, [question]) == {"exact_match": 0.0, "f1": 0.0}


def test_answer_positions_cover_the_units_an_answer_touches():
    run_qa = import_example("run_qa")
    offsets = [(0, 0), (0, 4), (4, 5), (6, 9), (9, 10), (0, 0)]  # 1397 년 | 세워 졌다, the marks at 0 and 5
    context = [1, 2, 3, 4]
    assert run_qa.answer_positions(offsets, context, 0, 5) == (1, 2)  # "1397년": the particle's unit is not in it
    assert run_qa.answer_positions(offsets, context, 2, 4) == (1, 1)  # inside one unit: that unit
    assert run_qa.answer_positions(offsets, [1, 2], 6, 10) is None  # past the window's units


def test_run_qa_makes_windows_in_chunks_under_a_progress_bar(base_model, capsys):
    """Chunks of questions give the windows of one call, each naming its question's index in the whole list."""
    run_qa = import_example("run_qa")
    tokenizer = ElmoTokenizer.from_pretrained(base_model)
    context = "Ada lives in Paris and Bob lives in Rome today"
    questions = [
        run_qa.Question(str(i), f"Who lives in {city} ?", context, [(name, context.index(name))])
        for i, (name, city) in enumerate([("Ada", "Paris"), ("Bob", "Rome")] * 3)
    ]
    arguments = run_qa.DataTrainingArguments(max_length=14, stride=2)
    for labelled in (True, False):
        whole = run_qa.windows_of(questions, tokenizer, arguments, labelled, chunk_size=len(questions))
        capsys.readouterr()
        chunked = run_qa.windows_of(
            questions, tokenizer, arguments, labelled, description="train windows", chunk_size=4
        )
        assert "train windows: 100%" in capsys.readouterr().err
        assert chunked == whole
        assert sorted({index for index, _, _ in chunked[1]}) == list(range(len(questions)))
