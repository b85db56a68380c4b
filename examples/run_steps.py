"""Which of training, evaluation and prediction a fine-tuning example runs, checked before any data is read."""

from transformers import TrainingArguments


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
