"""Pre-training an ELMo biLM from scratch on plain text with the stock `Trainer` (stage 1 of the paper).

Text files hold one sentence per line (plain or `.gz`), words separated as the tokenizer's pre-tokenizer splits them.
The word vocabulary is built with `tokenizers` (`WordLevel` + `WordLevelTrainer`) and saved with the tokenizer, so
the output folder loads as `ElmoTokenizer`, `ElmoModel` (the biLM alone) or `ElmoForPreTraining`.

    hf-elmo pretrain --train-file train.txt --validation-file valid.txt --output-dir out --preset small
    torchrun --nproc_per_node 2 -m hf_elmo.cli pretrain ...   # several processes, unchanged

The command line is parsed by `HfArgumentParser` over the dataclasses below and `TrainingArguments`, so every
`TrainingArguments` option works (`--warmup_steps`, `--gradient_accumulation_steps`, `--lr_scheduler_type`...), each
also spelled with dashes; `--help` lists them with their defaults.

The output folder is complete or absent ([`RunFolders`]): the run works in `OUTPUT.parts/` beside it (tokenizer,
word counts, checkpoints), which `--resume` continues, and the finished model becomes `--output-dir` in one rename.
"""

import contextlib
import ctypes
import hashlib
import json
import math
import os
import platform
import shlex
import shutil
import sys
import tempfile
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import NamedTuple

import numpy as np
import torch
from tokenizers import Tokenizer, models, pre_tokenizers, trainers
from transformers import HfArgumentParser, Trainer, TrainerCallback, TrainerControl, TrainerState, TrainingArguments

from . import model_card
from .alphabet_elmo import CHAR_VOCAB_FILE, learn_character_vocabulary
from .command_line import empty_argument
from .configuration_elmo import ORIGINAL_FILTERS, ElmoConfig
from .errors import CommandError, ElmoConversionError, FileContentError, JsonFields, first_line, read_json_file
from .folders import (
    apply_umask,
    atomic_directory,
    lock_output,
    refuse_link,
    replace_folder,
    replacing_problem,
    write_failure_reason,
)
from .loading import first_damaged_weights, load_model_and_tokenizer, weights_problem
from .modeling_elmo import ElmoForPreTraining
from .sentence_weighting import WordCounts
from .text_files import read_sentences, unreadable_reason
from .tokenization_elmo import BOS_TOKEN, EOS_TOKEN, PRE_TOKENIZERS, UNK_TOKEN, ElmoTokenizer, pre_tokenizer_named

# `build_word_vocab` puts <S>, </S> and <UNK> first.
UNK_ID = 2
# Sampled-softmax candidates per batch in bilm-tf.
NEGATIVE_SAMPLES = 8192
# The options of a new model's vocabulary and shapes (a model trained further keeps its own).
VOCABULARY_AND_SHAPE_OPTIONS = {"pre_tokenizer", "min_count", "max_vocab_size", "char_vocab", "preset"}
VOCABULARY_AND_SHAPE_OPTIONS |= {"projection_dim", "cell_dim", "n_layers", "n_highway", "max_characters_per_token"}

# Model shapes by preset; `original` is the released 2x4096_512_2048cnn_2xhighway model (the ElmoConfig defaults).
PRESETS = {
    "tiny": dict(
        char_embedding_dim=8,
        filters=[[1, 16], [2, 16], [3, 32], [4, 64]],
        n_highway=1,
        projection_dim=32,
        cell_dim=128,
        n_layers=2,
    ),
    "small": dict(
        char_embedding_dim=16, filters=ORIGINAL_FILTERS, n_highway=1, projection_dim=128, cell_dim=1024, n_layers=2
    ),
    "original": dict(),
}


# -- text and vocabulary ----------------------------------------------------------------------------------------------


def build_word_vocab(
    sentences: Iterable[str | Sequence[str]],
    min_count: int = 1,
    max_size: int | None = None,
    pre_tokenizer: str = "whitespace_split",
) -> Tokenizer:
    """
    A `tokenizers` `WordLevel` vocabulary of the words in `sentences` (each a line of text, or its units as
    [`SplitText`] holds them): `<S>`, `</S>`, `<UNK>` (ids 0, 1, 2), then the words seen at least `min_count` times by
    decreasing count, `max_size` entries at most (specials included). Frequency order is what the sampled softmax's
    log-uniform sampler assumes. A `tokenizers` pre-tokenizer is saved with the vocabulary (it splits text as the units
    were split); an analyser in Python (`korean_morphemes`) leaves the vocabulary without one. A text where no word is
    seen `min_count` times is refused (`ValueError`): its vocabulary would be the special words alone, every word
    `<UNK>`, and a biLM trained on it would learn nothing.
    """
    if min_count < 1:
        raise ValueError(f"min_count must be at least 1, got {min_count}")
    if max_size is not None and max_size < 4:
        raise ValueError(f"max_size must leave room for the 3 special words and one more, got {max_size}")
    splitter = pre_tokenizer_named(pre_tokenizer)
    tokenizer = Tokenizer(models.WordLevel(unk_token=UNK_TOKEN))
    if isinstance(splitter, pre_tokenizers.PreTokenizer):
        tokenizer.pre_tokenizer = splitter  # splitting a unit again leaves it whole
    split = ([unit for unit, _ in splitter.pre_tokenize_str(s)] if isinstance(s, str) else s for s in sentences)
    units = (unit for sentence in split for unit in sentence)
    trainer = trainers.WordLevelTrainer(
        vocab_size=max_size or 2**31 - 1,
        min_frequency=min_count,
        special_tokens=[BOS_TOKEN, EOS_TOKEN, UNK_TOKEN],
        show_progress=False,
    )
    tokenizer.train_from_iterator(units, trainer=trainer)
    if tokenizer.get_vocab_size() == len(trainer.special_tokens):
        raise ValueError(
            f"no word of the text is seen {min_count} times or more (min_count, --min-count): every word would be "
            "<UNK>; lower it or give more text"
        )
    return tokenizer


# -- datasets and batches ---------------------------------------------------------------------------------------------


class SplitText:
    """
    The sentences of text files (one a line, plain or `.gz`, read as `read_sentences` reads them), each as the units
    the pre-tokenizer named splits it into, one position each. Held in memory (the default), the text is split once
    and every reader (the vocabulary, the word counts, the `<UNK>` rate, each epoch's batches) iterates over the same
    lists: an analyser in Python (`korean_morphemes`) costs more than the rest of reading a corpus, and would
    otherwise run again on every pass. A distinct unit is held once (`sys.intern`). With `in_memory=False` (streaming),
    each pass reads and splits the files again.
    """

    def __init__(self, paths: Iterable[str | Path], pre_tokenizer: str, in_memory: bool = True):
        self._splitter = pre_tokenizer_named(pre_tokenizer)
        self.paths = [str(path) for path in paths]
        self.sentences = list(self._split()) if in_memory else None
        if self.sentences == []:
            raise ValueError("the text files hold no sentence")

    def _split(self) -> Iterator[list[str]]:
        for line in read_sentences(self.paths):
            yield [sys.intern(unit) for unit, _ in self._splitter.pre_tokenize_str(line)]

    def __iter__(self) -> Iterator[list[str]]:
        return iter(self.sentences) if self.sentences is not None else self._split()


class LineDataset(torch.utils.data.Dataset):
    """The sentences of a [`SplitText`] held in memory, as `{"units": [unit, ...]}`."""

    def __init__(self, text: SplitText):
        if text.sentences is None:
            raise ValueError("LineDataset needs the sentences in memory: SplitText(..., in_memory=True)")
        self.sentences = text.sentences

    def __len__(self) -> int:
        return len(self.sentences)

    def __getitem__(self, index: int) -> dict[str, list[str]]:
        return {"units": self.sentences[index]}


class StreamingLineDataset(torch.utils.data.IterableDataset):
    """The sentences of a [`SplitText`] read lazily, once per pass, for corpora larger than memory."""

    def __init__(self, text: SplitText):
        self.text = text

    def __iter__(self) -> Iterator[dict[str, list[str]]]:
        return ({"units": units} for units in self.text)


class ElmoPreTrainingCollator:
    """
    Encodes a list of `{"units": [unit, ...]}` (a sentence split as its tokenizer splits text: [`SplitText`]) into
    char ids and word-id `labels`, cutting rows at `max_length`.
    """

    def __init__(self, tokenizer: ElmoTokenizer, max_length: int):
        if tokenizer.word_vocab_size is None:
            raise ValueError("the tokenizer needs a word vocabulary (vocab_file=...) to give pre-training labels")
        self.tokenizer = tokenizer
        self.max_length = max_length

    def __call__(self, features: list[dict[str, str]]) -> dict[str, torch.Tensor]:
        encoded = self.tokenizer(
            [feature["units"] for feature in features],
            is_split_into_words=True,
            padding=True,
            truncation=True,
            max_length=self.max_length,
            return_word_labels=True,
            return_tensors="pt",
        )
        return dict(encoded)


# -- metrics ----------------------------------------------------------------------------------------------------------


def direction_nll_sums(outputs, labels: torch.Tensor) -> torch.Tensor:
    """
    Per evaluation batch, `(batch, 5)`: row 0 holds `[forward NLL sum, backward NLL sum, targets, words, <UNK>
    words]` (the NLL sums from the batch's mean losses), the other rows zeros, so that the perplexity over the whole
    evaluation set weighs every word alike and survives the Trainer's trimming of a last, partial batch to its real
    rows. (Each direction has one target fewer per row than valid positions; words leave out `<S>` and `</S>`.)
    """
    forward_loss, backward_loss = outputs[0], outputs[1]
    valid = (labels != -100).sum(dim=1)
    targets = (valid - 1).clamp(min=0).sum().to(forward_loss.dtype)
    words = (valid - 2).clamp(min=0).sum().to(forward_loss.dtype)
    unknown = (labels == UNK_ID).sum().to(forward_loss.dtype)
    sums = forward_loss.new_zeros(labels.shape[0], 5)
    sums[0] = torch.stack([forward_loss * targets, backward_loss * targets, targets, words, unknown])
    return sums


def perplexity_metrics(eval_prediction) -> dict[str, float]:
    """Exact perplexities of both directions and of their mean NLL over the evaluation set, and its `<UNK>` rate."""
    sums = np.asarray(eval_prediction.predictions, dtype=np.float64).reshape(-1, 5).sum(axis=0)
    forward_nll, backward_nll = sums[0] / sums[2], sums[1] / sums[2]
    return {
        "forward_perplexity": math.exp(forward_nll),
        "backward_perplexity": math.exp(backward_nll),
        "perplexity": math.exp((forward_nll + backward_nll) / 2),
        "unk_rate": sums[4] / max(sums[3], 1.0),
    }


def count_unknown_words(tokenizer: ElmoTokenizer, sentences: Iterable[Sequence[str]]) -> tuple[int, int]:
    """`(words, <UNK> words)` of sentences split into units (a [`SplitText`]), looked up in the tokenizer's words."""
    unknown_id = tokenizer.word_to_id(UNK_TOKEN)
    words = unknown = 0
    for units in sentences:
        words += len(units)
        unknown += sum(tokenizer.word_to_id(unit) == unknown_id for unit in units)
    return words, unknown


def unk_rate(tokenizer: ElmoTokenizer, sentences: Iterable[Sequence[str]]) -> float:
    """The share of the words of sentences split into units that the tokenizer's word vocabulary maps to `<UNK>`."""
    words, unknown = count_unknown_words(tokenizer, sentences)
    return unknown / max(words, 1)


# -- command line -----------------------------------------------------------------------------------------------------


@dataclass
class DataArguments:
    """The text and its word vocabulary."""

    train_file: list[str] = field(metadata={"help": "training text files (plain or .gz)"})
    validation_file: list[str] = field(metadata={"help": "validation text files"})
    streaming: bool = field(
        default=False,
        metadata={"help": "read the training files lazily (needs --max-steps; the vocabulary pass still reads all)"},
    )
    max_length: int = field(default=64, metadata={"help": "positions per sentence, <S> and </S> included"})
    pre_tokenizer: str = field(
        default="whitespace_split",
        metadata={"choices": sorted(PRE_TOKENIZERS), "help": "how lines are split into words"},
    )
    min_count: int = field(default=3, metadata={"help": "words seen fewer times become <UNK>"})
    max_vocab_size: int | None = field(default=None, metadata={"help": "most words kept, specials included"})
    char_vocab: str = field(
        default="bytes",
        metadata={
            "choices": ["bytes", "learned"],
            "help": "rows of UTF-8 bytes (bilm-tf), or of the training files' characters, so that a row holds "
            "max-characters-per-token - 2 characters (a Hangul syllable is 3 bytes)",
        },
    )


@dataclass
class ModelArguments:
    """The model to train: a new one, of a preset's shapes (each overridable), or one to train further."""

    model_name_or_path: str | None = field(
        default=None,
        metadata={
            "help": "train further the ElmoForPreTraining folder (or Hub name) given, with its tokenizer, vocabulary "
            "and shapes, instead of a new model"
        },
    )
    preset: str = field(default="small", metadata={"choices": sorted(PRESETS), "help": "model shapes"})
    projection_dim: int | None = field(default=None, metadata={"help": "overrides the preset"})
    cell_dim: int | None = field(default=None, metadata={"help": "overrides the preset"})
    n_layers: int | None = field(default=None, metadata={"help": "overrides the preset"})
    n_highway: int | None = field(default=None, metadata={"help": "overrides the preset"})
    max_characters_per_token: int = field(default=50, metadata={"help": "characters per word, boundaries included"})
    n_negative_samples: int | None = field(
        default=None,
        metadata={
            "help": "sampled-softmax candidates per batch, at most the vocabulary size (default: those of "
            f"--model-name-or-path, else bilm-tf's {NEGATIVE_SAMPLES:,})"
        },
    )
    lstm_dropout: float | None = field(
        default=None,
        metadata={
            "help": "dropout on each LSTM layer's input and on the top layer before the softmax, as bilm-tf trains "
            "(its released models used 0.1); default: that of --model-name-or-path, else none"
        },
    )


@dataclass
class PretrainingArguments(TrainingArguments):
    """`TrainingArguments` with this command's defaults, the short flags it always had, and what becomes of the
    checkpoints."""

    output_dir: str = field(
        metadata={"help": "the model folder, written when training ends; until then the run works in OUTPUT_DIR.parts"}
    )
    overwrite_output_dir: bool = field(
        default=False,
        metadata={
            "help": "replace a non-empty --output-dir when training ends; without --resume, also start over from a "
            "stopped run in OUTPUT_DIR.parts"
        },
    )
    per_device_train_batch_size: int = field(
        default=64, metadata={"aliases": ["--batch-size"], "help": "sentences per process and step"}
    )
    per_device_eval_batch_size: int = field(default=64, metadata={"help": "sentences per process and step"})
    learning_rate: float = field(default=1e-3, metadata={"help": "Adam's initial learning rate"})
    num_train_epochs: float = field(
        default=1.0, metadata={"aliases": ["--epochs"], "help": "passes over the training files"}
    )
    max_grad_norm: float = field(default=10.0, metadata={"help": "bilm-tf clips the global norm at 10"})
    eval_strategy: str = field(
        default="steps", metadata={"choices": ["no", "steps", "epoch"], "help": "when to evaluate"}
    )
    eval_steps: float | None = field(default=500, metadata={"help": "steps between evaluations"})
    save_steps: float = field(default=500, metadata={"help": "steps between checkpoints"})
    save_total_limit: int | None = field(
        default=1, metadata={"help": "checkpoints kept while training (the last ones; --resume needs one)"}
    )
    logging_steps: float = field(default=50, metadata={"help": "steps between logged losses"})
    dataloader_num_workers: int = field(
        default=1,
        metadata={
            "aliases": ["--dataloader-workers"],
            "help": "processes tokenising batches ahead of the training step (0: in the training process)",
        },
    )
    remove_unused_columns: bool = field(default=False, metadata={"help": "keep False: the collator reads the text"})
    resume: bool = field(
        default=False,
        metadata={
            "help": "continue the stopped run in OUTPUT_DIR.parts from its last complete checkpoint (or a finished "
            "one kept with --keep-checkpoints, when asked for more steps)"
        },
    )
    keep_checkpoints: bool = field(
        default=False,
        metadata={
            "help": "keep the checkpoints in --output-dir when training ends (by default only the model is kept)"
        },
    )

    def __post_init__(self):
        super().__post_init__()
        # Pinned memory only speeds up copies to a GPU; without one, DataLoader warns that it is unused.
        self.dataloader_pin_memory = self.dataloader_pin_memory and torch.cuda.is_available() and not self.use_cpu


class PretrainParser(HfArgumentParser):
    """`HfArgumentParser` whose every error is one line (argparse would print the usage first: every
    `TrainingArguments` option, over a hundred lines), an unknown option named with the nearest one it takes."""

    def error(self, message: str):
        raise ValueError(message)

    def parse(self, argv: list[str]) -> tuple:
        """
        The dataclasses of `argv`; an option it does not take is a one-line `ValueError` suggesting the nearest,
        named before a required option is found missing (`--max_step` alone: the misspelt flag, not the missing
        files, is what the user fixes first); so is an empty argument (`command_line.empty_argument`).
        """
        if error := empty_argument(argv):
            self.error(error)
        options = argv[: argv.index("--")] if "--" in argv else argv  # after "--", every word is a value
        unknown = [word for word in options if self.is_unknown_option(word)]
        if unknown:
            self.refuse_unknown(unknown)
        *parsed, remaining = self.parse_args_into_dataclasses(
            argv, look_for_args_file=False, return_remaining_strings=True
        )
        if remaining:
            self.refuse_unknown(remaining)
        return tuple(parsed)

    def is_unknown_option(self, word: str) -> bool:
        """`word` is what argparse would read as an option (`--name`, `--name=value`; not `-`, a word with a space or
        a negative number by argparse's own `_negative_number_matcher`) and this parser does not take it."""
        if not word.startswith("-") or word == "-" or " " in word or self._negative_number_matcher.match(word):
            return False
        return word.split("=", 1)[0] not in self._option_string_actions

    def refuse_unknown(self, unknown: list[str]):
        """The one-line `ValueError` naming the words of `unknown` and the option nearest its first."""
        import difflib

        flag = next((word.split("=", 1)[0] for word in unknown if word.startswith("-")), unknown[0])
        nearest = difflib.get_close_matches(flag, list(self._option_string_actions), n=1)
        hint = f"; did you mean {nearest[0]}?" if nearest else "; hf-elmo pretrain --help lists every option"
        raise ValueError(f"unrecognized arguments: {' '.join(unknown)}{hint}")


def build_parser() -> HfArgumentParser:
    return PretrainParser(
        (DataArguments, ModelArguments, PretrainingArguments),
        prog="hf-elmo pretrain",
        description="Pre-train an ELMo biLM from scratch on one-sentence-per-line text.",
        allow_abbrev=False,
    )


def model_config(model_args: ModelArguments, tokenizer: ElmoTokenizer) -> ElmoConfig:
    """The `ElmoConfig` of a preset with the command line's overrides, for the tokenizer's words and characters."""
    word_vocab_size = tokenizer.word_vocab_size
    options = dict(PRESETS[model_args.preset])
    for name in ("projection_dim", "cell_dim", "n_layers", "n_highway"):
        if getattr(model_args, name) is not None:
            options[name] = getattr(model_args, name)
    return ElmoConfig(
        max_characters_per_token=model_args.max_characters_per_token,
        word_vocab_size=word_vocab_size,
        n_negative_samples=min(model_args.n_negative_samples or NEGATIVE_SAMPLES, word_vocab_size),
        lstm_dropout=model_args.lstm_dropout or 0.0,
        **tokenizer.alphabet.config_fields(),
        **options,
    )


def check_nothing_overrides_the_model(data_args: DataArguments, model_args: ModelArguments) -> None:
    """With `--model-name-or-path` the shapes and vocabulary are the model's: an option that sets them is an error."""
    for arguments in (data_args, model_args):
        for option in fields(arguments):
            if option.name in VOCABULARY_AND_SHAPE_OPTIONS and getattr(arguments, option.name) != option.default:
                flag = "--" + option.name.replace("_", "-")
                raise ValueError(f"{flag} shapes a new model; with --model-name-or-path the model's own are kept")


def save_tokenizer(
    data_args: DataArguments, model_args: ModelArguments, train_text: Iterable[Sequence[str]], output_dir: Path
) -> None:
    """Builds the word vocabulary of the training text (split: [`SplitText`]) and saves the tokenizer holding it in
    `output_dir`."""
    word_vocab = build_word_vocab(train_text, data_args.min_count, data_args.max_vocab_size, data_args.pre_tokenizer)
    with tempfile.TemporaryDirectory() as folder:
        vocab_file = str(Path(folder) / "word_vocab.json")
        word_vocab.save(vocab_file)
        char_vocab_file = None
        if data_args.char_vocab == "learned":
            char_vocab_file = str(Path(folder) / CHAR_VOCAB_FILE)
            learn_character_vocabulary(train_text).save(char_vocab_file)
        tokenizer = ElmoTokenizer(
            max_characters_per_token=model_args.max_characters_per_token,
            pre_tokenizer=data_args.pre_tokenizer,
            vocab_file=vocab_file,
            char_vocab_file=char_vocab_file,
        )
    tokenizer.save_pretrained(output_dir)


def check_text_files(data_args: DataArguments) -> None:
    """A one-line `ValueError` for a training or validation file that cannot be read (`unreadable_reason`: a named pipe
    too, which opening would wait on), before anything loads."""
    for flag, paths in (("--train-file", data_args.train_file), ("--validation-file", data_args.validation_file)):
        for path in paths:
            if reason := unreadable_reason(path):
                raise ValueError(f"cannot read {flag} {path}: {reason}")


# -- the output folder ------------------------------------------------------------------------------------------------

# The Trainer's checkpoint folders are `checkpoint-STEP`; it writes `trainer_state.json` into one last.
CHECKPOINT_PREFIX = "checkpoint-"
TRAINER_STATE = "trainer_state.json"
# What a run records of its text files (`text_identity`), beside its checkpoints, for `--resume` to check.
RUN_TEXT_FILE = "hf_elmo_pretrain_text.json"
# The flags of the text files, by their `DataArguments` field.
TEXT_FLAGS = {"train_file": "--train-file", "validation_file": "--validation-file"}


@dataclass(frozen=True)
class RunFolders:
    """
    Where a run writes. The model folder `output` (`--output-dir`) appears when the run finishes, in one rename, so
    that it is complete or absent; until then the run's work is in `parts`, `OUTPUT.parts/` beside it (as `hf-elmo
    embed` writes): the tokenizer and word counts, made whole before training starts, then the Trainer's checkpoints,
    which `--resume` continues from.
    """

    output: Path
    parts: Path

    @classmethod
    def of(cls, output_dir: str | os.PathLike) -> "RunFolders":
        output = Path(os.path.abspath(output_dir))
        return cls(output, output.with_name(output.name + ".parts"))


def read_trainer_state(path: Path) -> dict | None:
    """
    The Trainer state a checkpoint's `trainer_state.json` (`path`) holds, each field the Trainer or this module reads
    checked for its type and bounds: None where the file is missing or ends before its JSON does (a checkpoint stopped
    while being saved); a `FileContentError` naming the file and the field where it cannot be read, is no JSON object
    or a field is of another type, out of bounds or unknown to `TrainerState` (whose loading would raise on it).
    """
    checkpoint = path.parent.name
    fix = (
        f"remove {checkpoint} to resume from the checkpoint before it (or from step 0), or start over with "
        "--overwrite_output_dir instead of --resume"
    )
    if not path.is_file():
        return None
    try:
        data = read_json_file(path, fix)
    except FileContentError as error:
        if error.cut_short:
            return None
        raise
    state = JsonFields(data, path, fix)
    if unknown := sorted(set(data) - {field.name for field in fields(TrainerState)}):
        raise state.error(f"{state.name(unknown[0])} is no field of a Trainer state")
    for name in ("global_step", "max_steps"):
        state.take(name, int, minimum=0)
    state.take("num_train_epochs", float, minimum=0)
    for name in ("epoch", "total_flos"):
        state.take(name, float, minimum=0, required=False)
    for name in ("logging_steps", "eval_steps", "save_steps"):
        state.take(name, (float, type(None)), minimum=0, required=False)
    state.take("num_input_tokens_seen", int, minimum=0, required=False)
    for name in ("train_batch_size", "best_global_step"):
        state.take(name, (int, type(None)), minimum=0, required=False)
    state.take("best_metric", (float, type(None)), required=False)
    for name in ("best_model_checkpoint", "trial_name"):
        state.take(name, (str, type(None)), required=False)
    for name in ("is_local_process_zero", "is_world_process_zero", "is_hyper_param_search"):
        state.take(name, bool, required=False)
    state.take("trial_params", (dict, type(None)), required=False)
    for index, entry in enumerate(state.take("log_history", list, required=False, default=[])):
        JsonFields(entry, path, fix, f"log_history[{index}]").take("step", int, minimum=0, required=False)
    callbacks = JsonFields(
        state.take("stateful_callbacks", (dict, type(None)), required=False) or {}, path, fix, "stateful_callbacks"
    )
    control_fields = {field.name for field in fields(TrainerControl)}
    for name, saved in callbacks.data.items():  # each callback's state: `args` of its constructor, `attributes` set
        for index, entry in enumerate(saved if isinstance(saved, list) else [saved]):
            where = callbacks.name(name) + (f"[{index}]" if isinstance(saved, list) else "")
            callback = JsonFields(entry, path, fix, where)
            arguments = callback.take("args", dict, required=False, default={})
            callback.take("attributes", dict, required=False)
            if name == TrainerControl.__name__:
                flags = JsonFields(arguments, path, fix, f"{callback.where}.args")
                if unknown := sorted(set(arguments) - control_fields):
                    raise flags.error(f"{flags.name(unknown[0])} is no field of TrainerControl")
                for flag in arguments:
                    flags.take(flag, bool)
    return data


class SavedCheckpoints(NamedTuple):
    """The checkpoints of a folder: the last complete one and its Trainer state (None where there is none), and the
    incomplete ones, stopped while being saved (a kill, a full disk) before their `trainer_state.json` was written."""

    last: Path | None
    state: dict | None
    incomplete: list[Path]


def saved_checkpoints(folder: Path) -> SavedCheckpoints:
    """The `checkpoint-STEP` folders of `folder`, complete or not (a `trainer_state.json` missing or cut short); a
    one-line `CommandError` where a complete one's Trainer state is damaged (`read_trainer_state`)."""
    steps = {
        int(path.name.removeprefix(CHECKPOINT_PREFIX)): path
        for path in folder.glob(f"{CHECKPOINT_PREFIX}*")
        if path.is_dir() and path.name.removeprefix(CHECKPOINT_PREFIX).isdigit()
    }
    last, last_state, incomplete = None, None, []
    for step in sorted(steps):
        try:
            state = read_trainer_state(steps[step] / TRAINER_STATE)
        except FileContentError as error:
            raise CommandError(str(error)) from error
        if state is None:
            incomplete.append(steps[step])
        else:
            last, last_state = steps[step], state
    return SavedCheckpoints(last, last_state, incomplete)


def asks_for_more_steps(state: dict, training_args: TrainingArguments) -> bool:
    """Whether a run of `training_args` resumed from a checkpoint of Trainer `state` trains at all: a finished run's
    last checkpoint trains on only when asked for more steps (or, counted in epochs, more epochs) than it ran."""
    if training_args.max_steps > 0:
        return training_args.max_steps > state["global_step"]
    return state["global_step"] < state["max_steps"] or training_args.num_train_epochs > state["num_train_epochs"]


class StepsOfTheCommand(TrainerCallback):
    """Logs, evaluates and saves every as many steps as the command asks, a resumed run too: the Trainer would keep
    the steps its checkpoint's state recorded, with no more than a warning, so that `--resume --save-steps 500` on
    a run saved every 250 steps would go on saving every 250."""

    def on_train_begin(self, args, state, control, **kwargs):
        state.compute_steps(args, state.max_steps)


def run_to_continue(folders: RunFolders, training_args: PretrainingArguments, inputs: list[str]) -> Path | None:
    """
    Checks, writing nothing, what `--output-dir` and its `OUTPUT.parts/` hold against `--resume` and
    `--overwrite_output_dir`, and returns the folder of the run to continue (`parts`; or `output` where a run finished
    with `--keep-checkpoints` is asked for more steps), or None for a new run. A folder a run may not replace, or a
    `--resume` with nothing to continue, is a one-line `ValueError`.
    """
    output, parts = folders.output, folders.parts
    for folder in (output, parts):
        if folder.exists() and not folder.is_dir():
            raise ValueError(f"{folder} exists and is not a folder")
    if training_args.resume_from_checkpoint is not None:
        named = Path(training_args.resume_from_checkpoint)
        if not (named / TRAINER_STATE).is_file():
            raise ValueError(f"--resume_from_checkpoint {named} is no complete checkpoint: it has no {TRAINER_STATE}")
    output_holds = output.is_dir() and any(output.iterdir())
    if not training_args.resume:
        source = None
        if parts.exists() and not training_args.overwrite_output_dir:
            raise ValueError(
                f"{parts} holds a stopped run of {output}: pass --resume to continue it, or --overwrite_output_dir "
                "to start over"
            )
    elif parts.exists():
        source = parts
    elif not output_holds:
        source = None  # nothing to continue: a new run, as `hf-elmo embed --resume` starts one
    else:
        checkpoints = saved_checkpoints(output)
        if (output / "config.json").is_file() and (
            checkpoints.last is None or not asks_for_more_steps(checkpoints.state, training_args)
        ):
            raise ValueError(
                f"{output} holds a finished model: nothing to resume (--model-name-or-path {output} trains it "
                "further, --overwrite_output_dir without --resume trains a new one in its place)"
            )
        if checkpoints.last is None:
            raise ValueError(
                f"{output} exists and holds no run to resume: pass --overwrite_output_dir without --resume to "
                "replace it"
            )
        source = output  # a stopped run saved there before OUTPUT.parts/, or a finished one with its checkpoints
    if source is not None and not (source / "word_vocab.json").is_file():
        raise ValueError(
            f"{source} holds no tokenizer of a run (word_vocab.json): pass --overwrite_output_dir without --resume "
            "to start over"
        )
    if output_holds:  # replaced when the run finishes
        if source != output and not training_args.overwrite_output_dir:
            raise ValueError(f"{output} exists and is not empty: pass --overwrite_output_dir to replace it")
        if problem := replacing_problem(output, inputs, "the finished run"):
            raise ValueError(problem)
    return source


def start_parts(folders: RunFolders, source: Path | None, write_tokenizer: Callable[[Path], None]) -> None:
    """
    Makes `OUTPUT.parts/` for the run, whole or not at all: a new run's (a stopped one there, which
    `run_to_continue` let it replace, is removed) with the tokenizer `write_tokenizer` writes, or a copy of the run
    to continue where it lies in `--output-dir`, which stays as it is until the run finishes. Leaves a run to continue
    in `OUTPUT.parts/` as it is.
    """
    if source == folders.parts:
        return
    if folders.parts.exists():
        shutil.rmtree(folders.parts)
    with atomic_directory(folders.parts) as staging:
        if source is None:
            write_tokenizer(staging)
        else:
            shutil.copytree(source, staging, dirs_exist_ok=True)


def text_identity(data_args: DataArguments) -> dict[str, list[dict]]:
    """
    What a run trains and validates on, by field (`train_file`, `validation_file`): each file's absolute path, size
    and SHA-256 of its bytes (0.1 s for the 50 MB of text a long run reads, once per run).
    """
    identity = {}
    for name in TEXT_FLAGS:
        identity[name] = []
        for path in getattr(data_args, name):
            digest = hashlib.sha256()  # read in blocks, as hashlib.file_digest (Python 3.11; 3.10 is supported)
            with open(path, "rb") as handle:
                for block in iter(lambda: handle.read(1 << 20), b""):
                    digest.update(block)
            identity[name].append(
                {"path": os.path.abspath(path), "size": os.path.getsize(path), "sha256": digest.hexdigest()}
            )
    return identity


def save_text_identity(folder: Path, data_args: DataArguments) -> None:
    """Records the run's text files (`text_identity`) in `folder`, the run's `OUTPUT.parts/`."""
    (folder / RUN_TEXT_FILE).write_text(json.dumps(text_identity(data_args), indent=1), encoding="utf-8")


def read_run_text(path: Path) -> dict[str, list[dict]]:
    """
    The record of a run's text files (`text_identity`) that `path` holds, checked: a one-line `ValueError`
    (`FileContentError`) naming the file and the field where it cannot be read or a field is missing or of another
    type.
    """
    fix = "pass --overwrite_output_dir without --resume to start over"
    record = JsonFields.of_file(path, fix)
    identity = {}
    for name in TEXT_FLAGS:
        identity[name] = record.take(name, list)
        for index, entry in enumerate(identity[name]):
            file = JsonFields(entry, path, fix, f"{name}[{index}]")
            file.take("path", str)
            file.take("size", int, minimum=0)
            file.take("sha256", str)
    return identity


def check_same_text(source: Path, data_args: DataArguments) -> None:
    """
    A one-line `ValueError` where the run to continue in `source` was started on other text files than `data_args`
    names, by content (size and SHA-256: the same file moved is the same text): its vocabulary and word counts are
    those of its own text, and its checkpoints have read it. A run recorded before runs recorded their text is not
    checked.
    """
    path = source / RUN_TEXT_FILE
    if not path.exists():
        return
    recorded = read_run_text(path)
    given = text_identity(data_args)
    advice = "; resume with the files it started with, or pass --overwrite_output_dir without --resume to start over"
    for name, flag in TEXT_FLAGS.items():
        started, now = recorded[name], given[name]
        if len(started) != len(now):
            raise ValueError(
                f"cannot resume {source}: its run started with {len(started)} {flag} file(s), not {len(now)}{advice}"
            )
        for before, after in zip(started, now):
            if (before["size"], before["sha256"]) != (after["size"], after["sha256"]):
                changed = "edited since" if before["path"] == after["path"] else f"not {before['path']}"
                raise ValueError(
                    f"cannot resume {source}: {flag} {after['path']} is not the text its run started with ({changed}: "
                    f"{after['size']:,} bytes against {before['size']:,}, or other bytes){advice}"
                )


def describe_resumption(folders: RunFolders, checkpoints: SavedCheckpoints) -> str:
    """The line a resumed run prints: the checkpoint it continues from, and the incomplete ones it removed."""
    removed = ""
    if checkpoints.incomplete:
        names = ", ".join(path.name for path in checkpoints.incomplete)
        removed = f" ({names}: incomplete, without {TRAINER_STATE}, stopped while being saved; removed)"
    if checkpoints.last is None:
        return f"{folders.parts} holds no complete checkpoint{removed}: training starts at step 0 with its vocabulary"
    return f"resuming from {checkpoints.last}{removed}"


@contextlib.contextmanager
def reported_write_failures(folder: Path, then: str = ""):
    """Turns a failed write in `folder` into a one-line `CommandError`: `cannot write FOLDER: REASON` and `then`, what
    becomes of the run (or `folders.atomic_directory`'s own line, which names its folder)."""
    try:
        yield
    except ElmoConversionError as error:
        raise CommandError(first_line(error) + then) from error
    except Exception as error:
        reason = write_failure_reason(error)
        if reason is None:
            raise
        raise CommandError(f"cannot write {folder}: {reason}{then}") from error


def check_checkpoint_files(checkpoint: Path) -> None:
    """
    A one-line `CommandError`, before anything trains, for a pickle of the checkpoint to resume from (its optimizer,
    scheduler and random states) that the Trainer's `torch.load(weights_only=True)` would refuse, naming what it holds
    that is refused, or that is no file `torch.save` wrote. Refusing is right: loaded otherwise, a pickle can run any
    code. (torch lists them since 2.5; transformers 5 trains with torch 2.6 or later.) Its Trainer state
    (`read_trainer_state`) and weights too, where a `.safetensors` file is cut short or its header damaged (read here,
    not its tensors), or cannot be read.
    """
    from transformers.trainer_pt_utils import safe_globals  # what the Trainer allows beyond torch: numpy's RNG state

    try:
        complete = read_trainer_state(checkpoint / TRAINER_STATE) is not None
    except FileContentError as error:
        raise CommandError(str(error)) from error
    if not complete:
        raise CommandError(
            f"cannot resume from {checkpoint}: its {TRAINER_STATE} is missing or cut short (a checkpoint stopped "
            "while being saved); resume from another checkpoint"
        )
    if damaged := first_damaged_weights(checkpoint):
        path, error = damaged
        fix = (
            f"remove {checkpoint.name} to resume from the checkpoint before it (or from step 0), or start over with "
            "--overwrite_output_dir instead of --resume"
        )
        raise CommandError(f"cannot resume from {checkpoint}: {path.name} {weights_problem(error, fix)}") from error
    for path in sorted([*checkpoint.glob("*.pt"), *checkpoint.glob("*.pth")]):
        try:
            with safe_globals():
                refused = torch.serialization.get_unsafe_globals_in_checkpoint(path)
        except Exception as error:  # noqa: BLE001  whatever a damaged file raises, the Trainer could not load it
            raise CommandError(
                f"cannot resume from {checkpoint}: {path.name} is no file torch.save wrote ({first_line(error)})"
            ) from error
        if refused:
            raise CommandError(
                f"cannot resume from {checkpoint}: the Trainer's torch.load(weights_only=True) refuses {path.name}, "
                f"which holds {', '.join(refused)}; remove {path.name} to resume without it, or start over with "
                "--overwrite_output_dir instead of --resume"
            )


def main(argv: list[str] | None = None) -> dict[str, float]:
    """
    Trains, then makes `--output-dir` the model folder (model, tokenizer, word counts, model card) in one rename, and
    returns the final validation metrics (with the `<UNK>` rates of the training and validation words). Arguments
    that cannot apply are a one-line `ValueError`, checked before any model or tokenizer loads; a failed write or a
    checkpoint that cannot be resumed is a one-line `CommandError`.
    """
    argv = sys.argv[1:] if argv is None else list(argv)
    data_args, model_args, training_args = build_parser().parse(argv)
    if data_args.streaming and training_args.max_steps <= 0:
        raise ValueError("--streaming needs --max-steps: a stream has no known length")
    launched = int(os.environ.get("WORLD_SIZE", "1"))
    if launched > training_args.world_size:  # each process would train alone, all writing the same folder
        raise ValueError(f"{launched} processes were launched but they do not train together; on CPU pass --use_cpu")
    if model_args.model_name_or_path is not None:
        check_nothing_overrides_the_model(data_args, model_args)
    check_text_files(data_args)
    folders = RunFolders.of(training_args.output_dir)
    # One run at a time writes --output-dir, from before anything it holds is looked at: a second run is refused while
    # the first lives (the other processes of one distributed run follow its first).
    lock = contextlib.nullcontext()
    if training_args.process_index == 0:
        with reported_write_failures(folders.output):
            lock = lock_output(folders.output)
    with lock:
        if training_args.process_index == 0:  # the run's own folder, which a link there would put elsewhere
            with reported_write_failures(folders.output):
                refuse_link(folders.parts, "run folder")
        return train(argv, data_args, model_args, training_args, folders)


def train(
    argv: list[str],
    data_args: DataArguments,
    model_args: ModelArguments,
    training_args: PretrainingArguments,
    folders: RunFolders,
) -> dict[str, float]:
    """`main` once its arguments are checked and its output locked."""
    source = run_to_continue(folders, training_args, [*data_args.train_file, *data_args.validation_file])
    if source is not None:
        check_same_text(source, data_args)
    # Every process has checked the folders as they were before any of them writes.
    training_args.distributed_state.wait_for_everyone()
    training_args.output_dir = str(folders.parts)  # where the Trainer saves its checkpoints
    model = trained_tokenizer = None
    if model_args.model_name_or_path is not None:
        # Loaded before anything is written, so that a model that does not load leaves no folder behind.
        model, trained_tokenizer = load_pretrained(model_args)
    # The text is split as the tokenizer it trains will split it: a trained model's, the one of the run continued, or
    # a new one with --pre-tokenizer.
    if model is not None:
        pre_tokenizer = trained_tokenizer.pre_tokenizer
    elif source is not None:
        pre_tokenizer = ElmoTokenizer.from_pretrained(source).pre_tokenizer
    else:
        pre_tokenizer = data_args.pre_tokenizer
    train_text = SplitText(data_args.train_file, pre_tokenizer, in_memory=not data_args.streaming)
    validation_text = SplitText(data_args.validation_file, pre_tokenizer)

    def write_tokenizer(folder: Path) -> None:
        if trained_tokenizer is None:
            save_tokenizer(data_args, model_args, train_text, folder)
        else:
            trained_tokenizer.save_pretrained(folder)
        # The SIF weights of the folder's sentence vectors (sentence_weighting): the words of the training text.
        WordCounts.of_sentences(ElmoTokenizer.from_pretrained(folder), train_text).save_pretrained(folder)
        save_text_identity(folder, data_args)

    # The first process makes `OUTPUT.parts/` (a new run's with its vocabulary, or the continued run's) and leaves only
    # complete checkpoints in it; the others then read the tokenizer there. The Trainer is not given the tokenizer: it
    # would align special-token ids with the model config, which a character tokenizer does not have.
    with training_args.main_process_first(local=False, desc="word vocabulary"):
        if training_args.process_index == 0:
            with reported_write_failures(folders.parts):
                start_parts(folders, source, write_tokenizer)
            checkpoints = saved_checkpoints(folders.parts)
            for incomplete in checkpoints.incomplete:
                shutil.rmtree(incomplete)
            if source is not None:
                print(describe_resumption(folders, checkpoints), file=sys.stderr)
        tokenizer = ElmoTokenizer.from_pretrained(folders.parts)
    last = saved_checkpoints(folders.parts).last
    resume_from = training_args.resume_from_checkpoint or (str(last) if last is not None else None)
    if resume_from is not None:
        check_checkpoint_files(Path(resume_from))
    if model is None:
        asked_negatives = model_args.n_negative_samples or NEGATIVE_SAMPLES
        model = ElmoForPreTraining(model_config(model_args, tokenizer))
    else:
        asked_negatives = model_args.n_negative_samples or model.config.n_negative_samples or NEGATIVE_SAMPLES
        model.config.n_negative_samples = min(asked_negatives, tokenizer.word_vocab_size)
    rates = {"train_unk_rate": unk_rate(tokenizer, train_text), "eval_unk_rate": unk_rate(tokenizer, validation_text)}
    if training_args.process_index == 0:
        print(describe_run(model, asked_negatives, rates), file=sys.stderr)

    train_dataset = StreamingLineDataset(train_text) if data_args.streaming else LineDataset(train_text)
    trainer = Trainer(
        model=model,
        args=training_args,
        train_dataset=train_dataset,
        eval_dataset=LineDataset(validation_text),
        data_collator=ElmoPreTrainingCollator(tokenizer, data_args.max_length),
        compute_metrics=perplexity_metrics,
        preprocess_logits_for_metrics=direction_nll_sums,
        callbacks=[StepsOfTheCommand()],
    )
    resumable = f"; once it can be written, --resume continues from the last complete checkpoint in {folders.parts}"
    with reported_write_failures(folders.parts, resumable):
        trainer.train(resume_from_checkpoint=resume_from)
        trainer.save_model(str(folders.parts))
    metrics = final_metrics(trainer)
    metrics["train_unk_rate"] = rates["train_unk_rate"]
    if trainer.is_world_process_zero():
        with reported_write_failures(folders.parts, resumable):
            write_model_card(folders.parts, argv, data_args, model, trainer.state.global_step, metrics)
            apply_umask(folders.parts)
        with reported_write_failures(folders.output, f"; the finished run stays in {folders.parts} for --resume"):
            replace_folder(folders.parts, folders.output)
        with reported_write_failures(folders.output):
            if not training_args.keep_checkpoints:  # the record of the text goes with the checkpoints
                for checkpoint in folders.output.glob(f"{CHECKPOINT_PREFIX}*"):
                    shutil.rmtree(checkpoint)
                (folders.output / RUN_TEXT_FILE).unlink(missing_ok=True)
    return metrics


def final_metrics(trainer: Trainer) -> dict[str, float]:
    """
    The validation metrics of the trained model. The Trainer evaluates it at the end of training itself (and logs it)
    unless `--eval-strategy no`: those metrics are taken, not computed and printed a second time.
    """
    evaluations = [entry for entry in trainer.state.log_history if "eval_perplexity" in entry]
    if evaluations and evaluations[-1]["step"] == trainer.state.global_step:
        return {name: value for name, value in evaluations[-1].items() if name != "step"}
    return trainer.evaluate()


def load_pretrained(model_args: ModelArguments) -> tuple[ElmoForPreTraining, ElmoTokenizer]:
    """The model `--model-name-or-path` names (a folder, a bundled model or a Hub id: `hf_elmo.loading`) and its
    tokenizer; a one-line `ValueError` when they do not load or do not match."""
    name = model_args.model_name_or_path
    dropout = {} if model_args.lstm_dropout is None else {"lstm_dropout": model_args.lstm_dropout}
    model, tokenizer = load_model_and_tokenizer(name, ElmoForPreTraining, **dropout)
    if model.config.word_vocab_size != tokenizer.word_vocab_size:
        raise ValueError(f"{name} has no word softmax of its tokenizer's vocabulary")
    return model, tokenizer


def describe_run(model: ElmoForPreTraining, asked_negatives: int, rates: dict[str, float]) -> str:
    """What the run is about to train, printed before it starts: vocabulary coverage, size and negatives, and whether
    the vocabulary size capped those asked for (by the options, the default or the model trained further)."""
    config = model.config
    vocab, used = config.word_vocab_size, config.n_negative_samples
    negatives = f"{used:,}" + (
        f" ({asked_negatives:,} capped at the vocabulary size)" if asked_negatives > used else ""
    )
    softmax = sum(p.numel() for p in model.softmax.parameters())
    return "\n".join(
        [
            f"word vocabulary: {vocab:,} words, <S> </S> <UNK> included; <UNK> rate {rates['train_unk_rate']:.1%} of "
            f"the training words, {rates['eval_unk_rate']:.1%} of the validation words",
            f"parameters: {model.num_parameters():,} ({model.num_parameters() - softmax:,} biLM, {softmax:,} softmax)",
            f"negative samples per batch: {negatives}",
        ]
    )


def write_model_card(
    output_dir: Path,
    argv: list[str],
    data_args: DataArguments,
    model: ElmoForPreTraining,
    steps: int,
    metrics: dict[str, float],
):
    """`output_dir/README.md`: the data, the command, the steps, the perplexities and the `<UNK>` rates."""
    config = model.config
    model_card.write_model_card(
        output_dir,
        model_card.packaged_template("pretrained_elmo.md"),
        n_layers=config.n_layers,
        cell_dim=config.cell_dim,
        projection_dim=config.projection_dim,
        n_parameters=f"{model.num_parameters():,}",
        word_vocab_size=f"{config.word_vocab_size:,}",
        train_files=", ".join(f"`{Path(name).name}`" for name in data_args.train_file),
        validation_files=", ".join(f"`{Path(name).name}`" for name in data_args.validation_file),
        command=shlex.join(["hf-elmo", "pretrain", *argv]),
        steps=f"{steps:,}",
        forward=f"{metrics['eval_forward_perplexity']:.2f}",
        backward=f"{metrics['eval_backward_perplexity']:.2f}",
        perplexity=f"{metrics['eval_perplexity']:.2f}",
        train_unk=f"{metrics['train_unk_rate']:.1%}",
        eval_unk=f"{metrics['eval_unk_rate']:.1%}",
        n_negative_samples=f"{config.n_negative_samples:,}",
    )


def keep_freed_memory() -> None:
    """
    Has glibc's `malloc` keep the memory a training step frees for the next step. Each step allocates and frees the
    same large tensors; by default glibc hands blocks over 128 KiB back to the system, and the next step takes them
    again page by page, a page fault each (how many, and what they cost: benchmarks/RESULTS.md). Here blocks up to
    32 MiB (glibc's most) come from the heap, which is given back only when over 2 GiB of it is free. For processes
    that train: the pretrain commands call it, `main` does not (a library call leaves the allocator as it is). Does
    nothing without glibc.
    """
    if platform.libc_ver()[0] != "glibc":
        return
    m_trim_threshold, m_mmap_threshold = -1, -3  # malloc.h
    libc = ctypes.CDLL(None)
    libc.mallopt(m_mmap_threshold, 32 << 20)
    libc.mallopt(m_trim_threshold, 2**31 - 1)
