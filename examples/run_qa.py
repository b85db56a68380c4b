"""Fine-tunes ELMo for extractive question answering on SQuAD-layout JSON files with the stock `Trainer`.

    python examples/run_qa.py --model_name_or_path ko-nsmc --train_file train.json --validation_file test.json \
        --do_train --do_eval --output_dir outputs/my-qa --num_train_epochs 3 --learning_rate 1e-3

The files are SQuAD 1.1's layout (`data` -> `paragraphs` -> `context`, `qas` -> `question`, `answers` with `text` and
`answer_start`, a character offset). The model is an `ElmoModel` folder (a bundled one by name, `ko-nsmc`: a new
`ElmoForQuestionAnswering` head is added; `--from_scratch` gives a biLM of the same shape random weights and trains it
with the head) or a fine-tuned `ElmoForQuestionAnswering` folder. Each question and its context are read as a pair
in windows of `--max_length` positions, `--stride` units apart; a training window without the answer is left out.
The answer of a question is the best span of at most `--max_answer_length` units over its windows, scored with
KorQuAD 1.0's measures (`korquad_scores`: exact match and character F1 of normalised answers, best over the gold
answers, x 100), written to `output_dir/all_results.json`. `--max_train_samples` and `--max_eval_samples` keep a
file's first questions, for a short run; each split's windows are made under a progress bar. The output folder
(model, tokenizer, pipeline, model card) is ready for `push_to_hub` and answers through
`pipeline("question-answering", model=folder, trust_remote_code=True)`. Every `TrainingArguments` option applies.
"""

import collections
import json
import re
import string
import sys
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import torch
from model_card import write_fine_tuned_card
from run_steps import (
    UsageError,
    checked_run,
    load_model,
    output_written_whole,
)
from tqdm.auto import tqdm
from transformers import Trainer, TrainingArguments

from hf_elmo import ElmoForQuestionAnswering, ElmoTokenizer
from hf_elmo.errors import run_entry_point
from hf_elmo.loading import load_tokenizer
from hf_elmo.question_answering_elmo import best_spans

HEAD_OPTIONS = ("task_lstm_dim", "question_attention", "question_match_feature", "mix_dropout", "mix_layer_norm")


@dataclass
class ModelArguments:
    model_name_or_path: str = field(
        metadata={"help": "an ElmoModel folder, a bundled model (ko-nsmc) or a fine-tuned ElmoForQuestionAnswering"}
    )
    freeze_bilm: bool = field(default=True, metadata={"help": "train only the layer mix and the head (the paper)"})
    from_scratch: bool = field(
        default=False, metadata={"help": "a biLM of the model's shape with random weights, trained with the head"}
    )
    task_lstm_dim: int | None = field(default=None, metadata={"help": "units per direction of the BiLSTMs"})
    question_attention: bool | None = field(
        default=None, metadata={"help": "each position attends over the question's words (default True)"}
    )
    question_match_feature: bool | None = field(
        default=None, metadata={"help": "each position reads whether its word is in the question (default True)"}
    )
    mix_dropout: float | None = field(default=None, metadata={"help": "dropout on the ELMo layer mix"})
    mix_layer_norm: bool | None = field(default=None, metadata={"help": "normalise each layer before mixing"})
    license: str = field(default="apache-2.0", metadata={"help": "license written in the model card"})


@dataclass
class DataTrainingArguments:
    train_file: str | None = field(default=None, metadata={"help": "SQuAD-layout JSON training file"})
    validation_file: str | None = field(default=None, metadata={"help": "SQuAD-layout JSON evaluation file"})
    test_file: str | None = field(default=None, metadata={"help": "SQuAD-layout JSON test file (--do_predict)"})
    max_length: int = field(
        default=256, metadata={"help": "positions of a window: the question, the context, 4 marks"}
    )
    stride: int = field(default=64, metadata={"help": "context units two consecutive windows share"})
    max_answer_length: int = field(default=30, metadata={"help": "the most units an answer spans"})
    max_train_samples: int | None = field(default=None, metadata={"help": "keep the first N training questions"})
    max_eval_samples: int | None = field(default=None, metadata={"help": "keep the first N evaluation questions"})
    max_predict_samples: int | None = field(default=None, metadata={"help": "keep the first N test questions"})


Question = collections.namedtuple("Question", "id question context answers")


def read_squad(path: str, limit: int | None = None) -> list[Question]:
    """The questions of a SQuAD-layout file, in order, each answer as `(text, answer_start)`; a file of another
    layout, or without a question, is a `UsageError`."""
    try:
        questions = [
            Question(
                qa["id"], qa["question"], paragraph["context"], [(a["text"], a["answer_start"]) for a in qa["answers"]]
            )
            for article in json.loads(Path(path).read_text(encoding="utf-8"))["data"]
            for paragraph in article["paragraphs"]
            for qa in paragraph["qas"]
        ]
    except (ValueError, KeyError, TypeError) as error:
        raise UsageError(f"{path} is no SQuAD-layout JSON file ({type(error).__name__}: {error})") from error
    if not questions:
        raise UsageError(f"{path} holds no question")
    return questions[:limit]


def answer_positions(offsets, context_positions: list[int], start: int, end: int) -> tuple[int, int] | None:
    """
    The positions of the first and last unit of the answer at characters `[start, end)` of the context within one
    window (`offsets` of its positions, `context_positions` the window's context units), or None where the window
    does not hold the whole answer. An answer may start or end inside a unit (a particle after a noun): the units it
    touches are its span.
    """
    touched = [p for p in context_positions if offsets[p][0] < end and offsets[p][1] > start]
    if not touched:
        return None
    first, last = touched[0], touched[-1]
    if offsets[first][0] > start or offsets[last][1] < end:  # the answer runs past the window
        return None
    return first, last


def check_windows(splits: dict[str, list[Question]], tokenizer: ElmoTokenizer, data_args) -> None:
    """
    Refuses, before the model loads, a `--max_length` or `--stride` that leaves some question's windows no room for
    its context: the tokenizer's own check, met as it cuts the windows, run here on each question beside a one-unit
    context (the questions' units alone: seconds, where the contexts' take minutes). A `UsageError`.
    """
    for questions in splits.values():
        try:
            tokenizer(
                [question.question for question in questions],
                ["."] * len(questions),
                truncation="only_second",
                max_length=data_args.max_length,
                stride=data_args.stride,
                return_overflowing_tokens=True,
            )
        except ValueError as error:
            raise UsageError(str(error)) from error


def windows_of(
    questions: list[Question],
    tokenizer: ElmoTokenizer,
    data_args,
    labelled: bool,
    description: str | None = None,
    chunk_size: int = 256,
) -> tuple[list, list]:
    """
    The model's features of each question's windows, and for each window `(question index, offsets, context
    positions)`. With `labelled`, a window holds `start_positions` and `end_positions` of the first gold answer, and
    windows without it are left out (none would be predicted there). The questions are tokenized `chunk_size` at a
    time under a progress bar named `description` (None: no bar): splitting KorQuAD's contexts into morphemes takes
    minutes.
    """
    features, windows = [], []
    with tqdm(total=len(questions), desc=description, unit="questions", disable=description is None) as bar:
        for first in range(0, len(questions), chunk_size):
            chunk = questions[first : first + chunk_size]
            chunk_features, chunk_windows = chunk_windows_of(chunk, first, tokenizer, data_args, labelled)
            features += chunk_features
            windows += chunk_windows
            bar.update(len(chunk))
    return features, windows


def chunk_windows_of(
    questions: list[Question], first: int, tokenizer: ElmoTokenizer, data_args, labelled: bool
) -> tuple[list, list]:
    """`windows_of` for `questions`, the questions from index `first` on."""
    encoding = tokenizer(
        [question.question for question in questions],
        [question.context for question in questions],
        truncation="only_second",
        max_length=data_args.max_length,
        stride=data_args.stride,
        return_overflowing_tokens=True,
        return_offsets_mapping=True,
    )
    features, windows = [], []
    for row, index in enumerate(encoding["overflow_to_sample_mapping"]):
        offsets = encoding["offset_mapping"][row]
        words = encoding.word_ids(row)
        context = [
            p
            for p, (word, kind) in enumerate(zip(words, encoding["token_type_ids"][row]))
            if word is not None and kind == 1
        ]
        feature = {
            name: encoding[name][row]
            for name in encoding
            if name not in ("offset_mapping", "overflow_to_sample_mapping")
        }
        if labelled:
            text, start = questions[index].answers[0]
            span = answer_positions(offsets, context, start, start + len(text))
            if span is None:
                continue
            feature["start_positions"], feature["end_positions"] = span
        features.append(feature)
        windows.append((first + index, offsets, context))
    return features, windows


def normalise_answer(text: str) -> str:
    """KorQuAD 1.0's normalisation: quote and bracket marks to spaces, lower case, no ASCII punctuation, one space."""
    text = re.sub("['\"《》<>〈〉()‘’]", " ", text).lower()
    text = "".join(character for character in text if character not in string.punctuation)
    return " ".join(text.split())


def korquad_scores(predictions: dict[str, str], questions: list[Question]) -> dict[str, float]:
    """Exact match and character F1 (x 100) of `predictions` by question id, each the best over the gold answers."""
    exact, f1 = [], []
    for question in questions:
        predicted = normalise_answer(predictions.get(question.id, ""))
        exact.append(max(float(predicted == normalise_answer(gold)) for gold, _ in question.answers))
        f1.append(max(character_f1(predicted, normalise_answer(gold)) for gold, _ in question.answers))
    return {"exact_match": 100 * float(np.mean(exact)), "f1": 100 * float(np.mean(f1))}


def character_f1(predicted: str, gold: str) -> float:
    """F1 of the multisets of the two normalised answers' characters, spaces left out."""
    common = collections.Counter(predicted.replace(" ", "")) & collections.Counter(gold.replace(" ", ""))
    overlap = sum(common.values())
    if overlap == 0:
        return 0.0
    precision, recall = overlap / len(predicted.replace(" ", "")), overlap / len(gold.replace(" ", ""))
    return 2 * precision * recall / (precision + recall)


def predicted_answers(start_logits, end_logits, windows, questions, max_answer_length: int) -> dict[str, str]:
    """The best span over each question's windows, as text of its context (`best_spans` of each window)."""
    best = {}
    for window_start, window_end, (index, offsets, _) in zip(start_logits, end_logits, windows):
        positions = len(offsets)  # the Trainer pads a batch's logits past the window with -100
        spans = best_spans(
            torch.as_tensor(window_start[:positions]), torch.as_tensor(window_end[:positions]), max_answer_length
        )
        if spans and (index not in best or spans[0][0] > best[index][0]):
            score, start, end = spans[0]
            best[index] = (score, offsets[start][0], max(offsets[start][1], offsets[end][1]))
    return {questions[index].id: questions[index].context[first:last] for index, (_, first, last) in best.items()}


def main(argv: list[str] | None = None) -> dict[str, dict[str, float]]:
    with checked_run((ModelArguments, DataTrainingArguments), argv, HEAD_OPTIONS) as run:  # before a model loads
        data_args = run.data_args
        splits = {
            split: read_squad(name, limit)
            for split, name, limit in (
                ("train", data_args.train_file, data_args.max_train_samples),
                ("validation", data_args.validation_file, data_args.max_eval_samples),
                ("test", data_args.test_file, data_args.max_predict_samples),
            )
            if name is not None
        }
        check_windows(splits, load_tokenizer(run.model_name), data_args)
    with output_written_whole(run.training_args, run.output_lock):
        return fine_tune(run.model_args, data_args, run.training_args, run.model_name, splits, run.overrides)


def fine_tune(
    model_args: ModelArguments,
    data_args: DataTrainingArguments,
    training_args: TrainingArguments,
    model_name: str,
    splits: dict[str, list[Question]],
    overrides: dict,
) -> dict[str, dict[str, float]]:
    """The run once its arguments and data are checked: trains and scores what `training_args` asks, writing into
    `training_args.output_dir`; KorQuAD's measures by split."""
    freeze_bilm = model_args.freeze_bilm and not model_args.from_scratch
    model, tokenizer = load_model(model_name, ElmoForQuestionAnswering, freeze_bilm=freeze_bilm, **overrides)
    if model_args.from_scratch:  # the same shape and head, every weight drawn anew
        model = ElmoForQuestionAnswering(model.config)

    # One bar, on the main process: each process of a distributed run tokenizes the same questions.
    progress = training_args.process_index == 0 and not training_args.disable_tqdm
    features = {
        split: windows_of(
            questions,
            tokenizer,
            data_args,
            labelled=split == "train",
            description=f"{split} windows" if progress else None,
        )
        for split, questions in splits.items()
    }
    trainer = Trainer(
        model=model,
        args=training_args,
        train_dataset=features["train"][0] if "train" in features else None,
        processing_class=tokenizer,
    )
    results = {}
    if training_args.do_train:
        train_result = trainer.train()
        trainer.save_metrics("train", train_result.metrics)
    for split, prefix, chosen in (
        ("validation", "eval", training_args.do_eval),
        ("test", "test", training_args.do_predict),
    ):
        if not chosen:
            continue
        split_features, windows = features[split]
        start_logits, end_logits = trainer.predict(split_features, metric_key_prefix=prefix).predictions
        answers = predicted_answers(start_logits, end_logits, windows, splits[split], data_args.max_answer_length)
        results[split] = korquad_scores(answers, splits[split])
        trainer.save_metrics(prefix, {f"{prefix}_{name}": value for name, value in results[split].items()})
        if trainer.is_world_process_zero():
            path = Path(training_args.output_dir) / f"{prefix}_predictions.json"
            path.write_text(json.dumps(answers, ensure_ascii=False, indent=1), encoding="utf-8")
    for split, metrics in results.items():
        print(f"{split}: " + ", ".join(f"{name} = {value:.2f}" for name, value in metrics.items()))
    if training_args.do_train:
        trainer.save_model(training_args.output_dir)  # model, pipeline, tokenizer and code files
        if trainer.is_world_process_zero():
            write_fine_tuned_card(
                training_args.output_dir,
                script="run_qa.py",
                model_name_or_path=model_args.model_name_or_path,
                pipeline_tag="question-answering",
                tags=["question-answering"],
                license=model_args.license,
                head="extractive question answering (start and end of the answer in the context)"
                + (", on a biLM trained from scratch with it" if model_args.from_scratch else ""),
                freeze_bilm=freeze_bilm,
                results=results,
                data_files=[
                    name for name in (data_args.train_file, data_args.validation_file, data_args.test_file) if name
                ],
                auto_class="AutoModelForQuestionAnswering",
                usage='qa = pipeline("question-answering", model=folder, trust_remote_code=True)\n'
                'qa(question="...", context="...")  # {"answer", "score", "start", "end"}',
            )
    return results


if __name__ == "__main__":
    sys.exit(run_entry_point(main))
