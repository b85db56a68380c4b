"""The `hf-elmo` command, run as a real subprocess on a small converted checkpoint, outputs read back and compared
with `ElmoModel`."""

import argparse
import ast
import errno
import gzip
import importlib.util
import json
import os
import shutil
import subprocess
import sys
import tempfile
import textwrap
from pathlib import Path

import h5py
import numpy as np
import pytest
import tomllib
import torch
from utils import (
    FLOAT32_TOLERANCE,
    convert_args,
    hiding_packages,
    read_hdf5,
    reference_layers,
    run_cli,
    tiny_config,
    write_original_checkpoint,
)

import hf_elmo.command_line
from hf_elmo import ElmoForQuestionAnswering, ElmoModel, ElmoTokenizer, bundled_model_path
from hf_elmo.cli import main
from hf_elmo.configuration_elmo import CPU_MATMULS

ROOT = Path(__file__).resolve().parents[1]


def test_console_script_is_declared():
    """The console script is `python -m hf_elmo.cli`'s `main`, the function `conversion/` and `examples/` call."""
    scripts = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["scripts"]
    assert scripts == {"hf-elmo": "hf_elmo.cli:main"}
    assert not (ROOT / "hf_elmo_launcher.py").exists()


# `hf-elmo ARGV` by the console script's function, for each ARGV of the JSON list given, in one process: for each, its
# lines on stderr and its exit status, then the modules of the package that the answers imported beyond what the
# console script's does (none: no command's own module, the quickstart's or pre-training's).
PROBE = textwrap.dedent("""
    import contextlib, io, json, sys
    from hf_elmo.cli import main
    before = set(sys.modules)
    answers = []
    for argv in json.loads(sys.argv[1]):
        stderr = io.StringIO()
        with contextlib.redirect_stderr(stderr), contextlib.redirect_stdout(io.StringIO()):
            try:
                code = main(argv)
            except SystemExit as exit:
                code = exit.code
        answers.append([*stderr.getvalue().splitlines(), str(code)])
    print(json.dumps([answers, sorted(name for name in set(sys.modules) - before if name.startswith("hf_elmo"))]))
""")


def probe(runs: list, cwd: Path) -> list[list[str]]:
    """For each argument list of `runs`, the stderr lines of `hf-elmo ARGV` and its exit status last, all run in one
    process from `cwd`; asserts that none of them imported a command's own module."""
    result = subprocess.run(
        [sys.executable, "-c", PROBE, json.dumps([list(map(str, argv)) for argv in runs])],
        capture_output=True,
        text=True,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
        cwd=cwd,
        timeout=300,
    )
    assert result.returncode == 0, result.stderr[-2000:]
    answers, imported = json.loads(result.stdout.splitlines()[-1])
    assert imported == [], imported
    return answers


def test_help_and_argument_errors_are_answered_before_any_command_loads(tmp_path):
    """`--help`, a subcommand's and an argument error are the parser's: no command's module is imported (`probe`)."""
    runs = {
        "--help": "0",
        "embed --help": "0",
        "convert --help": "0",
        "export --help": "0",
        "info --help": "0",
        "embed model in.txt out.h5": "2",  # no layer option
        f"embed model {tmp_path / 'missing.txt'} out.h5 --top": "1",
        f"info {tmp_path / 'missing'}": "1",
        f"export --model-dir {tmp_path / 'missing'} --output-dir {tmp_path / 'out'}": "1",
    }
    answers = probe([argv.split() for argv in runs], tmp_path)
    assert [answer[-1] for answer in answers] == list(runs.values()), answers
    assert not (tmp_path / "out").exists()


def test_errors_that_need_no_model_are_one_line_before_torch(tmp_path):
    """A missing checkpoint file, a missing text file, an output that exists, a quickstart picture into a folder that
    does not exist: each is answered in one line before the command's own module is imported (`probe`)."""
    (tmp_path / "in.txt").write_text("a b\n", encoding="utf-8")
    (tmp_path / "out.h5").write_bytes(b"written before")
    missing = tmp_path / "missing"
    runs = {
        f"convert --options-file {missing}.json --weight-file w.hdf5 --output-dir out": (
            f"hf-elmo: error: no such file: {missing}.json",
            "1",
        ),
        f"convert --format elmoformanylangs --model-dir {missing}.zip --output-dir out": (
            f"hf-elmo: error: no such model folder or .zip: {missing}.zip",
            "1",
        ),
        f"pretrain --train-file in.txt {missing}.txt --validation-file in.txt --output-dir out": (
            f"hf-elmo: error: cannot read --train-file {missing}.txt: No such file or directory",
            "2",
        ),
        f"pretrain --train-file in.txt --validation_file={missing}.txt --output-dir out": (
            f"hf-elmo: error: cannot read --validation-file {missing}.txt: No such file or directory",
            "2",
        ),
        "embed model in.txt out.h5 --top": ("hf-elmo: error: out.h5 exists; remove it to write it again", "1"),
        "embed model in.txt out.h5 --top --resume": (
            "hf-elmo: error: out.h5 exists and is complete; remove it to write it again",
            "1",
        ),
        f"quickstart --plot {missing}/bae.png": (f"hf-elmo: error: no such folder for --plot: {missing}", "1"),
    }
    answers = probe([argv.split() for argv in runs], tmp_path)
    assert dict(zip(runs, answers)) == {argv: list(lines) for argv, lines in runs.items()}
    assert sorted(path.name for path in tmp_path.iterdir()) == ["in.txt", "out.h5"]
    assert (tmp_path / "out.h5").read_bytes() == b"written before"


def test_an_empty_argument_is_refused_before_anything_runs(tmp_path):
    """An empty argument is a shell variable that was not set: as a path it is the folder the command runs in, which
    `--overwrite` would replace. Every command refuses it in one line, exit status 2, before its module is imported
    (`probe`); the folder is left as it was."""
    (tmp_path / "in.txt").write_text("a b\n", encoding="utf-8")
    runs = {
        ("export", "--model-dir", "ko-nsmc", "--output-dir", "", "--overwrite"): "an empty argument (after "
        "--output-dir; a variable that is not set?); give a value",
        (
            "convert",
            "--options-file",
            "o.json",
            "--weight-file",
            "w.hdf5",
            "--output-dir=",
        ): "--output-dir is given an empty value (a variable that is not set?); give one",
        ("embed", "ko-nsmc", "in.txt", "", "--top"): "an empty argument (after in.txt; a variable that is not set?); "
        "give a value",
        ("info", " "): "an empty argument (after info; a variable that is not set?); give a value",
        ("pretrain", "--train-file", "in.txt", "--validation-file", "in.txt", "--output-dir", ""): "an empty argument "
        "(after --output-dir; a variable that is not set?); give a value",
        ("", "info", "ko-nsmc"): "an empty argument (first; a variable that is not set?); give a value",
    }
    answers = probe(list(runs), tmp_path)
    assert answers == [[f"hf-elmo: error: {line}", "2"] for line in runs.values()]
    assert sorted(path.name for path in tmp_path.iterdir()) == ["in.txt"]


def test_an_unknown_option_is_named_and_no_option_is_abbreviated(tmp_path):
    """`--al` is not `--all`, and `--alll` is named where argparse would say that a layer option is missing."""
    runs = {
        "embed model in.txt out.h5 --alll": "--alll",
        "embed model in.txt out.h5 --al": "--al",
        "convert --options-file o.json --weight-file w.hdf5 --output-dirr out": "--output-dirr",
        "export --model-dir m --output-dir out --overwrit": "--overwrit",
        "info model --verbose=1": "--verbose=1",
        "--colour embed": "--colour",
    }
    answers = probe([argv.split() for argv in runs], tmp_path)
    for (argv, unknown), answer in zip(runs.items(), answers):
        assert answer[-2:] == [
            f"hf-elmo{' ' + argv.split()[0] if not argv.startswith('-') else ''}: error: unrecognized arguments: "
            f"{unknown}",
            "2",
        ], (argv, answer)
    assert not list(tmp_path.iterdir())


def test_every_argument_parser_takes_no_abbreviations():
    """Every parser of the package, the conversion scripts and the examples is built with `allow_abbrev=False` (the
    command's own class sets it for itself and its subparsers)."""
    parsers = {"ArgumentParser", "HfArgumentParser", "ExampleArgumentParser"}
    files = [
        *(ROOT / "hf_elmo").rglob("*.py"),
        *(ROOT / "conversion").glob("*.py"),
        *(ROOT / "examples").rglob("*.py"),
    ]
    built = 0
    for path in files:
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Call) and getattr(node.func, "id", getattr(node.func, "attr", None)) in parsers:
                built += 1
                settings = {keyword.arg: keyword.value for keyword in node.keywords}
                passed = settings.get("allow_abbrev")
                assert isinstance(passed, ast.Constant) and passed.value is False, f"{path.name}:{node.lineno}"
    assert built >= 10
    parser = hf_elmo.command_line.build_parser()
    assert parser.allow_abbrev is False
    subparsers = next(action for action in parser._actions if action.nargs == argparse.PARSER)
    assert all(subparser.allow_abbrev is False for subparser in subparsers.choices.values())


def test_convert_and_export_overwrite_refuse_an_output_folder_holding_their_inputs(model_dir, tmp_path):
    """`--overwrite` replaces the output folder whole: where that folder is, or holds, what the command reads or the
    folder it runs in, it would delete its own input or the user's files. One line, before anything loads, and every
    file stays."""
    original = tmp_path / "original"
    options, weights = write_original_checkpoint(original, tiny_config())
    model = tmp_path / "model"
    shutil.copytree(model_dir, model)
    before = {path: path.read_bytes() for path in tmp_path.rglob("*") if path.is_file()}
    replaced = "which --overwrite replaces whole: write to another folder"
    runs_in = "holds the folder this command runs in, and --overwrite replaces it whole: write elsewhere"
    export = ("export", "--model-dir", model, "--overwrite", "--output-dir")
    runs = {
        (*convert_args(options, weights, original), "--overwrite"): f"{options} is inside {original}, {replaced}",
        (*export, model): f"{model} is inside {model}, {replaced}",
        # The probe runs in tmp_path: given as it is or as ".", the folder that holds the user's files.
        (*convert_args(options, weights, tmp_path), "--overwrite"): f"{tmp_path} {runs_in}",
        (*export, "."): f"{tmp_path} {runs_in}",
    }
    answers = probe([("convert", *argv) if argv[0] != "export" else argv for argv in runs], tmp_path)
    assert answers == [[f"hf-elmo: error: {line}", "2"] for line in runs.values()]
    assert {path: path.read_bytes() for path in tmp_path.rglob("*") if path.is_file()} == before


def test_embed_options_that_cannot_apply_are_answered_before_anything_loads(model_dir, tmp_path):
    """A count below 1, or `--mix` weights that are not numbers or not one per layer of a local folder's or a bundled
    model's config: one line and argparse's status 2, before the model is loaded."""
    text = tmp_path / "in.txt"
    text.write_text("the cat\n", encoding="utf-8")
    runs = {
        "--top --batch-size 0": "--batch-size must be at least 1, got 0",
        "--top --max-words -1": "--max-words must be at least 1, got -1",
        "--top --max-line-length 0": "--max-line-length must be at least 1, got 0",
        "--mix 0.5,0.5": "--mix needs 3 weights (one per layer), got 2",
        "--mix 1,x,2": "--mix takes comma-separated numbers, got '1,x,2'",
        "--mix 1,nan,2": "--mix takes finite numbers, got 1.0,nan,2.0",
    }
    answers = probe(
        [
            *(["embed", model_dir, text, "out.h5", *options.split()] for options in runs),
            ["embed", "ko-nsmc", text, "out.h5", "--pretokenize", "--mix", "0.5,0.5"],
        ],
        tmp_path,
    )
    assert answers == [
        *([f"hf-elmo: error: {message}", "2"] for message in runs.values()),
        ["hf-elmo: error: --mix needs 3 weights (one per layer), got 2", "2"],
    ]
    assert sorted(path.name for path in tmp_path.iterdir()) == ["in.txt"]


def test_mix_weights_are_not_counted_against_a_damaged_layer_count(model_dir, tmp_path, capsys):
    """`"n_layers": true` is no count (a bool is an int to Python): `--mix` is not held to it, and the loader names the
    damaged field instead of "--mix needs 2 weights"."""
    damaged = tmp_path / "model"
    shutil.copytree(model_dir, damaged)
    config = json.loads((damaged / "config.json").read_text())
    (damaged / "config.json").write_text(json.dumps({**config, "n_layers": True}))
    text = tmp_path / "in.txt"
    text.write_text("the cat\n", encoding="utf-8")
    assert hf_elmo.command_line.local_representation_layers(str(damaged)) is None
    assert main(["embed", str(damaged), str(text), str(tmp_path / "out.h5"), "--mix", "1,2,3"]) == 1
    assert "n_layers must be an integer >= 1, got True" in capsys.readouterr().err
    assert not (tmp_path / "out.h5").exists()


def test_embed_all_matches_model_in_allennlp_layout(model_dir, model, tmp_path):
    lines = ["the cat sat", "", "  a dog  ", "été " * 30, "the cat sat"]  # an empty line, a long line, a repeat
    (tmp_path / "in.txt").write_text("\n".join(lines) + "\n", encoding="utf-8")
    result = run_cli(
        "embed", model_dir, tmp_path / "in.txt", tmp_path / "out.h5", "--all", "--batch-size", "2", "--max-words", "7"
    )
    assert result.returncode == 0, result.stderr
    assert "sent/s" in result.stderr
    assert not (tmp_path / "out.h5.parts").exists()
    with h5py.File(tmp_path / "out.h5", "r") as handle:
        assert sorted(handle) == ["0", "1", "2", "3", "4", "sentence_to_index"]
        assert handle["sentence_to_index"].shape == (1,)
        mapping = json.loads(handle["sentence_to_index"][0])
        for index, line in enumerate(lines):
            array = handle[str(index)]
            assert array.dtype == np.float32
            expected = reference_layers(model, line.split())
            assert array.shape == (3, len(line.split()), 16)
            np.testing.assert_allclose(array[()], expected, atol=FLOAT32_TOLERANCE)
    assert mapping == {"the cat sat": "4", "": "1", "a dog": "2", ("été " * 30).strip(): "3"}


def test_layer_choices_pooling_and_npy(model_dir, model, tmp_path):
    lines = ["the cat sat on the mat", "", "a dog"]
    (tmp_path / "in.txt").write_text("\n".join(lines), encoding="utf-8")
    references = [reference_layers(model, line.split()) for line in lines]
    runs = {
        "top": (["--top"], lambda layers: layers[-1]),
        "average": (["--average"], lambda layers: layers.mean(0)),
        "mix": (["--mix", "0.5,-1,2"], lambda layers: 0.5 * layers[0] - layers[1] + 2 * layers[2]),
        "pooled": (
            ["--mix", "0.5,-1,2", "--pooled"],
            lambda layers: (0.5 * layers[0] - layers[1] + 2 * layers[2]).mean(0) if layers.shape[1] else np.zeros(16),
        ),
        "all-pooled": (["--all", "--pooled"], lambda layers: layers.mean(1) if layers.shape[1] else np.zeros((3, 16))),
    }
    for name, (flags, select) in runs.items():
        output = tmp_path / f"{name}.h5"
        assert main(["embed", str(model_dir), str(tmp_path / "in.txt"), str(output), *flags]) == 0
        written = read_hdf5(output)
        for index, layers in enumerate(references):
            np.testing.assert_allclose(written[str(index)], select(layers), atol=FLOAT32_TOLERANCE, err_msg=name)

    folder = tmp_path / "npy"
    assert main(["embed", str(model_dir), str(tmp_path / "in.txt"), str(folder), "--top", "--format", "npy"]) == 0
    for index, layers in enumerate(references):
        np.testing.assert_allclose(np.load(folder / f"{index}.npy"), layers[-1], atol=FLOAT32_TOLERANCE)
    assert json.loads((folder / "sentence_to_index.json").read_text()) == {
        line: str(i) for i, line in enumerate(lines)
    }


def test_pretokenize_splits_with_the_pre_tokenizer(model_dir, model, tmp_path):
    (tmp_path / "in.txt").write_text("the cat, sat.\n", encoding="utf-8")
    assert (
        main(["embed", str(model_dir), str(tmp_path / "in.txt"), str(tmp_path / "o.h5"), "--top", "--pretokenize"])
        == 0
    )
    tokenizer = ElmoTokenizer.from_pretrained(model_dir)
    words = tokenizer.split_words("the cat, sat.")
    np.testing.assert_allclose(
        read_hdf5(tmp_path / "o.h5")["0"], reference_layers(model, words)[-1], atol=FLOAT32_TOLERANCE
    )


def test_bad_input_gives_one_line_errors(model_dir, tmp_path, capsys):
    good = tmp_path / "good.txt"
    good.write_text("the cat\n", encoding="utf-8")
    bad = tmp_path / "bad.txt"
    bad.write_bytes(b"the cat\nsat \xff on\nthe mat\n")

    def error_of(*args) -> str:
        capsys.readouterr()
        assert main(["embed", *map(str, args)]) != 0
        lines = [line for line in capsys.readouterr().err.splitlines() if line.startswith("hf-elmo: error:")]
        assert len(lines) == 1
        return lines[0]

    assert "no such input file" in error_of(model_dir, tmp_path / "missing.txt", tmp_path / "o1.h5", "--top")
    assert error_of(model_dir, tmp_path, tmp_path / "o0.h5", "--top").endswith(
        f"{tmp_path} is a folder; embed reads a text file"
    )
    assert "not an hf_elmo model folder" in error_of(tmp_path, good, tmp_path / "o2.h5", "--top")
    assert "no such model folder" in error_of(tmp_path / "nope", good, tmp_path / "o3.h5", "--top")
    assert "needs 3 weights" in error_of(model_dir, good, tmp_path / "o4.h5", "--mix", "1,2")
    assert "line 2: not valid UTF-8" in error_of(model_dir, bad, tmp_path / "o5.h5", "--top")
    assert not (tmp_path / "o5.h5.parts").exists()  # a run that wrote nothing leaves nothing
    assert "gzip" in error_of(model_dir, gzipped_without_suffix(tmp_path), tmp_path / "o7.h5", "--top")

    assert main(["embed", str(model_dir), str(good), str(tmp_path / "o6.h5"), "--top"]) == 0
    assert "exists" in error_of(model_dir, good, tmp_path / "o6.h5", "--top")

    capsys.readouterr()
    assert main(["embed", str(model_dir), str(bad), str(tmp_path / "skip.h5"), "--all", "--errors", "skip"]) == 0
    assert [line for line in capsys.readouterr().err.splitlines() if line.strip() and "embedding" not in line] == [
        f"wrote 3 lines to {tmp_path / 'skip.h5'} (1 not UTF-8 text, skipped: written as entries of 0 words; "
        "--verbose lists their line numbers)"
    ]
    skipped = read_hdf5(tmp_path / "skip.h5")
    assert sorted(skipped) == ["0", "1", "2", "sentence_to_index"] and skipped["1"].shape == (3, 0, 16)
    assert sorted(json.loads(skipped["sentence_to_index"][0]).values()) == ["0", "2"]
    assert (
        main(["embed", str(model_dir), str(bad), str(tmp_path / "skip2.h5"), "--top", "--errors", "skip", "--verbose"])
        == 0
    )
    assert "skipped lines: 2\n" in capsys.readouterr().err
    assert main(["embed", str(model_dir), str(bad), str(tmp_path / "rep.h5"), "--top", "--errors", "replace"]) == 0
    replaced = read_hdf5(tmp_path / "rep.h5")
    assert replaced["1"].shape == (3, 16)
    assert json.loads(replaced["sentence_to_index"][0])["sat \ufffd on"] == "1"


def test_empty_input_warns_and_nul_bytes_are_not_a_word(model_dir, tmp_path, capsys):
    """An empty file gives an empty output and says so; 2,000 NUL bytes (a binary file) are a line that is not text,
    not one word; one line is "1 line"."""
    (tmp_path / "empty.txt").write_bytes(b"")
    assert main(["embed", str(model_dir), str(tmp_path / "empty.txt"), str(tmp_path / "empty.h5"), "--top"]) == 0
    assert capsys.readouterr().err.splitlines()[-1] == (
        f"hf-elmo: warning: {tmp_path / 'empty.txt'} holds no lines; wrote {tmp_path / 'empty.h5'} with none"
    )
    assert read_hdf5(tmp_path / "empty.h5").keys() == {"sentence_to_index"}

    (tmp_path / "nul.txt").write_bytes(b"\0" * 2000)
    assert main(["embed", str(model_dir), str(tmp_path / "nul.txt"), str(tmp_path / "nul.h5"), "--top"]) == 1
    assert capsys.readouterr().err.splitlines()[-1] == (
        f"hf-elmo: error: {tmp_path / 'nul.txt'} line 1: not text (control character U+0000 at character 0, as in "
        "binary and UTF-16 files); pass --errors replace or --errors skip"
    )
    assert not any(path.name.startswith("nul.h5") for path in tmp_path.iterdir())
    argv = ["embed", str(model_dir), str(tmp_path / "nul.txt"), str(tmp_path / "nul.h5"), "--top", "--errors", "skip"]
    assert main(argv) == 0
    assert capsys.readouterr().err.splitlines()[-1].startswith(f"wrote 1 line to {tmp_path / 'nul.h5'} (1 not UTF-8")
    assert read_hdf5(tmp_path / "nul.h5")["0"].shape == (0, 16)


def gzipped_without_suffix(folder: Path) -> Path:
    path = folder / "compressed.txt"
    path.write_bytes(gzip.compress(b"the cat\n"))
    return path


def test_device_errors_name_the_device(model_dir, tmp_path, capsys):
    (tmp_path / "in.txt").write_text("the cat\n", encoding="utf-8")
    expected = {"gpu": "--device gpu: not a torch device", "mps": "--device mps: MPS (Apple GPUs) is not available"}
    if not torch.cuda.is_available():
        expected["cuda:1"] = "--device cuda:1: CUDA is not available here"
    for device, message in expected.items():
        assert (
            main(
                [
                    "embed",
                    str(model_dir),
                    str(tmp_path / "in.txt"),
                    str(tmp_path / "o.h5"),
                    "--top",
                    "--device",
                    device,
                ]
            )
            == 1
        )
        error = capsys.readouterr().err.strip()
        assert error.startswith(f"hf-elmo: error: {message}") and "\n" not in error, error


@pytest.mark.parametrize("damage", ["truncated weights", "config against the weights"])
def test_a_damaged_model_folder_is_one_line_in_every_command_and_nothing_is_written(damage, tmp_path, capfd):
    folder = tmp_path / "model"
    shutil.copytree(bundled_model_path("ko-nsmc"), folder)
    if damage == "truncated weights":
        os.truncate(folder / "model.safetensors", 100_000)
        named = f"{folder / 'model.safetensors'} is cut short or corrupt"
    else:
        config = json.loads((folder / "config.json").read_text(encoding="utf-8"))
        config["n_layers"] = 1  # the weights hold 2
        (folder / "config.json").write_text(json.dumps(config), encoding="utf-8")
        named = "n_layers"
    text = tmp_path / "in.txt"
    text.write_text("배가 고프다\n", encoding="utf-8")
    out = tmp_path / "out"
    commands = {
        "embed": ["embed", folder, text, out, "--top", "--pretokenize"],  # ko-nsmc reads morphemes
        "info": ["info", folder],
        "export": ["export", "--model-dir", folder, "--output-dir", out],
        "export onnx": ["export", "--format", "onnx", "--model-dir", folder, "--output-dir", out],
        "pretrain": ["pretrain", "--model-name-or-path", folder, "--train-file", text, "--validation-file", text]
        + ["--output-dir", out],
    }
    for command, argv in commands.items():
        capfd.readouterr()
        assert main(list(map(str, argv))) != 0, command
        err = capfd.readouterr().err  # of the process: what transformers' loggers write too
        assert err.startswith("hf-elmo: error: ") and err.count("\n") == 1 and named in err, (command, err)
        assert sorted(path.name for path in tmp_path.iterdir()) == ["in.txt", "model"], command


@pytest.mark.parametrize("missing", ["char_vocab.json", "tokenizer_config.json"])
def test_a_folder_without_a_tokenizer_file_its_config_needs_is_one_line(missing, tmp_path, capsys):
    """Without `char_vocab.json` (a learned alphabet) or `tokenizer_config.json` (the morphemes, 20 characters per
    token), the bundled biLM would read other rows and give other vectors, where it gave them without a word."""
    folder = tmp_path / "model"
    shutil.copytree(bundled_model_path("ko-nsmc"), folder)
    (folder / missing).unlink()
    (tmp_path / "in.txt").write_text("배가 고프다\n", encoding="utf-8")
    argv = ["embed", folder, tmp_path / "in.txt", tmp_path / "out.h5", "--top", "--pretokenize"]
    capsys.readouterr()
    assert main(list(map(str, argv))) == 1
    assert capsys.readouterr().err == (
        f"hf-elmo: error: {folder} lacks {missing}, which its tokenizer needs (without, the model would read other "
        "ids or units); copy or download the model folder again\n"
    )
    assert sorted(path.name for path in tmp_path.iterdir()) == ["in.txt", "model"]


def test_a_full_disk_or_a_read_only_folder_is_one_line_in_convert_and_export(model_dir, tmp_path, monkeypatch, capsys):
    """A write that fails: one line naming the cause, no output, no staging folder left."""

    def fail(code: int):
        def write(*args, **kwargs):
            raise OSError(code, os.strerror(code))

        return write

    options, weights = write_original_checkpoint(tmp_path / "original", tiny_config())
    out = tmp_path / "out"
    failures = {
        "convert": (
            ElmoModel,
            "save_pretrained",
            fail(errno.ENOSPC),
            ["convert", *convert_args(options, weights, out)],
            "No space left on device; free some space and run again",
        ),
        "export": (
            h5py,
            "File",
            fail(errno.ENOSPC),
            ["export", "--model-dir", model_dir, "--output-dir", out],
            "No space left on device; free some space and run again",
        ),
        "export onnx": (
            tempfile,
            "mkdtemp",
            fail(errno.EROFS),
            ["export", "--format", "onnx", "--model-dir", model_dir, "--output-dir", out],
            "Read-only file system; write to a folder on a writable filesystem",
        ),
    }
    for command, (owner, name, failing, argv, cause) in failures.items():
        with monkeypatch.context() as patch:
            patch.setattr(owner, name, failing)
            capsys.readouterr()
            assert main(list(map(str, argv))) == 1, command
        assert capsys.readouterr().err == f"hf-elmo: error: cannot write {out}: {cause}\n", command
        assert sorted(path.name for path in tmp_path.iterdir()) == ["original"], command


def test_info_describes_a_head_and_its_biLM_without_transformers_load_report(capfd):
    """The classifier's folder: its head (labels, word vectors, task BiLSTM, pooling) and biLM, loaded as the head
    its folder holds, so that transformers reports no weight of it as unexpected."""
    capfd.readouterr()
    assert main(["info", "ko-nsmc-sentiment"]) == 0
    out, err = capfd.readouterr()
    assert (
        "parameters: 9,542,406 (2,437,120 biLM, 7,105,286 head)\nhead: ElmoForSequenceClassification\n"
        "labels: 2: negative, positive\nlayer mix: learned (scalar mix)\n"
        "word vectors: 53,706 words x 128 (beside the mix)\ntask LSTM: 64 per direction\n"
        "pooling: mean_max\nbiLM: trained with the head\nrepresentation layers: 3 (token layer + 2 LSTM layers)\n"
    ) in out
    assert "LOAD REPORT" not in err and "UNEXPECTED" not in err, err


def test_info_says_what_a_question_answering_head_reads(tmp_path, capsys):
    ElmoForQuestionAnswering(tiny_config(question_match_feature=False)).save_pretrained(tmp_path)
    capsys.readouterr()
    assert main(["info", str(tmp_path)]) == 0
    out = capsys.readouterr().out
    assert "head: ElmoForQuestionAnswering\n" in out and "question: attention over the question\n" in out


def test_foreign_model_folder_is_named_in_one_line(tmp_path, capsys):
    from transformers import BertConfig, BertModel

    BertModel(
        BertConfig(hidden_size=8, num_hidden_layers=1, num_attention_heads=2, intermediate_size=8, vocab_size=10)
    ).save_pretrained(tmp_path / "bert")
    (tmp_path / "in.txt").write_text("the cat\n", encoding="utf-8")
    capsys.readouterr()
    for command in (
        ["info", tmp_path / "bert"],
        ["embed", tmp_path / "bert", tmp_path / "in.txt", tmp_path / "o.h5", "--top"],
        ["export", "--model-dir", tmp_path / "bert", "--output-dir", tmp_path / "original"],
    ):
        assert main(list(map(str, command))) == 1
        assert (
            capsys.readouterr().err == f"hf-elmo: error: {tmp_path / 'bert'} is not an hf_elmo model folder "
            f"(model_type 'bert')\n"
        )


def test_hub_id_without_network_fails_at_once_unless_cached(model_dir, tmp_path):
    """The Hub endpoint refuses connections: one line, without the retries of huggingface_hub (half a minute); a
    model in the Hub cache still loads."""
    env = {key: value for key, value in os.environ.items() if key not in ("HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE")}
    env.update(PYTHONPATH=str(ROOT), HF_ENDPOINT="http://127.0.0.1:9", HF_HOME=str(tmp_path / "hf-home"))
    cached, revision = tmp_path / "hf-home" / "hub" / "models--someone--cached-elmo", "0" * 40
    shutil.copytree(model_dir, cached / "snapshots" / revision)
    (cached / "refs").mkdir()
    (cached / "refs" / "main").write_text(revision)
    results = {
        (name, offline): subprocess.run(
            [sys.executable, "-m", "hf_elmo.cli", "info", name],
            capture_output=True,
            text=True,
            env={**env, "HF_HUB_OFFLINE": offline},
            timeout=120,
        )
        for name in ("someone/elmo", "someone/cached-elmo")
        for offline in ("0", "1")
    }
    reasons = {
        "0": "the Hub cannot be reached (with HF_HUB_OFFLINE=1 it is not tried)",
        "1": "HF_HUB_OFFLINE=1 is set",
    }
    for offline, reason in reasons.items():
        assert results["someone/elmo", offline].returncode == 1
        assert results["someone/elmo", offline].stderr.startswith(
            "hf-elmo: error: no such model folder or bundled model (ko-nsmc, ko-nsmc-sentiment): someone/elmo; as a "
            f"Hub id it is not in the Hub cache, and {reason}"
        )
        assert results["someone/elmo", offline].stderr.count("\n") == 1
        cached = results["someone/cached-elmo", offline]
        assert cached.returncode == 0 and cached.stdout.startswith("model: someone/cached-elmo\n"), cached.stderr


def test_info_and_convert_errors(model_dir, model, tmp_path, capsys):
    assert main(["info", str(model_dir)]) == 0
    printed = capsys.readouterr().out
    assert f"parameters: {model.num_parameters():,}" in printed
    assert "dtype: float32" in printed and "representation layers: 3" in printed
    assert (
        main(
            [
                "convert",
                *convert_args(tmp_path / "none.json", tmp_path / "none.hdf5", tmp_path / "out"),
            ]
        )
        == 1
    )
    assert capsys.readouterr().err.strip().startswith("hf-elmo: error: no such file")


def read_hdf5_tree(path: Path) -> dict[str, np.ndarray]:
    """Every dataset of an HDF5 file by its full name (the original layout nests groups)."""
    arrays = {}

    def collect(name, item):
        if isinstance(item, h5py.Dataset):
            arrays[name] = item[()]

    with h5py.File(path, "r") as handle:
        handle.visititems(collect)
    return arrays


def test_export_subcommand_gives_back_the_original_bits(model_dir, tmp_path, capsys):
    assert main(["export", "--model-dir", str(model_dir), "--output-dir", str(tmp_path / "original")]) == 0
    original, exported = (
        read_hdf5_tree(folder / "weights.hdf5") for folder in (model_dir.parent / "original", tmp_path / "original")
    )
    assert sorted(original) == sorted(exported) and original
    for name in original:
        assert original[name].tobytes() == exported[name].tobytes(), name
    assert main(["export", "--model-dir", str(model_dir), "--output-dir", str(tmp_path / "original")]) == 1
    assert "pass --overwrite" in capsys.readouterr().err


def test_pretrain_subcommand_trains_and_saves_a_model(tmp_path, capsys):
    text = "".join(f"the {w} sat on the mat .\n" for w in ["cat", "dog", "bird", "cow"] * 5)
    (tmp_path / "train.txt").write_text(text, encoding="utf-8")
    argv = [
        "pretrain",
        "--train-file",
        str(tmp_path / "train.txt"),
        "--validation-file",
        str(tmp_path / "train.txt"),
        "--output-dir",
        str(tmp_path / "model"),
        "--preset",
        "tiny",
        "--max-characters-per-token",
        "20",
        "--min-count",
        "6",
        "--batch-size",
        "4",
        "--max-steps",
        "2",
        # TrainingArguments options this command does not name
        "--warmup_steps",
        "1",
        "--gradient_accumulation_steps",
        "2",
        "--lr_scheduler_type",
        "cosine",
        "--save-steps",
        "1",
        "--keep-checkpoints",
    ]
    assert main(argv) == 0
    printed = capsys.readouterr()
    assert '"eval_perplexity": ' in printed.out and '"eval_unk_rate": 0.1428' in printed.out  # the final metrics
    # The Trainer evaluates the last step and logs it; the command prints that evaluation once, without a second one.
    assert printed.out.count("'eval_perplexity'") == 1 and printed.out.count('"eval_perplexity"') == 1
    assert "eval metrics" not in printed.out
    # cat, dog, bird and cow (5 times each) are under --min-count: 20 of the 140 words are <UNK>
    assert (
        "word vocabulary: 8 words, <S> </S> <UNK> included; <UNK> rate 14.3% of the training words, 14.3% of "
        "the validation words" in printed.err
    )
    assert "negative samples per batch: 8 (8,192 capped at the vocabulary size)" in printed.err  # bilm-tf's default
    model = ElmoModel.from_pretrained(tmp_path / "model")
    assert (
        f"parameters: {model.num_parameters() + 8 * 33:,} ({model.num_parameters():,} biLM, 264 softmax)"
        in printed.err
    )
    assert model.config.max_characters_per_token == 20
    used = torch.load(tmp_path / "model" / "checkpoint-2" / "training_args.bin", weights_only=False)
    assert (used.warmup_steps, used.gradient_accumulation_steps, used.lr_scheduler_type) == (1, 2, "cosine")
    assert (tmp_path / "model" / "model.safetensors").stat().st_mode & 0o777 == 0o666 & ~current_umask()


def current_umask() -> int:
    umask = os.umask(0)
    os.umask(umask)
    return umask


def test_pretrain_without_the_training_extra_names_it(tmp_path):
    (tmp_path / "train.txt").write_text("a b\n", encoding="utf-8")
    block_accelerate = hiding_packages("accelerate") + textwrap.dedent("""
        from hf_elmo.cli import main
        sys.exit(main(sys.argv[1:]))
    """)
    result = subprocess.run(
        [
            sys.executable,
            "-c",
            block_accelerate,
            "pretrain",
            "--train-file",
            str(tmp_path / "train.txt"),
            "--validation-file",
            str(tmp_path / "train.txt"),
            "--output-dir",
            str(tmp_path / "model"),
        ],
        capture_output=True,
        text=True,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
        timeout=120,
    )
    assert result.returncode == 2
    assert result.stderr == (
        'hf-elmo: error: pre-training needs the training extra: pip install -e ".[training]" in a checkout (a wheel: '
        "its path followed by [training])\n"
    )


def test_pretrain_subcommand_reports_bad_arguments(tmp_path, capsys):
    (tmp_path / "train.txt").write_text("a b\n", encoding="utf-8")
    argv = [
        "pretrain",
        "--train-file",
        str(tmp_path / "train.txt"),
        "--validation-file",
        str(tmp_path / "train.txt"),
        "--output-dir",
        str(tmp_path / "model"),
        "--streaming",
    ]
    assert main(argv) == 2
    assert "--streaming needs --max-steps" in capsys.readouterr().err


def test_pretrain_names_an_unknown_option_with_the_nearest_and_a_missing_one_in_one_line(tmp_path, capsys):
    """Issue 51 s3: `--max_step` was 127 lines of usage, then transformers' "Some specified arguments are not used".
    A misspelt option is named before a missing one (the first thing to fix); a negative value is no option."""
    (tmp_path / "train.txt").write_text("a b\n", encoding="utf-8")
    files = ["--train-file", str(tmp_path / "train.txt"), "--output-dir", str(tmp_path / "model")]
    unknown = "unrecognized arguments: --max_step; did you mean --max_steps?"
    for argv, line in {
        (*files, "--validation-file", str(tmp_path / "train.txt"), "--max_step", "20"): unknown,
        ("--max_step", "20"): unknown,
        (*files, "--seed", "-1", "--max_step=20"): "unrecognized arguments: --max_step=20; did you mean --max_steps?",
        tuple(files): "the following arguments are required: --validation_file/--validation-file",
    }.items():
        capsys.readouterr()
        assert main(["pretrain", *argv]) == 2
        assert capsys.readouterr().err == f"hf-elmo: error: {line}\n"
    assert not (tmp_path / "model").exists() and not (tmp_path / "model.parts").exists()


def test_convert_reports_a_failed_upload_and_keeps_the_folder(tmp_path, monkeypatch, capsys):
    from huggingface_hub import HfApi

    def unreachable(self, repo_id, **kwargs):
        raise OSError("Name or service not known")

    monkeypatch.setattr(HfApi, "create_repo", unreachable)
    monkeypatch.setattr("huggingface_hub.constants.HF_HUB_OFFLINE", True)  # no reachability check: the call fails
    options, weights = write_original_checkpoint(tmp_path / "original", tiny_config())
    code = main(
        [
            "convert",
            *convert_args(options, weights, tmp_path / "out"),
            "--push-to-hub",
            "someone/elmo",
        ]
    )
    assert code == 1
    assert capsys.readouterr().err == (
        f"hf-elmo: error: {tmp_path / 'out'} was written, but the upload to "
        f"someone/elmo failed: Name or service not known; upload it with: hf upload "
        f"someone/elmo {tmp_path / 'out'}\n"
    )
    assert ElmoModel.from_pretrained(tmp_path / "out").config.n_layers == tiny_config().n_layers


def test_convert_push_without_network_is_one_line(tmp_path):
    options, weights = write_original_checkpoint(tmp_path / "original", tiny_config())
    env = {key: value for key, value in os.environ.items() if key not in ("HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE")}
    env.update(PYTHONPATH=str(ROOT), HF_ENDPOINT="http://127.0.0.1:9", HF_HOME=str(tmp_path / "hf-home"))
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "hf_elmo.cli",
            "convert",
            *convert_args(options, weights, tmp_path / "out"),
            "--push-to-hub",
            "someone/elmo",
            "--private",
        ],
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
    )
    assert result.returncode == 1
    assert result.stderr.splitlines()[-1] == (
        f"hf-elmo: error: {tmp_path / 'out'} was written, but the upload to someone/elmo failed: the Hub cannot be "
        f"reached; upload it with: hf upload someone/elmo {tmp_path / 'out'} --private"
    )
    assert "Traceback" not in result.stderr and (tmp_path / "out" / "model.safetensors").is_file()


def test_convert_output_respects_the_umask_and_names_the_overwrite_flag(tmp_path, capsys):
    options, weights = write_original_checkpoint(tmp_path / "original", tiny_config())
    previous = os.umask(0o027)
    try:
        assert (
            main(
                [
                    "convert",
                    *convert_args(options, weights, tmp_path / "out"),
                ]
            )
            == 0
        )
    finally:
        os.umask(previous)
    assert (tmp_path / "out").stat().st_mode & 0o777 == 0o750
    assert (tmp_path / "out" / "model.safetensors").stat().st_mode & 0o777 == 0o640  # transformers writes it 600
    assert all(path.stat().st_mode & 0o777 == 0o640 for path in (tmp_path / "out").iterdir())
    capsys.readouterr()
    assert (
        main(
            [
                "convert",
                *convert_args(options, weights, tmp_path / "out"),
            ]
        )
        == 1
    )
    assert "pass --overwrite" in capsys.readouterr().err


def test_embed_cpu_matmul_reaches_the_model(model_dir, model, tmp_path):
    """`--cpu-matmul int8` runs the int8 products: vectors near the float32 ones, not equal to them."""
    lines = ["the cat sat on the mat", "a dog under the house"]
    (tmp_path / "in.txt").write_text("\n".join(lines), encoding="utf-8")
    result = run_cli("embed", model_dir, tmp_path / "in.txt", tmp_path / "out.h5", "--top", "--cpu-matmul", "int8")
    assert result.returncode == 0, result.stderr
    written = read_hdf5(tmp_path / "out.h5")
    for index, line in enumerate(lines):
        expected = torch.from_numpy(reference_layers(model, line.split())[-1])
        quantized = torch.from_numpy(written[str(index)])
        assert not torch.allclose(quantized, expected, atol=FLOAT32_TOLERANCE)
        assert torch.nn.functional.cosine_similarity(quantized, expected, dim=-1).min() > 0.99


def test_a_cpu_matmul_the_config_does_not_know_is_an_argument_error(model_dir, tmp_path, capsys):
    """The parser has no choices for --cpu-matmul (it cannot import the config, which names them): the command
    checks the value against the config's names before loading anything, with argparse's exit status."""
    (tmp_path / "in.txt").write_text("the cat\n", encoding="utf-8")
    argv = ["embed", model_dir, tmp_path / "in.txt", tmp_path / "out.h5", "--top", "--cpu-matmul", "mkl"]
    assert main(list(map(str, argv))) == 2
    names = ", ".join(CPU_MATMULS)
    assert capsys.readouterr().err == f"hf-elmo: error: --cpu-matmul must be one of {names}, got 'mkl'\n"
    assert sorted(path.name for path in tmp_path.iterdir()) == ["in.txt"]


def test_push_uploads_a_bundled_model_complete_and_a_bad_id_is_one_line(stand_in_hub, capsys):
    """`hf-elmo push` through the stand-in Hub: the repository made private, holding the code and `auto_map` that
    load it by id without hf_elmo; an id the Hub cannot take is one line, exit status 1."""
    assert main(["push", "ko-nsmc", "someone/ko-nsmc", "--private"]) == 0
    assert "uploaded ko-nsmc to someone/ko-nsmc: " in capsys.readouterr().out
    assert "someone/ko-nsmc" in stand_in_hub.private
    files = {file.name: file for file in stand_in_hub.files("someone/ko-nsmc")}
    assert "modeling_elmo.py" in files
    assert "AutoModel" in json.loads(files["config.json"].read_text(encoding="utf-8"))["auto_map"]
    assert main(["push", "ko-nsmc", "bad id!"]) == 1
    lines = capsys.readouterr().err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("hf-elmo: error: bad id! "), lines


def test_embed_of_a_hub_model_reading_morphemes_needs_pretokenize_once_its_tokenizer_loads(
    stand_in_hub, tmp_path, capsys
):
    """A Hub id has no local tokenizer_config.json to read before the model loads: the same one line as a local
    folder's, once its tokenizer has loaded, and nothing written."""
    assert main(["push", "ko-nsmc", "someone/ko-nsmc"]) == 0
    work = tmp_path / "work"
    work.mkdir()
    (work / "ko.txt").write_text("배가 고프다\n", encoding="utf-8")
    capsys.readouterr()
    assert main(["embed", "someone/ko-nsmc", str(work / "ko.txt"), str(work / "ko.npy"), "--top"]) == 1
    assert capsys.readouterr().err.strip().splitlines()[-1] == (
        "hf-elmo: error: someone/ko-nsmc reads Korean morphemes (pre_tokenizer korean_morphemes), not whitespace "
        "words: pass --pretokenize (one vector per morpheme)"
    )
    assert [path.name for path in work.iterdir()] == ["ko.txt"]


def test_quickstart_options_reach_the_comparison_and_are_checked_before_it(tmp_path, monkeypatch, capsys):
    """`--model` runs the bundled homonyms on that biLM, `--word` with `--sentences` the user's homonym (read by
    `quickstart.read_homonym` before the model loads); one without the other, a file that does not exist or does
    not hold two senses is one line. (`quickstart.run` itself is tested in test_quickstart.py: a spy here.)"""
    import hf_elmo.quickstart

    calls = []
    monkeypatch.setattr(hf_elmo.quickstart, "run", lambda plot, model=None, homonyms=None: calls.append(locals()))
    senses = tmp_path / "senses.txt"
    senses.write_text("boat\tthe boat sank\nboat\ta boat sailed\nbat\ta bat flew\nbat\tthe bat slept\n", "utf-8")
    assert main(["quickstart", "--no-plot", "--model", "ko-nsmc"]) == 0
    assert calls[-1]["model"] == "ko-nsmc" and calls[-1]["homonyms"] == hf_elmo.quickstart.HOMONYMS
    assert main(["quickstart", "--no-plot", "--model", "ko-nsmc", "--word", "boat", "--sentences", str(senses)]) == 0
    assert calls[-1]["homonyms"] == [hf_elmo.quickstart.read_homonym(senses, "boat")]
    (tmp_path / "one.txt").write_text("boat\tthe boat sank\nboat\ta boat sailed\n", encoding="utf-8")
    mistakes = {
        ("--word", "boat"): (2, "--word and --sentences go together"),
        ("--sentences", str(senses)): (2, "--word and --sentences go together"),
        ("--word", "boat", "--sentences", str(tmp_path / "no.txt")): (1, "no such file for --sentences"),
        ("--word", "boat", "--sentences", str(tmp_path / "one.txt")): (1, f"{tmp_path / 'one.txt'}: give two senses"),
    }
    count = len(calls)
    for arguments, (code, start) in mistakes.items():
        capsys.readouterr()
        assert main(["quickstart", "--no-plot", "--model", "ko-nsmc", *arguments]) == code, arguments
        lines = capsys.readouterr().err.strip().splitlines()
        assert len(lines) == 1 and lines[0].startswith(f"hf-elmo: error: {start}"), (arguments, lines)
    assert len(calls) == count  # no comparison ran


def test_what_embed_and_info_need_is_answered_before_a_model_loads(tmp_path, monkeypatch, capsys):
    """Issue 51 s3: decided from the folder's JSON files and the installed packages, before any model loads: the
    `--pretokenize` a folder reading morphemes needs, kiwipiepy for it, h5py for HDF5, and a folder holding an
    original checkpoint (named with the `hf-elmo convert` that makes a model of it); `info` says what a folder
    reads."""
    import hf_elmo.cli

    def no_load(*args, **kwargs):
        raise AssertionError("a model was loaded")

    monkeypatch.setattr(hf_elmo.cli, "load", no_load)
    find_spec, hidden = importlib.util.find_spec, set()
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name in hidden else find_spec(name, *a))
    (tmp_path / "ko.txt").write_text("배가 고프다\n", encoding="utf-8")
    embed = ["embed", "ko-nsmc", str(tmp_path / "ko.txt"), str(tmp_path / "ko.hdf5"), "--top"]

    def one_line(argv: list[str], code: int) -> str:
        capsys.readouterr()
        assert main(argv) == code, argv
        lines = capsys.readouterr().err.strip().splitlines()
        assert len(lines) == 1 and lines[0].startswith("hf-elmo: error: "), lines
        return lines[0].removeprefix("hf-elmo: error: ")

    assert one_line(embed, 1).startswith("ko-nsmc reads Korean morphemes (pre_tokenizer korean_morphemes), not")
    hidden.update({"h5py", "kiwipiepy"})
    assert one_line([*embed, "--pretokenize"], 1) == (
        'ko-nsmc reads Korean morphemes, which needs kiwipiepy: pip install "kiwipiepy>=0.21"'
    )
    hidden.discard("kiwipiepy")
    assert one_line([*embed, "--pretokenize"], 1) == "HDF5 output needs h5py: pip install h5py (or use --format npy)"
    hidden.clear()
    original = tmp_path / "original"
    original.mkdir()
    options, weights = write_original_checkpoint(original, tiny_config())
    expected = (
        f"{original} holds an original (bilm-tf) checkpoint, not an hf_elmo model folder: convert it with hf-elmo "
        f"convert --options-file {options} --weight-file {weights} --output-dir {original}-hf"
    )
    assert one_line(["info", str(original)], 1) == expected
    assert (
        one_line(["embed", str(original), str(tmp_path / "ko.txt"), str(tmp_path / "o.hdf5"), "--top"], 1) == expected
    )
    monkeypatch.undo()  # info loads the model
    capsys.readouterr()
    assert main(["info", "ko-nsmc"]) == 0
    out = capsys.readouterr().out
    assert "reads: Korean morphemes (pre_tokenizer korean_morphemes), through kiwipiepy (installed)" in out
    assert "embed needs: --pretokenize" in out
