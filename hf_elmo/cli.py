"""The `hf-elmo` command: embed a corpus to disk, convert an original checkpoint, describe a model.

`hf-elmo embed MODEL INPUT OUTPUT` writes, for each line `i` of INPUT (one sentence per line, words separated by
whitespace), the ELMo representation of its words; the `<S>`/`</S>` boundary positions are left out, as in
AllenNLP's `allennlp elmo` command. Shapes per line, for `n` words and `dim = 2 * projection_dim`:

    --all (n_layers + 1, n, dim)    --top, --average, --mix (n, dim)
    with --pooled, the mean over the words: (n_layers + 1, dim) or (dim,); zeros for an empty line

`--format hdf5` (default): one float32 dataset per line named `str(i)`, plus a `sentence_to_index` dataset of shape
`(1,)` holding a JSON string `{stripped line text: str(i)}` (the layout of `allennlp elmo`, so its readers work).
`--format npy`: OUTPUT is a folder with one `{i}.npy` per line and `sentence_to_index.json` holding the same JSON.
Empty lines are kept as entries with 0 words. Lines are written as the run goes (for HDF5, batch by batch into
`OUTPUT.parts/`, assembled into OUTPUT at the end, so that OUTPUT is complete or absent); a run that was stopped
or killed continues with `--resume`, skipping the lines already written.
"""

import argparse
import itertools
import json
import os
import shutil
import signal
import sys
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import torch

# Lines read ahead and sorted by length, so that each batch holds sentences of similar length.
BUCKET_BATCHES = 32
SETTINGS_NAME = "hf_elmo_embed"
DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}


class CliError(Exception):
    """A failure to report as one line on stderr, with exit status `code`."""

    def __init__(self, message: str, code: int = 1):
        super().__init__(message)
        self.code = code


# -- model ------------------------------------------------------------------------------------------------------------


def load_model(name: str, dtype: torch.dtype | str = "auto", device: str = "cpu"):
    """An `ElmoModel` in eval mode and its `ElmoTokenizer` from a local folder, a bundled model's name or a Hub id."""
    from transformers.utils import logging as transformers_logging

    from .bundled import resolve_model_name
    from .modeling_elmo import ElmoModel
    from .tokenization_elmo import ElmoTokenizer

    transformers_logging.disable_progress_bar()
    name = resolve_model_name(name)
    path = Path(name).expanduser()
    if path.is_dir() and not (path / "config.json").is_file():
        raise CliError(f"{name} is not an hf_elmo model folder (no config.json)")
    if not path.exists() and (name.startswith((".", "/", "~")) or name.count("/") > 1):
        raise CliError(f"no such model folder: {name}")
    try:
        model = ElmoModel.from_pretrained(path if path.is_dir() else name, dtype=dtype)
        tokenizer = ElmoTokenizer.from_pretrained(path if path.is_dir() else name)
        model = model.to(device).eval()
    except (OSError, ValueError, TypeError, RuntimeError) as error:
        raise CliError(f"cannot load {name} as an hf_elmo model: {_first_line(error)}") from error
    if tokenizer.max_characters_per_token != model.config.max_characters_per_token:  # a folder without tokenizer files
        tokenizer = ElmoTokenizer(model.config.max_characters_per_token, pre_tokenizer=tokenizer.pre_tokenizer)
    return model, tokenizer


def _first_line(error: BaseException) -> str:
    text = str(error).strip()
    return text.splitlines()[0] if text else type(error).__name__


# -- input ------------------------------------------------------------------------------------------------------------


def read_lines(path: Path, errors: str, warn: bool = True) -> Iterator[tuple[int, str | None]]:
    """`(index, stripped text)` of each line, streamed; text is None for an undecodable line under `errors="skip"`."""
    with open(path, "rb") as handle:
        for index, raw in enumerate(handle):
            try:
                text = raw.decode("utf-8", "replace" if errors == "replace" else "strict")
            except UnicodeDecodeError as error:
                if errors == "strict":
                    raise CliError(f"{path} line {index + 1}: not valid UTF-8 ({error.reason} at byte "
                                   f"{error.start}); pass --errors replace or --errors skip") from error
                if warn:
                    print(f"hf-elmo: skipping {path} line {index + 1}: not valid UTF-8", file=sys.stderr)
                text = None
            yield index, None if text is None else text.strip()


def count_lines(path: Path) -> int:
    with open(path, "rb") as handle:
        return sum(1 for _ in handle)


# -- representations --------------------------------------------------------------------------------------------------


def select_layers(layers: torch.Tensor, choice: str | list[float], pooled: bool) -> np.ndarray:
    """`layers` `(n_layers + 1, words, dim)` -> the float32 array to store for one line (shapes in the module doc)."""
    if choice == "top":
        layers = layers[-1]
    elif choice == "average":
        layers = layers.mean(dim=0)
    elif choice != "all":
        layers = torch.einsum("l,lwd->wd", torch.tensor(choice, dtype=layers.dtype), layers)
    if pooled:
        words = layers.shape[-2]
        layers = layers.sum(dim=-2) / max(words, 1)
    return layers.numpy()


@torch.no_grad()
def embed_batch(model, tokenizer, sentences: list[list[str]]) -> list[torch.Tensor]:
    """Float32 CPU tensors `(n_layers + 1, words, dim)` of each sentence, boundary positions removed."""
    device = model.device
    encoding = tokenizer(sentences, is_split_into_words=True, padding=True, return_tensors="pt")
    output = model(encoding["input_ids"].to(device), attention_mask=encoding["attention_mask"].to(device),
                   output_hidden_states=True)
    stacked = torch.stack(output.hidden_states, dim=1).float().cpu()
    return [stacked[row, :, 1:len(words) + 1] for row, words in enumerate(sentences)]


@torch.no_grad()
def embed_long(model, tokenizer, words: list[str], window: int) -> torch.Tensor:
    """Like `embed_batch` for one sentence, computed `window` positions at a time with the LSTM state carried."""
    input_ids = tokenizer([words], is_split_into_words=True, return_tensors="pt")["input_ids"][0]
    layers = model.windowed_hidden_states(input_ids.to(model.device), window)
    return torch.stack(layers).float().cpu()[:, 1:-1]


# -- outputs ----------------------------------------------------------------------------------------------------------


class Hdf5Output:
    """
    Finished batches go to `OUTPUT.parts/`, one `.npz` per batch, each written whole (temporary name, then renamed);
    `finish` assembles OUTPUT the same way. A failed write cannot leave a broken HDF5 file behind (HDF5 files do not
    survive one), OUTPUT is complete or absent, and a stopped run resumes from the parts.
    """

    def __init__(self, path: Path, settings: dict, resume: bool):
        try:
            import h5py  # noqa: F401
        except ImportError as error:
            raise CliError("HDF5 output needs h5py: pip install h5py (or use --format npy)") from error
        self.path, self.parts = path, path.with_name(path.name + ".parts")
        if path.exists():
            raise CliError(f"{path} exists" + (" and is complete" if resume else "") + "; remove it to write it again")
        if self.parts.exists() and not resume:
            raise CliError(f"{self.parts} holds an unfinished run; pass --resume to continue it, or remove it")
        try:
            self.parts.mkdir(parents=True, exist_ok=True)
            settings_file = self.parts / f"{SETTINGS_NAME}.json"
            _check_settings(settings_file.read_text() if settings_file.is_file() else None, settings, path)
            settings_file.write_text(json.dumps(settings))
        except OSError as error:
            raise CliError(f"cannot write to {self.parts}: {error.strerror or error}") from error
        self.finished = set()
        for part in self.parts.glob("*.npz"):
            with np.load(part) as arrays:
                self.finished.update(arrays.files)
        self.batch = {}

    def write(self, index: int, array: np.ndarray):
        self.batch[str(index)] = array

    def commit(self):
        """Writes the batch's lines as one part (named after its first line, which no other part holds)."""
        if self.batch:
            name = f"{min(self.batch, key=int)}.npz"
            _write_whole(self.parts / name, lambda handle: np.savez(handle, **self.batch))
            self.batch = {}

    def finish(self, sentence_to_index: dict[str, str] | None):
        import h5py

        needed = sum(part.stat().st_size for part in self.parts.glob("*.npz")) + (1 << 20)
        free = shutil.disk_usage(self.path.parent).free
        if free < needed:
            raise CliError(f"{self.path.parent} has {free:,} bytes free, assembling {self.path} needs about "
                           f"{needed:,}; free some space and rerun with --resume")
        partial = self.path.with_name(f".{self.path.name}.partial")
        try:
            with h5py.File(partial, "w") as handle:
                for part in sorted(self.parts.glob("*.npz"), key=lambda p: int(p.stem)):
                    with np.load(part) as arrays:
                        for name in arrays.files:
                            handle.create_dataset(name, data=arrays[name], dtype="float32")
                if sentence_to_index is not None:
                    dataset = handle.create_dataset("sentence_to_index", (1,), dtype=h5py.string_dtype())
                    dataset[0] = json.dumps(sentence_to_index)
            os.replace(partial, self.path)
        except BaseException:
            partial.unlink(missing_ok=True)
            raise
        shutil.rmtree(self.parts)


def _write_whole(path: Path, write):
    """Calls `write(handle)` on a temporary file beside `path` and renames it to `path` once complete."""
    partial = path.with_name(f".{path.name}.partial")
    try:
        with open(partial, "wb") as handle:
            write(handle)
        os.replace(partial, path)
    except BaseException:
        partial.unlink(missing_ok=True)
        raise


class NpyOutput:
    """A folder with one `{index}.npy` per line, each written whole (temporary name, then renamed)."""

    def __init__(self, path: Path, settings: dict, resume: bool):
        self.path = path
        if path.exists() and not resume:
            raise CliError(f"{path} exists; pass --resume to continue the run that wrote it, or remove it")
        try:
            path.mkdir(parents=True, exist_ok=True)
            settings_file = path / f"{SETTINGS_NAME}.json"
            _check_settings(settings_file.read_text() if settings_file.is_file() else None, settings, path)
            settings_file.write_text(json.dumps(settings))
        except OSError as error:
            raise CliError(f"cannot write to {path}: {error.strerror or error}") from error
        self.finished = {p.stem for p in path.glob("*.npy") if p.stem.isdigit()}

    def write(self, index: int, array: np.ndarray):
        _write_whole(self.path / f"{index}.npy", lambda handle: np.save(handle, array.astype(np.float32)))

    def commit(self):
        pass

    def finish(self, sentence_to_index: dict[str, str] | None):
        target = self.path / "sentence_to_index.json"
        if sentence_to_index is None:
            target.unlink(missing_ok=True)
        else:
            target.write_text(json.dumps(sentence_to_index), encoding="utf-8")


def _check_settings(stored: str | None, settings: dict, path: Path):
    if stored is not None and json.loads(stored) != settings:
        raise CliError(f"{path} was written with other settings ({stored}); resume with those or start a new file")


class DeferredStop:
    """Turns SIGINT/SIGTERM into a flag checked between batches, so a stopped run never leaves a half-written one."""

    def __init__(self):
        self.signal = None

    def __enter__(self):
        self.previous = {sig: signal.signal(sig, self._record) for sig in (signal.SIGINT, signal.SIGTERM)}
        return self

    def _record(self, signum, frame):
        self.signal = signum

    def __exit__(self, *exc):
        for sig, handler in self.previous.items():
            signal.signal(sig, handler)

    def check(self, output: Path, done: int):
        if self.signal is not None:
            raise CliError(f"stopped by signal {self.signal} after {done} lines; the finished lines are in {output}, "
                           f"rerun with --resume to continue", code=128 + self.signal)


# -- commands ---------------------------------------------------------------------------------------------------------


def embed_command(args) -> int:
    input_path, output_path = Path(args.input), Path(args.output)
    if not input_path.is_file():
        raise CliError(f"no such input file: {input_path}")
    if args.batch_size < 1 or args.max_words < 1:
        raise CliError("--batch-size and --max-words must be at least 1")
    if args.device.startswith("cuda") and not torch.cuda.is_available():
        raise CliError(f"--device {args.device}: CUDA is not available here")
    model, tokenizer = load_model(args.model, DTYPES[args.dtype], args.device)
    choice = "all" if args.all else "top" if args.top else "average" if args.average else _mix_weights(args.mix, model)
    split = tokenizer.split_words if args.pretokenize else str.split
    settings = {"layers": choice, "pooled": args.pooled, "pretokenize": args.pretokenize}
    total = count_lines(input_path)

    output = (Hdf5Output if args.format == "hdf5" else NpyOutput)(output_path, settings, args.resume)
    if output.finished:
        print(f"hf-elmo: resuming: {len(output.finished)} of {total} lines are already written", file=sys.stderr)
    try:
        with DeferredStop() as stop:
            _embed_lines(args, model, tokenizer, split, choice, output, stop, total)
            sentence_to_index = None if args.forget_sentences else {
                text: str(index) for index, text in read_lines(input_path, args.errors, warn=False)
                if text is not None}
            output.finish(sentence_to_index)
    except (OSError, RuntimeError) as error:
        raise CliError(f"cannot write {output_path}: {getattr(error, 'strerror', None) or _first_line(error)}; "
                       f"the finished lines are kept, rerun with --resume once fixed") from error
    print(f"wrote {total} lines to {output_path}", file=sys.stderr)
    return 0


def _mix_weights(text: str, model) -> list[float]:
    try:
        weights = [float(w) for w in text.split(",")]
    except ValueError as error:
        raise CliError(f"--mix takes comma-separated numbers, got {text!r}") from error
    if len(weights) != model.config.num_hidden_layers:
        raise CliError(f"--mix needs {model.config.num_hidden_layers} weights (one per layer), got {len(weights)}")
    return weights


def _embed_lines(args, model, tokenizer, split, choice, output, stop: DeferredStop, total: int):
    """Embeds every unfinished line, a length-sorted batch at a time, writing and flushing after each batch."""
    from tqdm.auto import tqdm

    lines = read_lines(Path(args.input), args.errors)
    done = len(output.finished)
    with tqdm(total=total, initial=done, unit="sent", desc="embedding", file=sys.stderr, mininterval=1.0) as bar:
        while chunk := list(itertools.islice(lines, args.batch_size * BUCKET_BATCHES)):
            pending = []
            for index, text in chunk:
                if text is None:
                    bar.update(1)
                elif str(index) not in output.finished:
                    pending.append((index, split(text)))
            short = sorted((p for p in pending if len(p[1]) <= args.max_words), key=lambda p: len(p[1]))
            groups = [short[i:i + args.batch_size] for i in range(0, len(short), args.batch_size)]
            groups += [[p] for p in pending if len(p[1]) > args.max_words]
            for group in groups:
                if len(group[0][1]) > args.max_words:
                    results = [embed_long(model, tokenizer, group[0][1], args.max_words)]
                else:
                    results = embed_batch(model, tokenizer, [words for _, words in group])
                for (index, _), layers in zip(group, results):
                    output.write(index, select_layers(layers, choice, args.pooled))
                output.commit()
                bar.update(len(group))
                done += len(group)
                stop.check(output.path, done)


def convert_command(args) -> int:
    from .conversion import ElmoConversionError, convert, push_to_hub

    try:
        output = convert(args.options_file, args.weight_file, args.output_dir, overwrite=args.overwrite)
    except ElmoConversionError as error:
        raise CliError(str(error)) from error
    print(f"wrote {output}")
    if args.push_to_hub:
        try:
            commit = push_to_hub(output, args.push_to_hub, private=args.private)
        except (OSError, ValueError) as error:  # huggingface_hub's HTTP and auth errors derive from these
            raise CliError(f"{output} was written, but the upload to {args.push_to_hub} failed: "
                           f"{_first_line(error)}") from error
        print(f"uploaded to {args.push_to_hub}: {commit}")
    return 0


def info_command(args) -> int:
    model, _ = load_model(args.model)
    config = model.config
    rows = {
        "model": args.model,
        "dtype": str(model.dtype).removeprefix("torch."),
        "parameters": f"{model.num_parameters():,}",
        "representation layers": f"{config.num_hidden_layers} (token layer + {config.n_layers} LSTM layers)",
        "representation size": f"{config.hidden_size} (2 x projection_dim {config.projection_dim})",
        "LSTM cells": f"{config.cell_dim} per direction and layer",
        "skip connections": config.use_skip_connections,
        "character CNN": f"{len(config.filters)} filter widths, {config.n_filters} filters, "
                         f"{config.n_highway} highway layers, {config.activation}",
        "max characters per token": config.max_characters_per_token,
    }
    for key, value in rows.items():
        print(f"{key}: {value}")
    return 0


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="hf-elmo", description="ELMo models for Hugging Face transformers.")
    commands = parser.add_subparsers(dest="command", required=True)

    embed = commands.add_parser("embed", help="embed a text file, one sentence per line, to HDF5 or .npy files",
                                description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    embed.add_argument("model", help="model folder, bundled model (ko-nsmc) or Hub id")
    embed.add_argument("input", help="text file, UTF-8, one sentence per line")
    embed.add_argument("output", help="HDF5 file to write (a folder with --format npy)")
    layers = embed.add_mutually_exclusive_group(required=True)
    layers.add_argument("--all", action="store_true", help="all layers: (n_layers + 1, words, dim)")
    layers.add_argument("--top", action="store_true", help="the top layer: (words, dim)")
    layers.add_argument("--average", action="store_true", help="the mean of all layers: (words, dim)")
    layers.add_argument("--mix", metavar="W0,W1,...", help="the sum of the layers times these weights: (words, dim)")
    embed.add_argument("--pooled", action="store_true", help="one vector per line: the mean over its words")
    embed.add_argument("--format", choices=["hdf5", "npy"], default="hdf5", help="output layout (default hdf5)")
    embed.add_argument("--pretokenize", action="store_true",
                       help="split lines with the tokenizer's pre-tokenizer instead of on whitespace")
    embed.add_argument("--batch-size", type=int, default=64, help="sentences per batch (default 64)")
    embed.add_argument("--max-words", type=int, default=1000,
                       help="longer lines are run alone in windows of this many positions, the LSTM state carried "
                            "(same result, bounded memory; default 1000)")
    embed.add_argument("--device", default="cpu", help="torch device, e.g. cpu, cuda, cuda:1 (default cpu)")
    embed.add_argument("--dtype", choices=sorted(DTYPES), default="float32",
                       help="compute dtype (default float32); outputs are stored as float32")
    embed.add_argument("--errors", choices=["strict", "replace", "skip"], default="strict",
                       help="a line that is not UTF-8: stop (default), replace bad bytes, or skip the line")
    embed.add_argument("--resume", action="store_true", help="continue a stopped run, keeping the lines it wrote")
    embed.add_argument("--forget-sentences", action="store_true", help="do not write sentence_to_index")
    embed.set_defaults(func=embed_command)

    convert = commands.add_parser("convert", help="convert an original checkpoint (options.json + weights.hdf5)")
    convert.add_argument("--options-file", required=True, help="original options.json (path or http(s) URL)")
    convert.add_argument("--weight-file", required=True, help="original weights.hdf5 (path or http(s) URL)")
    convert.add_argument("--output-dir", required=True, help="folder to write; must not exist or be empty")
    convert.add_argument("--overwrite", action="store_true", help="replace a non-empty output folder")
    convert.add_argument("--push-to-hub", metavar="REPO_ID", help="also upload the folder to this Hub repository")
    convert.add_argument("--private", action="store_true", help="create the Hub repository as private")
    convert.set_defaults(func=convert_command)

    info = commands.add_parser("info", help="print a model's sizes, layers, parameter count and dtype")
    info.add_argument("model", help="model folder or Hub id")
    info.set_defaults(func=info_command)

    # Parsed by hf_elmo.pretraining itself (see main); listed here for `hf-elmo --help`.
    commands.add_parser("pretrain", help="pre-train an ELMo biLM from scratch (hf-elmo pretrain --help)",
                        add_help=False)
    return parser


def pretrain_command(argv: list[str]) -> int:
    from .pretraining import main as pretrain

    try:
        metrics = pretrain(argv)
    except ValueError as error:
        raise CliError(str(error), code=2) from error
    print(json.dumps(metrics, indent=2))
    return 0


def main(argv=None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    try:
        if argv[:1] == ["pretrain"]:
            return pretrain_command(argv[1:])
        args = build_parser().parse_args(argv)
        return args.func(args)
    except CliError as error:
        print(f"hf-elmo: error: {error}", file=sys.stderr)
        return error.code
    except KeyboardInterrupt:
        print("hf-elmo: interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
