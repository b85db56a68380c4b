"""
Every entry point (the console script `hf_elmo.cli.main` and each script's `if __name__ == "__main__":` line) runs
inside the one handler, `hf_elmo.errors.run_entry_point`: a failure of each class ends in one `error:` line and its
exit status (1 environment, 2 usage, 130 interrupted), wherever it is raised (issue 50, section 3).
"""

import argparse
import errno
import os
import runpy
import sys
from pathlib import Path

import pytest

from hf_elmo.cli import main
from hf_elmo.errors import CommandError, ElmoConversionError, FileContentError, run_entry_point

ROOT = Path(__file__).resolve().parents[1]
# Every script with a `__main__` line: the examples, the Korean experiment's, KorQuAD's and the converters.
SCRIPTS = sorted(
    path.relative_to(ROOT).as_posix()
    for folder in ("examples", "examples/nsmc", "examples/korquad", "conversion")
    for path in (ROOT / folder).glob("*.py")
    if 'if __name__ == "__main__":' in path.read_text(encoding="utf-8")
)
# Each class of failure: the exception, the line it gets after `PROG: error: `, and the exit status.
FAILURES = {
    "full disk": (
        OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), "/out/vocab.txt"),
        f"{os.strerror(errno.ENOSPC)}: /out/vocab.txt; free space there or write elsewhere",
        1,
    ),
    "no permission": (
        PermissionError(errno.EACCES, os.strerror(errno.EACCES), "/out"),
        f"{os.strerror(errno.EACCES)}: /out; check its permissions or write elsewhere",
        1,
    ),
    "interrupt": (KeyboardInterrupt(), "interrupted", 130),
    # Not a FileContentError (a ValueError) here: raised while the fine-tuning examples parse, a ValueError is theirs
    # to report as a usage error (`run_steps.ExampleArgumentParser.parse`).
    "package error": (
        ElmoConversionError("weights.hdf5 has no char_embed; convert a bilm-tf checkpoint"),
        "weights.hdf5 has no char_embed; convert a bilm-tf checkpoint",
        1,
    ),
    "command error": (CommandError("--mix needs 3 weights", code=2), "--mix needs 3 weights", 2),
    "usage error": (
        ValueError("Some specified arguments are not used by the HfArgumentParser: ['--max_step']\nmore"),
        "Some specified arguments are not used by the HfArgumentParser: ['--max_step']",
        2,
    ),
}


def failing_parse(error: BaseException):
    """What every entry point calls first, argparse's `parse_known_args` (`HfArgumentParser`'s and the `hf-elmo`
    parser's too), made to raise `error`: a failure inside the entry point, where its handler must catch it."""

    def parse_known_args(self, *args, **kwargs):
        raise error

    return parse_known_args


def one_error_line(stderr: str, prog: str) -> str:
    """The text after `PROG: error: ` of the one line `stderr` holds (asserted to be one line)."""
    lines = stderr.strip().splitlines()
    assert len(lines) == 1, stderr
    assert lines[0].startswith(f"{prog}: error: "), stderr
    return lines[0].removeprefix(f"{prog}: error: ")


@pytest.mark.parametrize("failure", FAILURES)
def test_the_console_script_reports_each_failure_in_one_line(failure, monkeypatch, capsys):
    error, line, code = FAILURES[failure]
    monkeypatch.setattr(argparse.ArgumentParser, "parse_known_args", failing_parse(error))
    assert main(["info", "ko-nsmc"]) == code
    assert one_error_line(capsys.readouterr().err, "hf-elmo") == line


@pytest.mark.parametrize("failure", FAILURES)
@pytest.mark.parametrize("script", SCRIPTS)
def test_each_script_reports_each_failure_in_one_line(script, failure, monkeypatch, capsys):
    error, line, code = FAILURES[failure]
    path = ROOT / script
    monkeypatch.syspath_prepend(str(path.parent))  # as `python SCRIPT` puts the script's folder first
    monkeypatch.setattr(sys, "argv", [str(path)])
    monkeypatch.setattr(argparse.ArgumentParser, "parse_known_args", failing_parse(error))
    with pytest.raises(SystemExit) as exit:
        runpy.run_path(str(path), run_name="__main__")
    assert exit.value.code == code
    assert one_error_line(capsys.readouterr().err, path.name) == line


def test_the_handler_returns_mains_status_and_lets_a_bug_and_argparse_through(capsys):
    assert run_entry_point(lambda: 3, prog="p") == 3
    assert run_entry_point(lambda: {"accuracy": 1.0}, prog="p") == 0  # a script's metrics
    with pytest.raises(ZeroDivisionError):  # a bug keeps its traceback
        run_entry_point(lambda: 1 / 0, prog="p")
    with pytest.raises(SystemExit):
        run_entry_point(lambda: sys.exit(2), prog="p")
    assert run_entry_point(lambda: (_ for _ in ()).throw(CommandError("other rank says", quiet=True)), prog="p") == 1
    assert capsys.readouterr().err == ""
    assert (
        run_entry_point(lambda: (_ for _ in ()).throw(FileContentError("x.json: n_layers is missing")), prog="p") == 1
    )
    assert capsys.readouterr().err == "p: error: x.json: n_layers is missing\n"


def test_the_scripts_are_all_walked():
    """A new script with a `__main__` line is walked without an edit here; these are the ones there are now."""
    assert {"examples/run_qa.py", "examples/nsmc/bundle.py", "examples/korquad/prepare_korquad.py"} <= set(SCRIPTS)
    assert "conversion/convert_allennlp_elmo.py" in SCRIPTS


# -- the failures of the second campaign, reproduced ------------------------------------------------------------------

QUIET = ["--report_to", "none", "--save_strategy", "no", "--disable_tqdm", "true", "--seed", "0", "--use_cpu"]


def run_script(script: str, arguments: list, monkeypatch, capsys) -> tuple[int, str]:
    """`python SCRIPT ARGUMENTS` in this process, offline: its exit status and its stderr."""
    path = ROOT / script
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.syspath_prepend(str(path.parent))
    monkeypatch.setattr(sys, "argv", [str(path), *map(str, arguments)])
    capsys.readouterr()
    with pytest.raises(SystemExit) as exit:
        runpy.run_path(str(path), run_name="__main__")
    return exit.value.code, capsys.readouterr().err


def last_error_line(stderr: str, prog: str) -> str:
    """The `PROG: error: ` line ending `stderr` (the libraries may have logged above it), with no traceback."""
    assert "Traceback" not in stderr, stderr
    last = stderr.strip().splitlines()[-1]
    assert last.startswith(f"{prog}: error: "), stderr
    return last.removeprefix(f"{prog}: error: ")


def test_pretrain_onto_a_full_disk_is_one_line_at_the_vocabulary(tmp_path, monkeypatch, capsys):
    """A tmpfs that fills up while `pretrain` writes its vocabulary: a traceback at `save_vocabulary` before."""
    from hf_elmo import ElmoTokenizer

    def full_disk(self, save_directory, filename_prefix=None):
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), str(Path(save_directory) / "vocab.txt"))

    monkeypatch.setattr(ElmoTokenizer, "save_vocabulary", full_disk)
    (tmp_path / "train.txt").write_text("a b c\nb c d\n" * 8, encoding="utf-8")
    argv = ["pretrain", "--train-file", tmp_path / "train.txt", "--validation-file", tmp_path / "train.txt"]
    argv += ["--output-dir", tmp_path / "out", "--preset", "tiny"]
    assert main([*map(str, argv), "--max-steps", "1", "--report-to", "none"]) == 1
    line = last_error_line(capsys.readouterr().err, "hf-elmo")
    assert os.strerror(errno.ENOSPC) in line and str(tmp_path / "out") in line, line
    assert not (tmp_path / "out").exists()


def test_ctrl_c_while_run_classification_trains_is_one_line_and_status_130(base_model, tmp_path, monkeypatch, capsys):
    from transformers import Trainer

    def interrupted(self, *args, **kwargs):
        raise KeyboardInterrupt

    monkeypatch.setattr(Trainer, "train", interrupted)
    rows = "".join(f"a good movie {i},pos\na bad movie {i},neg\n" for i in range(4))
    (tmp_path / "train.csv").write_text("text,label\n" + rows, encoding="utf-8")
    arguments = ["--model_name_or_path", base_model, "--train_file", tmp_path / "train.csv", "--do_train"]
    code, stderr = run_script(
        "examples/run_classification.py", [*arguments, "--output_dir", tmp_path / "out", *QUIET], monkeypatch, capsys
    )
    assert code == 130
    assert last_error_line(stderr, "run_classification.py") == "interrupted"


@pytest.mark.parametrize(
    ("max_length", "stride", "answer"),
    [(14, 3, "max_length=14 leaves no room"), (20, 8, "stride must be at least 0 and less than")],
)
def test_run_qa_with_windows_its_questions_cannot_take_is_one_line_before_the_model_loads(
    max_length, stride, answer, base_model, tmp_path, monkeypatch, capsys
):
    import json

    import hf_elmo.loading

    def no_model(*args):
        raise AssertionError("the model loaded before the windows were checked")

    monkeypatch.setattr(hf_elmo.loading, "_from_pretrained", no_model)
    context = "Ada lives in Paris and Bob lives in Rome today while Eve stays in Oslo"
    question = {
        "id": "q",
        "question": "Where does the woman called Ada live these days ?",
        "answers": [{"text": "Paris", "answer_start": 13}],
    }
    article = {"title": "t", "paragraphs": [{"context": context, "qas": [question]}]}
    data = tmp_path / "train.json"
    data.write_text(json.dumps({"version": "test", "data": [article]}), encoding="utf-8")
    arguments = ["--model_name_or_path", base_model, "--train_file", data, "--do_train"]
    arguments += ["--max_length", max_length, "--stride", stride, "--output_dir", tmp_path / "out", *QUIET]
    code, stderr = run_script("examples/run_qa.py", arguments, monkeypatch, capsys)
    assert code == 2, stderr
    assert last_error_line(stderr, "run_qa.py").startswith(answer)
    assert not (tmp_path / "out").exists()
