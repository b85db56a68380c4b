"""Pre-training an ELMo biLM from scratch on plain text with the stock `Trainer` (stage 1 of the paper).

Text files hold one sentence per line (plain or `.gz`), words separated as the tokenizer's pre-tokenizer splits them.
The word vocabulary is built with `tokenizers` (`WordLevel` + `WordLevelTrainer`) and saved with the tokenizer, so
the output folder loads as `ElmoTokenizer`, `ElmoModel` (the biLM alone) or `ElmoForPreTraining`.

    python -m hf_elmo.pretraining --train-file train.txt --validation-file valid.txt --output-dir out --preset small
    torchrun --nproc_per_node 2 -m hf_elmo.pretraining ...   # several processes, unchanged
"""

import argparse
import gzip
import math
import tempfile
from collections.abc import Iterable, Iterator
from pathlib import Path

import numpy as np
import torch
from tokenizers import Tokenizer, models, trainers
from transformers import Trainer, TrainingArguments

from .alphabet_elmo import CHAR_VOCAB_FILE, learn_character_vocabulary
from .configuration_elmo import ORIGINAL_FILTERS, ElmoConfig
from .modeling_elmo import ElmoForPreTraining
from .tokenization_elmo import BOS_TOKEN, EOS_TOKEN, PRE_TOKENIZERS, UNK_TOKEN, ElmoTokenizer

# Model shapes by preset; `original` is the released 2x4096_512_2048cnn_2xhighway model (the ElmoConfig defaults).
PRESETS = {
    "tiny": dict(char_embedding_dim=8, filters=[[1, 16], [2, 16], [3, 32], [4, 64]], n_highway=1,
                 projection_dim=32, cell_dim=128, n_layers=2),
    "small": dict(char_embedding_dim=16, filters=ORIGINAL_FILTERS, n_highway=1, projection_dim=128, cell_dim=1024,
                  n_layers=2),
    "original": dict(),
}


# -- text and vocabulary ---------------------------------------------------------------------------------------------


def read_lines(paths: Iterable[str | Path]) -> Iterator[str]:
    """The non-blank lines of text files (plain or `.gz`), stripped, in order."""
    for path in paths:
        opener = gzip.open if str(path).endswith(".gz") else open
        with opener(path, "rt", encoding="utf-8") as handle:
            for line in handle:
                line = line.strip()
                if line:
                    yield line


def build_word_vocab(
    lines: Iterable[str], min_count: int = 1, max_size: int | None = None, pre_tokenizer: str = "whitespace_split"
) -> Tokenizer:
    """
    A `tokenizers` `WordLevel` vocabulary of the words in `lines`: `<S>`, `</S>`, `<UNK>` (ids 0, 1, 2), then the
    words seen at least `min_count` times by decreasing count, `max_size` entries at most (specials included).
    Frequency order is what the sampled softmax's log-uniform sampler assumes.
    """
    if min_count < 1:
        raise ValueError(f"min_count must be at least 1, got {min_count}")
    if max_size is not None and max_size < 4:
        raise ValueError(f"max_size must leave room for the 3 special words and one more, got {max_size}")
    if pre_tokenizer not in PRE_TOKENIZERS:
        raise ValueError(f"pre_tokenizer must be one of {sorted(PRE_TOKENIZERS)}, got {pre_tokenizer!r}")
    tokenizer = Tokenizer(models.WordLevel(unk_token=UNK_TOKEN))
    tokenizer.pre_tokenizer = PRE_TOKENIZERS[pre_tokenizer]()
    trainer = trainers.WordLevelTrainer(
        vocab_size=max_size or 2**31 - 1, min_frequency=min_count, special_tokens=[BOS_TOKEN, EOS_TOKEN, UNK_TOKEN],
        show_progress=False,
    )
    tokenizer.train_from_iterator(lines, trainer=trainer)
    return tokenizer


# -- datasets and batches --------------------------------------------------------------------------------------------


class LineDataset(torch.utils.data.Dataset):
    """All sentences of some text files, held in memory."""

    def __init__(self, paths: Iterable[str | Path]):
        self.lines = list(read_lines(paths))
        if not self.lines:
            raise ValueError("the text files hold no sentence")

    def __len__(self) -> int:
        return len(self.lines)

    def __getitem__(self, index: int) -> dict[str, str]:
        return {"text": self.lines[index]}


class StreamingLineDataset(torch.utils.data.IterableDataset):
    """The sentences of some text files read lazily, once per pass, for corpora larger than memory."""

    def __init__(self, paths: Iterable[str | Path]):
        self.paths = [str(path) for path in paths]

    def __iter__(self) -> Iterator[dict[str, str]]:
        return ({"text": line} for line in read_lines(self.paths))


class ElmoPreTrainingCollator:
    """Encodes a list of `{"text": sentence}` into char ids and word-id `labels`, cutting rows at `max_length`."""

    def __init__(self, tokenizer: ElmoTokenizer, max_length: int):
        if tokenizer.word_vocab_size is None:
            raise ValueError("the tokenizer needs a word vocabulary (vocab_file=...) to give pre-training labels")
        self.tokenizer = tokenizer
        self.max_length = max_length

    def __call__(self, features: list[dict[str, str]]) -> dict[str, torch.Tensor]:
        texts = [feature["text"] for feature in features]
        encoded = self.tokenizer(texts, padding=True, truncation=True, max_length=self.max_length,
                                 return_word_labels=True, return_tensors="pt")
        return dict(encoded)


# -- metrics ---------------------------------------------------------------------------------------------------------


def direction_nll_sums(outputs, labels: torch.Tensor) -> torch.Tensor:
    """
    Per evaluation batch, `(batch, 3)`: row 0 holds `[forward NLL sum, backward NLL sum, targets]` (from the batch's
    mean losses), the other rows zeros, so that the perplexity over the whole evaluation set weighs every word alike
    and survives the Trainer's trimming of a last, partial batch to its real rows. (Each direction has one target
    fewer per row than valid positions.)
    """
    forward_loss, backward_loss = outputs[0], outputs[1]
    targets = ((labels != -100).sum(dim=1) - 1).clamp(min=0).sum().to(forward_loss.dtype)
    sums = forward_loss.new_zeros(labels.shape[0], 3)
    sums[0] = torch.stack([forward_loss * targets, backward_loss * targets, targets])
    return sums


def perplexity_metrics(eval_prediction) -> dict[str, float]:
    """Exact perplexities of both directions and of their mean NLL over the evaluation set."""
    sums = np.asarray(eval_prediction.predictions, dtype=np.float64).reshape(-1, 3).sum(axis=0)
    forward_nll, backward_nll = sums[0] / sums[2], sums[1] / sums[2]
    return {
        "forward_perplexity": math.exp(forward_nll),
        "backward_perplexity": math.exp(backward_nll),
        "perplexity": math.exp((forward_nll + backward_nll) / 2),
    }


# -- command line ----------------------------------------------------------------------------------------------------


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="hf-elmo pretrain", description="Pre-train an ELMo biLM from scratch on one-sentence-per-line text."
    )
    data = parser.add_argument_group("data")
    data.add_argument("--train-file", nargs="+", required=True, help="training text files (plain or .gz)")
    data.add_argument("--validation-file", nargs="+", required=True, help="validation text files")
    data.add_argument("--output-dir", required=True, help="checkpoints and the final model folder")
    data.add_argument("--streaming", action="store_true",
                      help="read the training files lazily (needs --max-steps; the vocabulary pass still reads all)")
    data.add_argument("--max-length", type=int, default=64, help="positions per sentence, <S> and </S> included")
    data.add_argument("--pre-tokenizer", choices=sorted(PRE_TOKENIZERS), default="whitespace_split")
    vocab = parser.add_argument_group("word vocabulary")
    vocab.add_argument("--min-count", type=int, default=3, help="words seen fewer times become <UNK>")
    vocab.add_argument("--max-vocab-size", type=int, default=None, help="most words kept, specials included")
    vocab.add_argument("--char-vocab", choices=["bytes", "learned"], default="bytes",
                       help="rows of UTF-8 bytes (bilm-tf), or of the training files' characters, so that a row "
                            "holds max-characters-per-token - 2 characters (a Hangul syllable is 3 bytes)")
    size = parser.add_argument_group("model size (each overrides the preset)")
    size.add_argument("--preset", choices=sorted(PRESETS), default="small")
    size.add_argument("--projection-dim", type=int)
    size.add_argument("--cell-dim", type=int)
    size.add_argument("--n-layers", type=int)
    size.add_argument("--n-highway", type=int)
    size.add_argument("--max-characters-per-token", type=int, default=50)
    size.add_argument("--n-negative-samples", type=int, default=8192,
                      help="sampled-softmax candidates per batch (bilm-tf: 8192)")
    train = parser.add_argument_group("training")
    train.add_argument("--batch-size", type=int, default=64, help="sentences per process and step")
    train.add_argument("--learning-rate", type=float, default=1e-3)
    train.add_argument("--max-steps", type=int, default=-1, help="overrides --epochs when positive")
    train.add_argument("--epochs", type=float, default=1.0)
    train.add_argument("--eval-steps", type=int, default=500)
    train.add_argument("--save-steps", type=int, default=500)
    train.add_argument("--logging-steps", type=int, default=50)
    train.add_argument("--max-grad-norm", type=float, default=10.0, help="bilm-tf clips the global norm at 10")
    train.add_argument("--seed", type=int, default=42)
    train.add_argument("--bf16", action="store_true", help="bf16 mixed precision (GPU)")
    train.add_argument("--resume", action="store_true", help="continue from the last checkpoint in --output-dir")
    train.add_argument("--dataloader-workers", type=int, default=0)
    return parser


def model_config(args, tokenizer: ElmoTokenizer) -> ElmoConfig:
    """The `ElmoConfig` of a preset with the command line's overrides, for the tokenizer's words and characters."""
    word_vocab_size = tokenizer.word_vocab_size
    options = dict(PRESETS[args.preset])
    for name in ("projection_dim", "cell_dim", "n_layers", "n_highway"):
        if getattr(args, name) is not None:
            options[name] = getattr(args, name)
    return ElmoConfig(max_characters_per_token=args.max_characters_per_token, word_vocab_size=word_vocab_size,
                      n_negative_samples=min(args.n_negative_samples, word_vocab_size),
                      **tokenizer.alphabet.config_fields(), **options)


def save_tokenizer(args, output_dir: Path) -> None:
    """Builds the word vocabulary of the training files and saves the tokenizer holding it in `output_dir`."""
    word_vocab = build_word_vocab(read_lines(args.train_file), args.min_count, args.max_vocab_size,
                                  args.pre_tokenizer)
    with tempfile.TemporaryDirectory() as folder:
        vocab_file = str(Path(folder) / "word_vocab.json")
        word_vocab.save(vocab_file)
        char_vocab_file = None
        if args.char_vocab == "learned":
            char_vocab_file = str(Path(folder) / CHAR_VOCAB_FILE)
            splitter = PRE_TOKENIZERS[args.pre_tokenizer]()
            sentences = ([word for word, _ in splitter.pre_tokenize_str(line)] for line in read_lines(args.train_file))
            learn_character_vocabulary(sentences).save(char_vocab_file)
        tokenizer = ElmoTokenizer(max_characters_per_token=args.max_characters_per_token,
                                  pre_tokenizer=args.pre_tokenizer, vocab_file=vocab_file,
                                  char_vocab_file=char_vocab_file)
    tokenizer.save_pretrained(output_dir)


def main(argv: list[str] | None = None) -> dict[str, float]:
    """Trains, saves the model and tokenizer in `--output-dir`, and returns the final validation metrics."""
    args = build_parser().parse_args(argv)
    if args.streaming and args.max_steps <= 0:
        raise ValueError("--streaming needs --max-steps: a stream has no known length")
    output_dir = Path(args.output_dir)
    training_args = TrainingArguments(
        output_dir=str(output_dir),
        per_device_train_batch_size=args.batch_size,
        per_device_eval_batch_size=args.batch_size,
        learning_rate=args.learning_rate,
        max_steps=args.max_steps,
        num_train_epochs=args.epochs,
        max_grad_norm=args.max_grad_norm,
        eval_strategy="steps",
        eval_steps=args.eval_steps,
        save_strategy="steps",
        save_steps=args.save_steps,
        logging_steps=args.logging_steps,
        bf16=args.bf16,
        seed=args.seed,
        dataloader_num_workers=args.dataloader_workers,
        remove_unused_columns=False,
        report_to="none",
    )
    # The first process builds the vocabulary (kept when resuming) and saves the tokenizer in the output folder; the
    # others read it there. The Trainer is not given the tokenizer: it would align special-token ids with the model
    # config, which a character tokenizer does not have.
    with training_args.main_process_first(desc="word vocabulary"):
        if training_args.process_index == 0 and not (args.resume and (output_dir / "word_vocab.json").is_file()):
            save_tokenizer(args, output_dir)
        tokenizer = ElmoTokenizer.from_pretrained(output_dir)
    config = model_config(args, tokenizer)
    model = ElmoForPreTraining(config)
    train_dataset = StreamingLineDataset(args.train_file) if args.streaming else LineDataset(args.train_file)
    trainer = Trainer(
        model=model,
        args=training_args,
        train_dataset=train_dataset,
        eval_dataset=LineDataset(args.validation_file),
        data_collator=ElmoPreTrainingCollator(tokenizer, args.max_length),
        compute_metrics=perplexity_metrics,
        preprocess_logits_for_metrics=direction_nll_sums,
    )
    trainer.train(resume_from_checkpoint=args.resume and _has_checkpoint(output_dir))
    trainer.save_model(str(output_dir))
    metrics = trainer.evaluate()
    trainer.log_metrics("eval", metrics)
    return metrics


def _has_checkpoint(output_dir: Path) -> bool:
    return any(path.is_dir() for path in output_dir.glob("checkpoint-*"))


if __name__ == "__main__":
    main()
