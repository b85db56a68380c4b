"""Fine-tunes an ELMo sentence (or sentence-pair) classifier on local csv/json files with the stock `Trainer`.

    python examples/run_classification.py --model_name_or_path ELMO_FOLDER \
        --train_file train.csv --validation_file validation.csv --test_file test.csv \
        --do_train --do_eval --do_predict --output_dir outputs/my-classifier --num_train_epochs 3 --learning_rate 1e-3

The files hold a `text` column (and `text_pair` for pairs, when present) and a `label` column (strings or ints);
the column names are arguments. The model is an `ElmoModel` folder (a converted or pre-trained biLM, or a bundled one
by name, `ko-nsmc`: a new head is added) or a fine-tuned `ElmoForSequenceClassification` folder. Accuracy and
macro-F1 are reported for every split with labels, written to `output_dir/all_results.json`, and the output folder
(model, tokenizer, model card) is ready for `push_to_hub`. Every `TrainingArguments` option applies (`--bf16`,
`--per_device_train_batch_size`, ...).

`--word_vector_dim N` puts a learned word vector over the tokenizer's word vocabulary beside the layer mix (the
paper's `[x_k ; ELMo_k]`); `--word_vectors_from_softmax` starts it from the pre-training softmax of a folder
`hf-elmo pretrain` saved, at its width. The output folder's tokenizer gives the word ids, so that
`pipeline("text-classification", model=OUTPUT_DIR)` needs nothing more.

The output folder appears complete or not at all, and one that exists is replaced, whole, only with
`--overwrite_output_dir`. Mistakes in the command line or the data files are one line, exit status 2, before any
model loads (`run_steps.py`).
"""

import sys
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import torch
from datasets import DatasetDict
from model_card import write_fine_tuned_card
from run_steps import (
    TABLE_SUFFIXES,
    UsageError,
    checked_run,
    data_files,
    load_model,
    output_written_whole,
    read_table,
)
from transformers import EvalPrediction, Trainer, TrainingArguments

import hf_elmo
from hf_elmo import ElmoForSequenceClassification, ElmoTokenizer
from hf_elmo.errors import run_entry_point
from hf_elmo.loading import read_weights_with_prefix
from hf_elmo.modeling_elmo import word_vectors_from_softmax

HEAD_OPTIONS = (
    "task_lstm_dim",
    "pooling",
    "mix_dropout",
    "mix_layer_norm",
    "mix_l2_coefficient",
    "concat_token_representation",
    "word_vector_dim",
)


@dataclass
class ModelArguments:
    model_name_or_path: str = field(
        metadata={"help": "an ElmoModel folder, a bundled model (ko-nsmc) or a fine-tuned classifier (path or Hub id)"}
    )
    freeze_bilm: bool = field(default=True, metadata={"help": "train only the layer mix and the head (the paper)"})
    task_lstm_dim: int | None = field(default=None, metadata={"help": "units per direction of a task BiLSTM"})
    pooling: str | None = field(default=None, metadata={"help": "mean, max or mean_max over the words"})
    mix_dropout: float | None = field(default=None, metadata={"help": "dropout on the ELMo layer mix"})
    mix_layer_norm: bool | None = field(default=None, metadata={"help": "normalise each layer before mixing"})
    mix_l2_coefficient: float | None = field(default=None, metadata={"help": "L2 penalty on the mixing scalars"})
    concat_token_representation: bool | None = field(
        default=None, metadata={"help": "feed the context-independent token representation beside the mix"}
    )
    word_vector_dim: int | None = field(
        default=None, metadata={"help": "a learned word vector of this size beside the mix (0: none)"}
    )
    word_vectors_from_softmax: bool = field(
        default=False,
        metadata={"help": "start the word vectors from the pre-training softmax of the model folder, at its width"},
    )
    license: str = field(default="apache-2.0", metadata={"help": "license written in the model card"})


@dataclass
class DataTrainingArguments:
    train_file: str | None = field(default=None, metadata={"help": "csv or json(l) training file"})
    validation_file: str | None = field(default=None, metadata={"help": "csv or json(l) validation file"})
    test_file: str | None = field(default=None, metadata={"help": "csv or json(l) test file"})
    text_column: str = field(default="text", metadata={"help": "column holding the (first) sentence"})
    text_pair_column: str = field(
        default="text_pair", metadata={"help": "column holding the second sentence; used when present"}
    )
    label_column: str = field(default="label", metadata={"help": "column holding the label"})
    max_seq_length: int | None = field(
        default=None, metadata={"help": "positions kept per example, <S>/</S> included"}
    )
    max_train_samples: int | None = field(default=None, metadata={"help": "keep the first N training examples"})
    max_eval_samples: int | None = field(default=None, metadata={"help": "keep the first N validation examples"})
    max_predict_samples: int | None = field(default=None, metadata={"help": "keep the first N test examples"})

    def __post_init__(self):
        if self.train_file is None and self.validation_file is None and self.test_file is None:
            raise ValueError("give at least one of --train_file, --validation_file, --test_file")
        files = [name for name in (self.train_file, self.validation_file, self.test_file) if name is not None]
        for name in files:
            if Path(name).suffix not in TABLE_SUFFIXES:
                raise ValueError(f"{name}: data files must be .csv, .json or .jsonl")
        if len({Path(name).suffix == ".csv" for name in files}) > 1:
            raise ValueError("all data files must have the same format (csv, or json/jsonl)")


def load_splits(data_args: DataTrainingArguments) -> DatasetDict:
    """
    The given files as a `DatasetDict` with splits `train`, `validation`, `test`: each holds the text column, and the
    training and validation files the label column too.
    """
    limits = {
        "train": data_args.max_train_samples,
        "validation": data_args.max_eval_samples,
        "test": data_args.max_predict_samples,
    }
    raw = DatasetDict()
    for split, path in data_files(data_args).items():
        dataset = read_table(path)
        needed = {"text": data_args.text_column}
        if split != "test":  # a test file may hold text alone, to be labelled
            needed["label"] = data_args.label_column
        for key, column in needed.items():
            if column not in dataset.column_names:
                raise UsageError(
                    f"the {split} file {path} has no column {column!r} (columns: {', '.join(dataset.column_names)}); "
                    f"set --{key}_column"
                )
        if limits[split] is not None:
            dataset = dataset.select(range(min(limits[split], len(dataset))))
        raw[split] = dataset
    return raw


def label_names(raw, data_args: DataTrainingArguments, config) -> list[str]:
    """The label names, by id: the fine-tuned model's own when they cover the data's, else the sorted labels of the
    data."""
    seen = set()
    for dataset in raw.values():
        if data_args.label_column in dataset.column_names:
            seen.update(str(label) for label in dataset[data_args.label_column])
    saved = [config.id2label[i] for i in range(len(config.id2label))] if config is not None else []
    if saved and seen <= set(saved) and not all(name.startswith("LABEL_") for name in saved):
        return saved
    if not seen:
        raise UsageError(
            f"no file has a {data_args.label_column!r} column to learn the labels from; set --label_column"
        )
    return sorted(
        seen, key=lambda name: (not name.lstrip("-").isdigit(), int(name) if name.lstrip("-").isdigit() else 0, name)
    )


def settle_word_vectors(model_args: ModelArguments, model_name: str, overrides: dict) -> torch.Tensor | None:
    """
    The word vectors asked for, as config fields in `overrides` (`word_vector_dim`, and the tokenizer's word
    vocabulary size as `word_vector_vocab_size`), before any model loads; with `--word_vectors_from_softmax`, the
    softmax's rows to start them from (and its width as their size), else None. A folder without a word vocabulary
    or, for the softmax, without a pre-training softmax of that vocabulary, is a `UsageError`.
    """
    if not model_args.word_vectors_from_softmax and not overrides.get("word_vector_dim"):
        if "word_vector_dim" in overrides:  # 0: none, as the field says
            overrides["word_vector_vocab_size"] = None
        return None
    vocab_size = ElmoTokenizer.from_pretrained(model_name).word_vocab_size
    if vocab_size is None:
        raise UsageError(
            f"word vectors are looked up in the word vocabulary (word_vocab.json) of a pre-trained biLM's tokenizer: "
            f"{model_args.model_name_or_path} has none"
        )
    overrides["word_vector_vocab_size"] = vocab_size
    if not model_args.word_vectors_from_softmax:
        return None
    try:
        table = word_vectors_from_softmax(read_weights_with_prefix(model_name, "softmax."))
    except ValueError as error:
        raise UsageError(
            f"--word_vectors_from_softmax: {model_args.model_name_or_path} holds no pre-training softmax: give the "
            "folder hf-elmo pretrain saved, or --word_vector_dim N alone to learn the word vectors from scratch"
        ) from error
    if table.shape[0] != vocab_size:
        raise UsageError(
            f"--word_vectors_from_softmax: the softmax of {model_args.model_name_or_path} has {table.shape[0]} rows, "
            f"its tokenizer's word vocabulary {vocab_size} words"
        )
    if overrides.setdefault("word_vector_dim", table.shape[1]) != table.shape[1]:
        raise UsageError(
            f"--word_vector_dim {overrides['word_vector_dim']}: the word vectors from the softmax are its "
            f"{table.shape[1]} values wide; leave --word_vector_dim out"
        )
    return table


def classification_metrics(prediction: EvalPrediction) -> dict[str, float]:
    """Accuracy and macro-averaged F1 over the classes seen in the labels or the predictions."""
    predicted = np.argmax(prediction.predictions, axis=-1)
    gold = prediction.label_ids
    scores = []
    for label in np.union1d(gold, predicted):
        true_positive = np.sum((predicted == label) & (gold == label))
        denominator = np.sum(predicted == label) + np.sum(gold == label)
        scores.append(2 * true_positive / denominator)
    return {"accuracy": float(np.mean(predicted == gold)), "macro_f1": float(np.mean(scores))}


def main(argv: list[str] | None = None) -> dict[str, dict[str, float]]:
    with checked_run((ModelArguments, DataTrainingArguments), argv, HEAD_OPTIONS) as run:  # before a model loads
        raw = load_splits(run.data_args)
        saved_config = hf_elmo.ElmoConfig.from_pretrained(run.model_name)
        is_classifier = "ElmoForSequenceClassification" in (saved_config.architectures or [])
        labels = label_names(raw, run.data_args, saved_config if is_classifier else None)
        softmax_rows = settle_word_vectors(run.model_args, run.model_name, run.overrides)
    with output_written_whole(run.training_args, run.output_lock):
        return fine_tune(
            run.model_args, run.data_args, run.training_args, run.model_name, raw, labels, run.overrides, softmax_rows
        )


def fine_tune(
    model_args: ModelArguments,
    data_args: DataTrainingArguments,
    training_args: TrainingArguments,
    model_name: str,
    raw: DatasetDict,
    labels: list[str],
    overrides: dict,
    softmax_rows: torch.Tensor | None,
) -> dict[str, dict[str, float]]:
    """The run once its arguments and data are checked: trains, evaluates and predicts what `training_args` asks,
    writing into `training_args.output_dir`; the metrics by split. The word vectors start from `softmax_rows` when
    given (`settle_word_vectors`)."""
    label2id = {name: i for i, name in enumerate(labels)}
    pairs = all(data_args.text_pair_column in dataset.column_names for dataset in raw.values())
    model, tokenizer = load_model(
        model_name,
        ElmoForSequenceClassification,
        num_labels=len(labels),
        id2label=dict(enumerate(labels)),
        label2id=label2id,
        problem_type="single_label_classification",
        freeze_bilm=model_args.freeze_bilm,
        pair_classification=pairs,
        **overrides,
    )
    if softmax_rows is not None:
        model.init_word_vectors(softmax_rows)

    def preprocess(batch):
        second = batch[data_args.text_pair_column] if pairs else None
        encoding = tokenizer(
            batch[data_args.text_column],
            second,
            truncation=data_args.max_seq_length is not None,
            max_length=data_args.max_seq_length,
        )
        if data_args.label_column in batch:
            encoding["labels"] = [label2id[str(label)] for label in batch[data_args.label_column]]
        return encoding

    with training_args.main_process_first(desc="tokenizing"):
        data = {
            split: dataset.map(preprocess, batched=True, remove_columns=dataset.column_names, desc=split)
            for split, dataset in raw.items()
        }

    trainer = Trainer(
        model=model,
        args=training_args,
        train_dataset=data.get("train"),
        eval_dataset=data.get("validation"),
        processing_class=tokenizer,
        compute_metrics=classification_metrics,
    )
    results = {}
    if training_args.do_train:
        train_result = trainer.train()
        trainer.save_metrics("train", train_result.metrics)
    if training_args.do_eval:
        metrics = trainer.evaluate()
        trainer.save_metrics("eval", metrics)
        results["validation"] = {name.removeprefix("eval_"): value for name, value in metrics.items()}
    if training_args.do_predict:
        test_set = data["test"]
        labelled = "labels" in test_set.column_names
        prediction = trainer.predict(test_set, metric_key_prefix="test")
        if labelled:
            trainer.save_metrics("test", prediction.metrics)
            results["test"] = {name.removeprefix("test_"): value for name, value in prediction.metrics.items()}
        if trainer.is_world_process_zero():
            predicted = np.argmax(prediction.predictions, axis=-1)
            path = Path(training_args.output_dir) / "test_predictions.txt"
            path.write_text("".join(f"{labels[i]}\n" for i in predicted), encoding="utf-8")

    for split, metrics in results.items():
        print(
            f"{split}: "
            + ", ".join(
                f"{name} = {value:.4f}"
                for name, value in sorted(metrics.items())
                if name in ("accuracy", "macro_f1", "loss")
            )
        )
    if training_args.do_train:
        trainer.save_model(training_args.output_dir)  # model, tokenizer (the processing class) and code files
        if trainer.is_world_process_zero():
            card_results = {
                split: {name: value for name, value in metrics.items() if name in ("accuracy", "macro_f1")}
                for split, metrics in results.items()
            }
            write_fine_tuned_card(
                training_args.output_dir,
                script="run_classification.py",
                model_name_or_path=model_args.model_name_or_path,
                pipeline_tag="text-classification",
                tags=["text-classification"],
                license=model_args.license,
                head=f"{'sentence-pair' if pairs else 'sentence'} classification into {len(labels)} classes "
                f"({', '.join(labels)})",
                freeze_bilm=model_args.freeze_bilm,
                results=card_results,
                data_files=list(data_files(data_args).values()),
                auto_class="AutoModelForSequenceClassification",
                usage='batch = tokenizer(["a sentence to classify"], padding=True, return_tensors="pt")\n'
                "label = model.config.id2label[model(**batch).logits.argmax(-1).item()]",
            )
    return results


if __name__ == "__main__":
    sys.exit(run_entry_point(main))
