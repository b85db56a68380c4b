"""What a fine-tuning example settles before any data is read: which of training, evaluation and prediction it runs,
the model it starts from, and whether its batches go to pinned memory."""

import sys
from pathlib import Path

import torch
from transformers import TrainingArguments

from hf_elmo.loading import resolve_model_name


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
        raise ValueError("nothing to do: pass --do_train, --do_eval and/or --do_predict")
    for chosen, flag, file, file_flag in steps:
        if chosen and file is None:
            raise ValueError(f"{flag} needs {file_flag}")


def model_to_load(name: str) -> str:
    """
    What `from_pretrained` loads for `--model_name_or_path`: a folder, a bundled model's name (`ko-nsmc`) or a Hub id
    (`hf_elmo.loading.resolve_model_name`). Anything else ends the script with one line naming the fix, at once
    when the Hub is out of reach.
    """
    try:
        return resolve_model_name(name)
    except ValueError as error:
        sys.exit(f"{Path(sys.argv[0]).name}: error: {error}")


def pin_memory_only_for_a_gpu(training_args: TrainingArguments) -> None:
    """Pinned memory only speeds up copies to a GPU; without one, every DataLoader of the run warns that it is unused
    (the rule of `hf-elmo pretrain` too)."""
    gpu = torch.cuda.is_available() and not training_args.use_cpu
    training_args.dataloader_pin_memory = training_args.dataloader_pin_memory and gpu
