"""Fine-tunes an ELMo tagger (NER, chunking, POS) on local CoNLL or csv/json files with the stock `Trainer`.

    python examples/run_token_classification.py --model_name_or_path ELMO_FOLDER \
        --train_file train.conll --validation_file dev.conll --test_file test.conll \
        --do_train --do_eval --do_predict --output_dir outputs/my-tagger --num_train_epochs 3 --learning_rate 1e-3

CoNLL files (any other extension than .csv/.json/.jsonl) hold one token per line, its tag in the last column, and a
blank line between sentences (`-DOCSTART-` lines are skipped). csv/json files hold a `tokens` and a `tags` column:
lists, or strings of space-separated items. Each word's tag goes to its first position through `word_ids()` (-100
at `<S>`, `</S>`, padding and a word's later positions): a word is one position, or with a tokenizer that splits words
into smaller units (`pre_tokenizer="korean_morphemes"`), which reads each sentence as its words joined by spaces, its
first unit, where `predict_word_labels` reads a word's label. Entity-level precision, recall and F1
(`seqeval`, conlleval's rules) and token accuracy are reported for every split with tags, written to
`output_dir/all_results.json`, and the output folder (model, tokenizer, model card) is ready for `push_to_hub`.
It appears complete or not at all, and one that exists is replaced, whole, only with `--overwrite_output_dir`.
Mistakes in the command line or the data files are one line, exit status 2, before any model loads (`run_steps.py`).

`--use_crf` trains a linear-chain CRF over the tags (the ELMo paper's NER model) and predicts its Viterbi path;
`--crf_constraint BIO` (or `BIOES`) keeps that path within the tag scheme's legal transitions.
"""

import sys
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
from datasets import Dataset, DatasetDict
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
from seqeval.metrics import accuracy_score, f1_score, precision_score, recall_score
from transformers import DataCollatorForTokenClassification, EvalPrediction, Trainer, TrainingArguments

import hf_elmo
from hf_elmo import ElmoForTokenClassification
from hf_elmo.crf_elmo import allowed_transitions
from hf_elmo.errors import run_entry_point
from hf_elmo.tokenization_elmo import word_start_positions

HEAD_OPTIONS = (
    "task_lstm_dim",
    "mix_dropout",
    "mix_layer_norm",
    "mix_l2_coefficient",
    "concat_token_representation",
    "crf_constraint",
)


@dataclass
class ModelArguments:
    model_name_or_path: str = field(
        metadata={"help": "an ElmoModel folder, a bundled model (ko-nsmc) or a fine-tuned tagger (path or Hub id)"}
    )
    freeze_bilm: bool = field(default=True, metadata={"help": "train only the layer mix and the head (the paper)"})
    task_lstm_dim: int | None = field(default=None, metadata={"help": "units per direction of a task BiLSTM"})
    mix_dropout: float | None = field(default=None, metadata={"help": "dropout on the ELMo layer mix"})
    mix_layer_norm: bool | None = field(default=None, metadata={"help": "normalise each layer before mixing"})
    mix_l2_coefficient: float | None = field(default=None, metadata={"help": "L2 penalty on the mixing scalars"})
    concat_token_representation: bool | None = field(
        default=None, metadata={"help": "feed the context-independent token representation beside the mix"}
    )
    use_crf: bool = field(
        default=False,
        metadata={"help": "a linear-chain CRF over the tags (Viterbi path); a CRF tagger given keeps its CRF anyway"},
    )
    crf_constraint: str | None = field(
        default=None, metadata={"help": "the tag scheme (BIO or BIOES) whose legal transitions the CRF path keeps"}
    )
    license: str = field(default="apache-2.0", metadata={"help": "license written in the model card"})


@dataclass
class DataTrainingArguments:
    train_file: str | None = field(default=None, metadata={"help": "CoNLL, csv or json(l) training file"})
    validation_file: str | None = field(default=None, metadata={"help": "CoNLL, csv or json(l) validation file"})
    test_file: str | None = field(default=None, metadata={"help": "CoNLL, csv or json(l) test file"})
    tokens_column: str = field(default="tokens", metadata={"help": "csv/json column holding the words"})
    tags_column: str = field(default="tags", metadata={"help": "csv/json column holding the tags"})
    max_seq_length: int | None = field(
        default=None, metadata={"help": "positions kept per sentence, <S>/</S> included"}
    )
    max_train_samples: int | None = field(default=None, metadata={"help": "keep the first N training sentences"})
    max_eval_samples: int | None = field(default=None, metadata={"help": "keep the first N validation sentences"})
    max_predict_samples: int | None = field(default=None, metadata={"help": "keep the first N test sentences"})

    def __post_init__(self):
        if self.train_file is None and self.validation_file is None and self.test_file is None:
            raise ValueError("give at least one of --train_file, --validation_file, --test_file")


def read_conll(path: str) -> dict[str, list[list[str]]]:
    """`{"tokens": [...], "tags": [...]}` of a CoNLL file: first column the word, last column the tag."""
    sentences, tags, words, labels = [], [], [], []
    try:
        with open(path, encoding="utf-8") as handle:
            for number, line in enumerate(handle, start=1):
                columns = line.split()
                if not columns or columns[0] == "-DOCSTART-":
                    if words:
                        sentences.append(words)
                        tags.append(labels)
                        words, labels = [], []
                    continue
                if len(columns) < 2:
                    raise UsageError(f"{path}, line {number}: expected a word and a tag, got {line.strip()!r}")
                words.append(columns[0])
                labels.append(columns[-1])
    except UnicodeDecodeError as error:
        raise UsageError(f"{path} is not UTF-8 text ({error.reason} at byte {error.start})") from error
    if words:
        sentences.append(words)
        tags.append(labels)
    return {"tokens": sentences, "tags": tags}


def read_tagged_table(path: str, split: str, data_args: DataTrainingArguments) -> dict[str, list[list[str]]]:
    """
    `{"tokens": [...], "tags": [...]}` of a csv/json file; string cells are split on whitespace. The tags column may
    be absent from a test file (sentences to tag), not from a training or validation file.
    """
    table = read_table(path)
    columns = {"tokens": data_args.tokens_column, "tags": data_args.tags_column}
    data = {}
    for key, column in columns.items():
        if column not in table.column_names:
            if key == "tags" and split == "test":
                continue
            raise UsageError(
                f"the {split} file {path} has no column {column!r} (columns: {', '.join(table.column_names)}); "
                f"set --{key}_column"
            )
        data[key] = [cell.split() if isinstance(cell, str) else [str(item) for item in cell] for cell in table[column]]
    return data


def load_splits(data_args: DataTrainingArguments) -> DatasetDict:
    """The given files as a `DatasetDict` with columns `tokens` (and `tags` where given)."""
    limits = {
        "train": data_args.max_train_samples,
        "validation": data_args.max_eval_samples,
        "test": data_args.max_predict_samples,
    }
    splits = {}
    for split, path in data_files(data_args).items():
        if path.endswith(TABLE_SUFFIXES):
            data = read_tagged_table(path, split, data_args)
        else:
            data = read_conll(path)
        if not data["tokens"]:
            raise UsageError(f"{path} holds no sentence")
        for words, tags in zip(data["tokens"], data.get("tags", data["tokens"])):
            if len(words) != len(tags):
                raise UsageError(f"{path}: a sentence has {len(words)} words but {len(tags)} tags: {words}")
        dataset = Dataset.from_dict(data)
        if limits[split] is not None:
            dataset = dataset.select(range(min(limits[split], len(dataset))))
        splits[split] = dataset
    return DatasetDict(splits)


def tag_names(raw: DatasetDict, config) -> list[str]:
    """The tags by id: the fine-tuned model's own when they cover the data, else the data's tags, `O` first."""
    seen = {
        tag for dataset in raw.values() if "tags" in dataset.column_names for tags in dataset["tags"] for tag in tags
    }
    saved = [config.id2label[i] for i in range(len(config.id2label))] if config is not None else []
    if saved and seen <= set(saved):
        return saved
    if not seen:
        raise UsageError("no file has tags to learn them from")
    return sorted(seen, key=lambda tag: (tag != "O", tag[2:], tag))


def check_crf(overrides: dict, saved_config, tags: list[str]) -> None:
    """A CRF constraint (given, or the tagger's own) needs a CRF, and the tags of its scheme."""
    use_crf = overrides.get("use_crf", saved_config.use_crf)
    constraint = overrides.get("crf_constraint", saved_config.crf_constraint)
    if constraint is None:
        return
    if not use_crf:
        raise UsageError(f"--crf_constraint {constraint} constrains a CRF: pass --use_crf too")
    try:
        allowed_transitions(constraint, dict(enumerate(tags)))
    except ValueError as error:
        raise UsageError(f"--crf_constraint {constraint}: {error}") from error


def main(argv: list[str] | None = None) -> dict[str, dict[str, float]]:
    with checked_run((ModelArguments, DataTrainingArguments), argv, HEAD_OPTIONS) as run:  # before a model loads
        if run.model_args.use_crf:  # a flag that is False when absent: a head option only when given
            run.overrides["use_crf"] = True
        raw = load_splits(run.data_args)
        saved_config = hf_elmo.ElmoConfig.from_pretrained(run.model_name)
        is_tagger = "ElmoForTokenClassification" in (saved_config.architectures or [])
        tags = tag_names(raw, saved_config if is_tagger else None)
        check_crf(run.overrides, saved_config, tags)
    with output_written_whole(run.training_args, run.output_lock):
        return fine_tune(run.model_args, run.data_args, run.training_args, run.model_name, raw, tags, run.overrides)


def fine_tune(
    model_args: ModelArguments,
    data_args: DataTrainingArguments,
    training_args: TrainingArguments,
    model_name: str,
    raw: DatasetDict,
    tags: list[str],
    overrides: dict,
) -> dict[str, dict[str, float]]:
    """The run once its arguments and data are checked: trains, evaluates and predicts what `training_args` asks,
    writing into `training_args.output_dir`; the metrics by split."""
    tag2id = {tag: i for i, tag in enumerate(tags)}
    model, tokenizer = load_model(
        model_name,
        ElmoForTokenClassification,
        num_labels=len(tags),
        id2label=dict(enumerate(tags)),
        label2id=tag2id,
        freeze_bilm=model_args.freeze_bilm,
        **overrides,
    )

    # Given words stay one position each; a tokenizer that splits words (Korean morphemes) must read the text.
    splits_words = tokenizer.pre_tokenizer == "korean_morphemes"

    def preprocess(batch):
        encoding = tokenizer(
            [" ".join(words) for words in batch["tokens"]] if splits_words else batch["tokens"],
            is_split_into_words=not splits_words,
            truncation=data_args.max_seq_length is not None,
            max_length=data_args.max_seq_length,
        )
        # The word's tag at its first position, -100 at its later ones, <S>, </S> (and, once collated, padding).
        # Without tags (a test file to tag), 0 marks the positions to predict; no metrics are computed then.
        labels = []
        for i in range(len(batch["tokens"])):
            word_ids = encoding.word_ids(i)
            tags = [tag2id[tag] for tag in batch["tags"][i]] if "tags" in batch else [0] * len(batch["tokens"][i])
            row = [-100] * len(word_ids)
            for position in word_start_positions(word_ids):
                row[position] = tags[word_ids[position]]
            labels.append(row)
        encoding["labels"] = labels
        return encoding

    with training_args.main_process_first(desc="tokenizing"):
        data = {
            split: dataset.map(preprocess, batched=True, remove_columns=dataset.column_names, desc=split)
            for split, dataset in raw.items()
        }

    def best_tag_ids(logits, labels):
        # Per batch, on the model's device: the argmax of each word's scores, or the CRF's Viterbi path over the
        # words (the positions whose label is not -100).
        return model.decode(logits, labels != -100)

    def to_tag_sequences(predicted: np.ndarray, label_ids: np.ndarray) -> tuple[list[list[str]], list[list[str]]]:
        gold_tags, predicted_tags = [], []
        for row_labels, row_predicted in zip(label_ids, predicted):
            keep = row_labels != -100
            gold_tags.append([tags[i] for i in row_labels[keep]])
            predicted_tags.append([tags[i] for i in row_predicted[keep]])
        return gold_tags, predicted_tags

    def entity_metrics(prediction: EvalPrediction) -> dict[str, float]:
        gold, predicted = to_tag_sequences(prediction.predictions, prediction.label_ids)
        return {
            "precision": precision_score(gold, predicted, zero_division=0),
            "recall": recall_score(gold, predicted, zero_division=0),
            "f1": f1_score(gold, predicted, zero_division=0),
            "accuracy": accuracy_score(gold, predicted),
        }

    trainer = Trainer(
        model=model,
        args=training_args,
        train_dataset=data.get("train"),
        eval_dataset=data.get("validation"),
        processing_class=tokenizer,
        data_collator=DataCollatorForTokenClassification(tokenizer),
        compute_metrics=entity_metrics,
        preprocess_logits_for_metrics=best_tag_ids,
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
        trainer.compute_metrics = entity_metrics if "tags" in raw["test"].column_names else None
        prediction = trainer.predict(data["test"], metric_key_prefix="test")
        if trainer.compute_metrics is not None:
            trainer.save_metrics("test", prediction.metrics)
            results["test"] = {name.removeprefix("test_"): value for name, value in prediction.metrics.items()}
        if trainer.is_world_process_zero():
            _, predicted = to_tag_sequences(prediction.predictions, prediction.label_ids)
            lines = []
            for words, sentence_tags in zip(raw["test"]["tokens"], predicted):
                lines += [f"{word} {tag}\n" for word, tag in zip(words, sentence_tags)] + ["\n"]
            (Path(training_args.output_dir) / "test_predictions.conll").write_text("".join(lines), encoding="utf-8")

    for split, metrics in results.items():
        print(
            f"{split}: "
            + ", ".join(
                f"{name} = {value:.4f}"
                for name, value in sorted(metrics.items())
                if name in ("precision", "recall", "f1", "accuracy", "loss")
            )
        )
    if training_args.do_train:
        trainer.save_model(training_args.output_dir)  # model, tokenizer (the processing class) and code files
        if trainer.is_world_process_zero():
            card_results = {
                split: {
                    name: value for name, value in metrics.items() if name in ("precision", "recall", "f1", "accuracy")
                }
                for split, metrics in results.items()
            }
            write_fine_tuned_card(
                training_args.output_dir,
                script="run_token_classification.py",
                model_name_or_path=model_args.model_name_or_path,
                pipeline_tag="token-classification",
                tags=["token-classification"],
                license=model_args.license,
                head=f"one tag per word out of {len(tags)} ({', '.join(tags)})"
                + (", a linear-chain CRF over them (Viterbi decoding)" if model.config.use_crf else ""),
                freeze_bilm=model_args.freeze_bilm,
                results=card_results,
                data_files=list(data_files(data_args).values()),
                auto_class="AutoModelForTokenClassification",
                usage='encoding = tokenizer([["Ada", "lives", "in", "Paris"]], is_split_into_words=True,\n'
                '                     padding=True, return_tensors="pt")\n'
                "model.predict_word_labels(encoding)  # [[(tag, probability) for each word]]",
            )
    return results


if __name__ == "__main__":
    sys.exit(run_entry_point(main))
