"""What the fine-tuning examples share: their command line, what a run settles before any model loads (which of
training, evaluation and prediction it runs, its data files, the model it starts from, the folder it writes), and
that output folder, which appears complete or not at all and holds no checkpoint: the Trainer's checkpoints (with
their optimizer state) are kept beside it, in `OUTPUT.checkpoints/`, so that the folder is the model alone, ready for
the Hub.

Every mistake of the command line or the data files ends the script before any model loads, with one line
(`run_classification.py: error: ...`) and exit status 2, as argparse does: the checks raise [`UsageError`], which
[`ExampleArgumentParser.usage_errors`] reports.
"""

import contextlib
import logging
import os
import shutil
import sys
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, NamedTuple

import datasets
import torch
from accelerate import PartialState
from datasets import Dataset, load_dataset
from datasets.exceptions import DatasetGenerationError
from transformers import HfArgumentParser, TrainingArguments, set_seed
from transformers.trainer_utils import PREFIX_CHECKPOINT_DIR

from hf_elmo.command_line import empty_argument
from hf_elmo.configuration_elmo import ElmoConfig, field_rule
from hf_elmo.errors import CommandError, first_line
from hf_elmo.folders import (
    OutputLock,
    apply_umask,
    lock_output,
    make_new_folder,
    replace_folder,
    replacing_problem,
    write_error,
    write_failure_reason,
)
from hf_elmo.loading import load_model_and_tokenizer, resolve_model_name

TABLE_SUFFIXES = (".csv", ".json", ".jsonl")


@dataclass
class OutputArguments:
    """What the run may do to an output folder that exists."""

    # transformers 5's TrainingArguments dropped its flag of this name; transformers' examples still take it.
    overwrite_output_dir: bool = field(
        default=False, metadata={"help": "replace --output_dir when it exists and is not empty"}
    )


class UsageError(ValueError):
    """A mistake in the command line or the data files; the message says what is wrong and how to fix it."""


class ExampleArgumentParser(HfArgumentParser):
    """`HfArgumentParser` whose every error is one line, exit status 2."""

    def error(self, message: str):
        # argparse prints the usage first: with every TrainingArguments option, hundreds of lines above the error.
        self.exit(2, f"{self.prog}: error: {message}\n")

    def parse(self, argv: list[str] | None) -> tuple:
        """The dataclasses of `argv` (`sys.argv[1:]` when None); what their `__post_init__` refuses is a usage error,
        as are arguments no dataclass takes and an empty argument (`command_line.empty_argument`)."""
        argv = sys.argv[1:] if argv is None else list(argv)
        if error := empty_argument(argv):
            self.error(error)
        try:
            return self.parse_args_into_dataclasses(args=argv)
        except ValueError as error:
            self.error(first_line(error))

    @contextlib.contextmanager
    def usage_errors(self) -> Iterator[None]:
        """Reports a `UsageError` raised in the block as one line, exit status 2."""
        try:
            yield
        except UsageError as error:
            self.error(str(error))


class ExampleRun(NamedTuple):
    """What a fine-tuning example settled before any model loads."""

    model_args: Any
    data_args: Any
    training_args: TrainingArguments
    model_name: str  # what `from_pretrained` loads for --model_name_or_path
    overrides: dict  # the head options given: config fields and their values
    # The first process's hold on --output_dir, from before it was checked until `output_written_whole` has written
    # it; None in the other processes of a distributed run.
    output_lock: OutputLock | None


@contextlib.contextmanager
def checked_run(argument_types: tuple, argv: list[str] | None, head_options: tuple[str, ...]) -> Iterator[ExampleRun]:
    """
    Parses `argv` into `argument_types` (the script's model and data arguments), `OutputArguments` and
    `TrainingArguments`, and checks what every example checks before a model loads: the steps and their files, the
    head options given (the model arguments named in `head_options`, config fields), the model's name and the output
    folder, once its lock is held (`folders.lock_output`: another run writing it ends this one in one line, exit
    status 1). The block checks the rest of its data; a `UsageError` raised here or in the block ends the script in
    one line, exit status 2, and drops the lock. After the block: pinned memory only for a GPU, and the seed set.
    """
    parser = ExampleArgumentParser((*argument_types, OutputArguments, TrainingArguments), allow_abbrev=False)
    model_args, data_args, output_args, training_args = parser.parse(argv)
    logging.basicConfig(
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
        level=logging.INFO,
        handlers=[logging.StreamHandler(sys.stdout)],
    )
    with parser.usage_errors():
        check_steps(training_args, data_args)
        check_data_files(data_args)
        overrides = {name: getattr(model_args, name) for name in head_options if getattr(model_args, name) is not None}
        check_head_options(overrides)
        model_name = model_to_load(model_args.model_name_or_path)
        output_lock = lock_output_dir(training_args)
        try:
            check_output_dir(training_args, output_args.overwrite_output_dir, model_name, data_args)
            yield ExampleRun(model_args, data_args, training_args, model_name, overrides, output_lock)
        except BaseException:
            if output_lock is not None:
                output_lock.release()
            raise
    pin_memory_only_for_a_gpu(training_args)
    set_seed(training_args.seed)


def check_steps(training_args: TrainingArguments, data_args) -> None:
    """
    As in transformers' examples, `--do_train`, `--do_eval` and `--do_predict` choose what runs; each needs its file
    (`data_args.train_file`, `validation_file`, `test_file`). (`--eval_strategy` other than `no` implies `--do_eval`.)
    """
    steps = [
        (training_args.do_train, "--do_train", data_args.train_file, "--train_file"),
        (training_args.do_eval, "--do_eval", data_args.validation_file, "--validation_file"),
        (training_args.do_predict, "--do_predict", data_args.test_file, "--test_file"),
    ]
    if not any(chosen for chosen, *_ in steps):
        raise UsageError("nothing to do: pass --do_train, --do_eval and/or --do_predict")
    for chosen, flag, file, file_flag in steps:
        if chosen and file is None:
            raise UsageError(f"{flag} needs {file_flag}")


def data_files(data_args) -> dict[str, str]:
    """The data files given, by split (`train`, `validation`, `test`)."""
    files = {"train": data_args.train_file, "validation": data_args.validation_file, "test": data_args.test_file}
    return {split: path for split, path in files.items() if path is not None}


def check_data_files(data_args) -> None:
    """Each data file given is a readable file holding something other than whitespace."""
    for split, path in data_files(data_args).items():
        flag = f"--{split}_file"
        if not Path(path).exists():
            raise UsageError(f"no such file: {path} ({flag})")
        if Path(path).is_dir():
            raise UsageError(f"{path} is a folder; {flag} takes a file")
        try:
            with open(path, "rb") as handle:
                blank = all(not chunk.strip() for chunk in iter(lambda: handle.read(1 << 16), b""))
        except OSError as error:
            raise UsageError(f"cannot read {path} ({flag}): {error.strerror}") from error
        if blank:
            raise UsageError(f"{path} is empty ({flag})")


def read_table(path: str) -> Dataset:
    """The rows of a csv or json(l) file (by its suffix) as a `Dataset`; a file that holds no rows, or that `datasets`
    cannot read, is a `UsageError`."""
    builder = "csv" if Path(path).suffix == ".csv" else "json"
    shown = not datasets.are_progress_bars_disabled()
    datasets.disable_progress_bars()  # a bar per local file is noise, and would stand above a one-line error
    try:
        return load_dataset(builder, data_files=path, split="train")
    except DatasetGenerationError as error:  # the reader's own error (pandas', pyarrow's) is its cause
        raise UsageError(f"cannot read {path} as {builder}: {first_line(error.__cause__ or error)}") from error
    except ValueError as error:
        # datasets says 'Instruction "train" corresponds to no data!' of a file that has no rows.
        if "corresponds to no data" not in str(error):
            raise UsageError(f"cannot read {path} as {builder}: {first_line(error)}") from error
        below = " below its header" if builder == "csv" else ""
        raise UsageError(f"{path} holds no rows{below}") from error
    finally:
        if shown:
            datasets.enable_progress_bars()


def check_head_options(options: dict) -> None:
    """Each head option given (an `ElmoConfig` field and its value) is one its field allows."""
    for name, value in options.items():
        try:
            field_rule(ElmoConfig.__dataclass_fields__[name]).checked(f"--{name}", value)
        except ValueError as error:
            raise UsageError(str(error)) from error


def model_to_load(name: str) -> str:
    """
    What `from_pretrained` loads for `--model_name_or_path`: a folder, a bundled model's name (`ko-nsmc`) or a Hub id
    (`hf_elmo.loading.resolve_model_name`). Anything else ends the script with one line naming the fix, at once
    when the Hub is out of reach.
    """
    try:
        return resolve_model_name(name)
    except ValueError as error:
        raise CommandError(str(error)) from error


def load_model(name: str, model_class, **from_pretrained_kwargs):
    """The model `name` as `model_class` with its tokenizer (`hf_elmo.loading.load_model_and_tokenizer`); a model that
    does not load ends the script with one line."""
    try:
        return load_model_and_tokenizer(name, model_class, **from_pretrained_kwargs)
    except ValueError as error:
        raise CommandError(str(error)) from error


def lock_output_dir(training_args: TrainingArguments) -> OutputLock | None:
    """The lock of `--output_dir` (`folders.lock_output`), taken by the first process of the run; where another run
    holds it, or it cannot be taken, the script ends with one line (its `ElmoConversionError`, which
    `errors.run_entry_point` reports)."""
    if training_args.process_index != 0:
        return None
    return lock_output(Path(training_args.output_dir).resolve())


def check_output_dir(training_args: TrainingArguments, overwrite: bool, model_name: str, data_args) -> None:
    """
    `--output_dir` is a folder to write: absent or empty, or, with `overwrite` (`--overwrite_output_dir`), a folder
    the run replaces whole. A run that trains nothing may not replace the model folder it reads; nor may any run
    replace a folder that holds its data files, the working folder or (other than itself) the model folder
    (`folders.replacing_problem`).
    """
    output_dir = Path(training_args.output_dir)
    if output_dir.exists() and not output_dir.is_dir():
        raise UsageError(f"--output_dir {output_dir} is a file")
    checkpoints = checkpoints_folder(output_dir.resolve())
    if os.path.lexists(checkpoints) and not overwrite:
        raise UsageError(
            f"{checkpoints} exists, the checkpoints of an earlier run into --output_dir {output_dir} "
            "(pass --overwrite_output_dir to replace them)"
        )
    if not output_dir.is_dir() or not any(output_dir.iterdir()):
        return
    if not overwrite:
        raise UsageError(
            f"--output_dir {output_dir} exists and is not empty (pass --overwrite_output_dir to replace it)"
        )
    in_place = Path(model_name).resolve() == output_dir.resolve()
    if in_place and not training_args.do_train:
        raise UsageError(f"--output_dir {output_dir} is the model folder: without --do_train, give another folder")
    inputs = [*data_files(data_args).values(), *([] if in_place else [model_name])]
    if problem := replacing_problem(output_dir, inputs, "--overwrite_output_dir"):
        raise UsageError(problem)


def checkpoints_folder(output_dir: Path) -> Path:
    """Where a run into `output_dir` keeps the Trainer's checkpoints: `OUTPUT.checkpoints/` beside it, never inside
    the folder published (a checkpoint holds the optimizer's state, half of its size)."""
    return output_dir.with_name(f"{output_dir.name}.checkpoints")


def move_checkpoints(staging: Path, checkpoints: Path) -> None:
    """
    The Trainer's `checkpoint-N/` folders, saved in `staging` (its `output_dir` while the run trains), moved to
    `checkpoints` before `staging` becomes the output folder. What an earlier run left there (which
    `--overwrite_output_dir` allowed, `check_output_dir`) is replaced; `checkpoints` is made by
    `folders.make_new_folder` (a link there is refused, never followed), and removed again where this run saved none.
    """
    saved = sorted(path for path in staging.glob(f"{PREFIX_CHECKPOINT_DIR}-*") if path.is_dir())
    if not saved and not os.path.lexists(checkpoints):
        return
    make_new_folder(checkpoints, "checkpoints folder")
    for checkpoint in saved:
        os.rename(checkpoint, checkpoints / checkpoint.name)  # the same parent folder: renamed, not copied
    if not saved:
        checkpoints.rmdir()


@contextlib.contextmanager
def output_written_whole(training_args: TrainingArguments, output_lock: OutputLock | None) -> Iterator[Path]:
    """
    Points `training_args.output_dir` at a staging folder beside it (`.NAME.partial`) while the block runs; when it
    ends without error, the Trainer's checkpoints are moved out of it (`move_checkpoints`, to `OUTPUT.checkpoints/`)
    and the staging folder becomes the output folder, replacing any there. On any error it is removed
    and the output folder is left as it was; a failed write (a full disk, a read-only folder: `folders.write_error`)
    ends the script in one line, exit status 1. Then `output_lock`, the run's hold on the output folder
    (`ExampleRun`), is released.

    Every process of a distributed run writes into the same staging folder: its name is fixed, so that the processes
    agree on it without talking, and one left by a stopped run is removed by the next (`folders.make_new_folder`: a
    link found there is refused in one line, never followed).
    """
    given = training_args.output_dir
    output_dir = Path(given).resolve()
    staging = output_dir.with_name(f".{output_dir.name}.partial")
    if training_args.push_to_hub and training_args.hub_model_id is None:
        training_args.hub_model_id = output_dir.name  # the Trainer's default, the output folder's name
    try:
        with training_args.main_process_first(local=False, desc="making the staging folder"):
            if training_args.should_save:
                make_new_folder(staging)
        training_args.output_dir = str(staging)
        yield staging
        PartialState().wait_for_everyone()  # every process has written its files
        if training_args.should_save:
            move_checkpoints(staging, checkpoints_folder(output_dir))
            apply_umask(staging)
            replace_folder(staging, output_dir)
    except Exception as error:
        if write_failure_reason(error) is None:
            raise
        raise CommandError(write_error(output_dir, error)) from error
    finally:
        training_args.output_dir = given
        if training_args.should_save:
            shutil.rmtree(staging, ignore_errors=True)  # never a link found there: rmtree refuses links
        if output_lock is not None:
            output_lock.release()


def pin_memory_only_for_a_gpu(training_args: TrainingArguments) -> None:
    """Pinned memory only speeds up copies to a GPU; without one, every DataLoader of the run warns that it is unused
    (the rule of `hf-elmo pretrain` too)."""
    gpu = torch.cuda.is_available() and not training_args.use_cpu
    training_args.dataloader_pin_memory = training_args.dataloader_pin_memory and gpu
