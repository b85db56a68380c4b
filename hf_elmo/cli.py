"""The `hf-elmo` command: embed a corpus to disk, convert an original checkpoint, describe a model.

`hf-elmo embed MODEL INPUT OUTPUT` writes, for each line `i` of INPUT (one sentence per line, words separated by
whitespace), the ELMo representation of its words; the `<S>`/`</S>` boundary positions are left out, as in
AllenNLP's `allennlp elmo` command. Shapes per line, for `n` words and `dim = 2 * projection_dim`:

    --all (n_layers + 1, n, dim)    --top, --average, --mix (n, dim)
    with --pooled, the mean over the words: (n_layers + 1, dim) or (dim,); zeros for an empty line

`--format hdf5` (default): one float32 dataset per line named `str(i)`, plus a `sentence_to_index` dataset of shape
`(1,)` holding a JSON string `{stripped line text: str(i)}` (the layout of `allennlp elmo`, so its readers work).
`--format npy`: OUTPUT is a folder with one `{i}.npy` per line and `sentence_to_index.json` holding the same JSON.
Empty lines, and undecodable ones skipped with `--errors skip`, are kept as entries with 0 words. INPUT may be
gzip-compressed if its name ends in `.gz`. Lines are written as the run goes, into `OUTPUT.parts/`, which becomes
OUTPUT at the end, so that OUTPUT is complete or absent; a run that was stopped or killed continues with
`--resume`, skipping the lines already written, if it has the same input file, model and output options.

Under `torchrun` or `accelerate launch` (WORLD_SIZE > 1), each process embeds its share of the lines into the same
`OUTPUT.parts/` (on a filesystem every node sees) and rank 0 assembles OUTPUT once all have finished; `--device cuda`
runs each process on the GPU of its LOCAL_RANK. A resume may use any number of processes.
"""

import argparse
import gzip
import hashlib
import itertools
import json
import os
import shutil
import signal
import socket
import sys
import urllib.parse
import zlib
from collections.abc import Iterator
from datetime import datetime, timedelta
from functools import partial
from pathlib import Path

import numpy as np
import torch

from .configuration_elmo import CPU_MATMULS

# Lines read ahead and sorted by length, so that each batch holds sentences of similar length.
BUCKET_BATCHES = 32
SETTINGS_NAME = "hf_elmo_embed"
DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}


class CliError(Exception):
    """A failure to report as one line on stderr, with exit status `code`; `quiet` when another process reports it."""

    def __init__(self, message: str, code: int = 1, quiet: bool = False):
        super().__init__(message)
        self.code, self.quiet = code, quiet


# -- model ------------------------------------------------------------------------------------------------------------


def load_model(name: str, dtype: torch.dtype | str = "auto", device: str = "cpu", cpu_matmul: str = "auto"):
    """An `ElmoModel` in eval mode and its `ElmoTokenizer` from a local folder, a bundled model's name or a Hub id;
    `cpu_matmul` is the machine setting of `ElmoConfig`, chosen here at load time."""
    from transformers.utils import logging as transformers_logging

    from .bundled import resolve_model_name
    from .modeling_elmo import ElmoModel
    from .tokenization_elmo import ElmoTokenizer

    transformers_logging.disable_progress_bar()
    name = resolve_model_name(name)
    path = Path(name).expanduser()
    offline = False
    if path.is_dir():
        _check_model_folder(path, name)
    elif path.exists():
        raise CliError(f"{name} is a file; the model is a folder (or a Hub id)")
    elif name.startswith((".", "/", "~")) or name.count("/") > 1:
        raise CliError(f"no such model folder: {name}")
    else:
        offline = _offline_without_network()
    try:
        model = ElmoModel.from_pretrained(path if path.is_dir() else name, dtype=dtype, cpu_matmul=cpu_matmul)
        tokenizer = ElmoTokenizer.from_pretrained(path if path.is_dir() else name)
        model = model.to(device).eval()
    except (OSError, ValueError, TypeError, RuntimeError) as error:
        if offline:
            raise CliError(
                f"no such model folder: {name}; as a Hub id it is not in the Hub cache, and the Hub cannot be reached"
            ) from error
        raise CliError(f"cannot load {name} as an hf_elmo model: {_first_line(error)}") from error
    if tokenizer.max_characters_per_token != model.config.max_characters_per_token:  # a folder without tokenizer files
        tokenizer = ElmoTokenizer(model.config.max_characters_per_token, pre_tokenizer=tokenizer.pre_tokenizer)
    return model, tokenizer


def _check_model_folder(path: Path, name: str):
    """A one-line error for a folder that is not an hf_elmo model (checked before `ElmoConfig` reads it)."""
    try:
        model_type = json.loads((path / "config.json").read_text(encoding="utf-8")).get("model_type")
    except FileNotFoundError as error:
        raise CliError(f"{name} is not an hf_elmo model folder (no config.json)") from error
    except (OSError, ValueError, AttributeError) as error:
        raise CliError(f"{name} is not an hf_elmo model folder (config.json: {_first_line(error)})") from error
    if model_type != "elmo":
        raise CliError(f"{name} is not an hf_elmo model folder (model_type {model_type!r})")


def _offline_without_network() -> bool:
    """
    Tries once, for a few seconds at most, to open a connection to the Hub. Without one, switches huggingface_hub
    to offline mode and returns True: a cached model still loads, anything else fails at once instead of after
    half a minute of retries. Behind a proxy, or with `HF_HUB_OFFLINE=1`, nothing is tried.
    """
    from huggingface_hub import constants

    if constants.is_offline_mode() or any(os.environ.get(key) for key in ("HTTPS_PROXY", "https_proxy", "ALL_PROXY")):
        return False
    endpoint = urllib.parse.urlsplit(constants.ENDPOINT)
    try:
        socket.create_connection((endpoint.hostname, endpoint.port or 443), timeout=5).close()
        return False
    except OSError:
        constants.HF_HUB_OFFLINE = True
        return True


def _first_line(error: BaseException) -> str:
    text = str(error).strip()
    return text.splitlines()[0] if text else type(error).__name__


# -- input ------------------------------------------------------------------------------------------------------------

GZIP_MAGIC = b"\x1f\x8b"


def open_input(path: Path):
    """The file's bytes, decompressed when it is named `.gz`; gzip bytes under another name are an error."""
    if path.suffix == ".gz":
        return gzip.open(path, "rb")
    handle = open(path, "rb")
    if handle.read(2) == GZIP_MAGIC:
        handle.close()
        raise CliError(f"{path} holds gzip-compressed bytes; name it with a .gz suffix to read it decompressed")
    handle.seek(0)
    return handle


def read_lines(path: Path, errors: str, shard: tuple[int, int] = (0, 1)) -> Iterator[tuple[int, str | None]]:
    """
    `(index, stripped text)` of each line, streamed; text is None for an undecodable line under `errors="skip"`.
    With `shard=(rank, world_size)`, only the lines `index % world_size == rank` (others are not decoded).
    """
    rank, world_size = shard
    try:
        with open_input(path) as handle:
            for index, raw in enumerate(handle):
                if index % world_size != rank:
                    continue
                try:
                    text = raw.decode("utf-8", "replace" if errors == "replace" else "strict")
                except UnicodeDecodeError as error:
                    if errors == "strict":
                        raise CliError(
                            f"{path} line {index + 1}: not valid UTF-8 ({error.reason} at byte "
                            f"{error.start}); pass --errors replace or --errors skip"
                        ) from error
                    text = None
                yield index, None if text is None else text.strip()
    except (gzip.BadGzipFile, EOFError, zlib.error) as error:
        raise CliError(f"{path}: not a complete gzip file ({_first_line(error)})") from error


def count_lines(path: Path, shard: tuple[int, int] = (0, 1)) -> int:
    return sum(1 for _ in read_lines(path, "replace", shard))


def run_identity(input_path: Path, model_name: str, model, options: dict) -> dict:
    """What a resumed run must share with the run it continues: the input file (path, size, modification time), the
    model (folder or Hub id, and hashes of its config and weights) and every option that changes what is written."""
    stat = input_path.stat()
    config = {
        k: v
        for k, v in model.config.to_dict().items()
        if not k.startswith("_") and k not in ("transformers_version", "dtype")
    }
    weights = hashlib.sha256()
    for name, tensor in sorted(model.state_dict().items()):
        weights.update(name.encode())
        weights.update(tensor.detach().cpu().contiguous().reshape(-1).view(torch.uint8).numpy().tobytes())
    return {
        "input file": f"{input_path.resolve()} ({stat.st_size:,} bytes, modified "
        f"{datetime.fromtimestamp(stat.st_mtime).isoformat(timespec='microseconds')})",
        "model": str(Path(model_name).expanduser().resolve())
        if Path(model_name).expanduser().is_dir()
        else model_name,
        "model config": hashlib.sha256(json.dumps(config, sort_keys=True).encode()).hexdigest()[:16],
        "model weights": weights.hexdigest()[:16],
        **options,
    }


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
    word_inputs = {"word_input_ids": encoding["word_input_ids"].to(device)} if "word_input_ids" in encoding else {}
    output = model(
        encoding["input_ids"].to(device),
        attention_mask=encoding["attention_mask"].to(device),
        output_hidden_states=True,
        **word_inputs,
    )
    stacked = torch.stack(output.hidden_states, dim=1).float().cpu()
    return [stacked[row, :, 1 : len(words) + 1] for row, words in enumerate(sentences)]


@torch.no_grad()
def embed_long(model, tokenizer, words: list[str], window: int) -> torch.Tensor:
    """Like `embed_batch` for one sentence, computed `window` positions at a time with the LSTM state carried."""
    encoding = tokenizer([words], is_split_into_words=True, return_tensors="pt")
    word_input_ids = encoding["word_input_ids"][0].to(model.device) if "word_input_ids" in encoding else None
    layers = model.windowed_hidden_states(encoding["input_ids"][0].to(model.device), window, word_input_ids)
    return torch.stack(layers).float().cpu()[:, 1:-1]


# -- outputs ----------------------------------------------------------------------------------------------------------


class PartsOutput:
    """
    A run writes into `OUTPUT.parts/`: its identity (`run_identity`) in `hf_elmo_embed.json`, then finished lines,
    each file written whole (temporary name, then renamed). `finish` builds OUTPUT from the parts in one rename, so
    OUTPUT is complete or absent; a stopped run resumes from the parts, and only the run it continues may do so.
    """

    def __init__(self, path: Path, identity: dict, resume: bool, attach: bool = False):
        self.path, self.parts = path, path.with_name(path.name + ".parts")
        self.state_file = self.parts / f"{SETTINGS_NAME}.json"
        if attach:  # rank > 0: rank 0 has checked and made the folder; this process checks it runs the same job
            if not self.state_file.is_file():
                raise CliError(
                    f"{self.parts} is not visible to this process; with several nodes, write the output "
                    f"to a filesystem that all of them share"
                )
            _check_identity(self.state_file, identity, self.parts)
            self.finished = self.finished_lines()
            return
        if path.exists():
            raise CliError(f"{path} exists" + (" and is complete" if resume else "") + "; remove it to write it again")
        if self.parts.exists() and not resume:
            raise CliError(f"{self.parts} holds an unfinished run; pass --resume to continue it, or remove it")
        if self.parts.exists():
            _check_identity(self.state_file, identity, self.parts)
        try:
            self.parts.mkdir(parents=True, exist_ok=True)
            _write_whole(self.state_file, lambda handle: handle.write(json.dumps(identity, indent=1).encode()))
        except OSError as error:
            raise CliError(f"cannot write to {self.parts}: {error.strerror or error}") from error
        self.finished = self.finished_lines()

    def finished_lines(self) -> set[str]:
        raise NotImplementedError

    def discard_if_empty(self) -> bool:
        """Removes `OUTPUT.parts/` when it holds no finished line (a run that wrote nothing leaves nothing)."""
        if self.parts.is_dir() and not self.finished_lines():
            shutil.rmtree(self.parts, ignore_errors=True)
            return True
        return False


class Hdf5Output(PartsOutput):
    """
    One `.npz` per finished batch in `OUTPUT.parts/`; `finish` assembles OUTPUT from them under a temporary name. A
    failed write cannot leave a broken HDF5 file behind (HDF5 files do not survive one).
    """

    def __init__(self, path: Path, identity: dict, resume: bool, attach: bool = False):
        try:
            import h5py  # noqa: F401
        except ImportError as error:
            raise CliError("HDF5 output needs h5py: pip install h5py (or use --format npy)") from error
        super().__init__(path, identity, resume, attach)
        self.batch = {}

    def finished_lines(self) -> set[str]:
        finished = set()
        for part in self.parts.glob("*.npz"):
            with np.load(part) as arrays:
                finished.update(arrays.files)
        return finished

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
            raise CliError(
                f"{self.path.parent} has {free:,} bytes free, assembling {self.path} needs about "
                f"{needed:,}; free some space and rerun with --resume"
            )
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


class NpyOutput(PartsOutput):
    """One `{index}.npy` per finished line in `OUTPUT.parts/`; `finish` adds `sentence_to_index.json`, drops the run
    state and renames the folder to OUTPUT."""

    def finished_lines(self) -> set[str]:
        return {p.stem for p in self.parts.glob("*.npy") if p.stem.isdigit()}

    def write(self, index: int, array: np.ndarray):
        _write_whole(self.parts / f"{index}.npy", lambda handle: np.save(handle, array.astype(np.float32)))

    def commit(self):
        pass

    def finish(self, sentence_to_index: dict[str, str] | None):
        if sentence_to_index is not None:
            text = json.dumps(sentence_to_index).encode()
            _write_whole(self.parts / "sentence_to_index.json", lambda handle: handle.write(text))
        self.state_file.unlink()
        os.replace(self.parts, self.path)


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


def _check_identity(state_file: Path, identity: dict, parts: Path):
    """Refuses to resume a run that was started with another input, model or output option, changing nothing."""
    try:
        stored = json.loads(state_file.read_text())
    except (OSError, ValueError):
        stored = {}
    differ = [key for key in identity if stored.get(key) != identity[key]]
    if differ:
        details = "; ".join(f"{key}: was {stored.get(key, 'not recorded')}, now {identity[key]}" for key in differ)
        raise CliError(
            f"cannot resume {parts}: it holds a run with another {', '.join(differ)} ({details}); "
            f"rerun it as it was started, or remove {parts} to start over"
        )


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

    def check(self, parts: Path, done: int):
        if self.signal is not None:
            raise CliError(
                f"stopped by signal {self.signal} after {done} lines; the finished lines are in {parts}/, "
                f"rerun with --resume to continue",
                code=128 + self.signal,
            )


# -- several processes ------------------------------------------------------------------------------------------------


class WriteFailure(CliError):
    """A failed write of OUTPUT or its parts: the message says whether finished lines were kept for --resume."""

    @classmethod
    def of(cls, output_path: Path, error: BaseException) -> "WriteFailure":
        return cls(f"cannot write {output_path}: {getattr(error, 'strerror', None) or _first_line(error)}")


class Processes:
    """
    The processes of a `torchrun` / `accelerate launch` job, from the launcher's WORLD_SIZE, RANK and LOCAL_RANK (one
    process of rank 0 without a launcher). They exchange only short messages, over gloo on the CPU whatever device
    they compute on. Line `i` of the input goes to rank `i % world_size`: a rule of the line index alone, so the
    ranks split the input without talking, each gets a like mix of short and long lines, and a resume with any
    number of processes finds each finished line by its index.
    """

    def __init__(self):
        self.world_size = int(os.environ.get("WORLD_SIZE", "1"))
        self.rank = int(os.environ.get("RANK", "0"))
        self.local_rank = int(os.environ.get("LOCAL_RANK", "0"))
        if self.world_size > 1:
            # A rank waits for the slowest one and for rank 0's assembly, hours on a large corpus: a long timeout.
            # A process that dies is caught by the launcher, which stops the others.
            try:
                torch.distributed.init_process_group("gloo", timeout=timedelta(days=7))
            except (ValueError, RuntimeError) as error:
                raise CliError(
                    f"cannot join the other {self.world_size - 1} processes (WORLD_SIZE is set): "
                    f"{_first_line(error)}; start hf-elmo with torchrun or accelerate launch"
                ) from error

    @property
    def shard(self) -> tuple[int, int]:
        return self.rank, self.world_size

    def device(self, name: str) -> str:
        """`cuda` is the GPU of this process's LOCAL_RANK when several processes run; other names are kept."""
        return f"cuda:{self.local_rank}" if name == "cuda" and self.world_size > 1 else name

    def together(self, work=None):
        """
        Runs `work()` here (nothing if None) and waits for every process; a `CliError` on any of them is raised on all,
        reported by rank 0 alone (prefixed with the rank that failed).
        """
        failure = None
        try:
            result = work() if work else None
        except CliError as error:
            failure = error
        if self.world_size == 1:
            if failure:
                raise failure
            return result
        outcomes = [None] * self.world_size
        torch.distributed.all_gather_object(
            outcomes, failure and (str(failure), failure.code, isinstance(failure, WriteFailure))
        )
        for rank, outcome in enumerate(outcomes):
            if outcome is not None:
                message, code, write_failure = outcome
                raise (WriteFailure if write_failure else CliError)(
                    f"rank {rank}: {message}", code if failure else 1, quiet=self.rank > 0
                ) from failure
        return result

    def close(self):
        if torch.distributed.is_initialized():
            torch.distributed.destroy_process_group()


# -- commands ---------------------------------------------------------------------------------------------------------


def embed_command(args) -> int:
    processes = Processes()
    try:
        return _embed(args, processes)
    finally:
        processes.close()


def _embed(args, processes: Processes) -> int:
    """Every process embeds its shard of the input into OUTPUT.parts/; rank 0 makes the folder and assembles OUTPUT."""
    input_path, output_path = Path(args.input), Path(args.output)

    def prepare():
        if not input_path.is_file():
            raise CliError(f"no such input file: {input_path}")
        if args.batch_size < 1 or args.max_words < 1:
            raise CliError("--batch-size and --max-words must be at least 1")
        device = processes.device(args.device)
        check_device(device)
        model, tokenizer = load_model(args.model, DTYPES[args.dtype], device, args.cpu_matmul)
        choice = (
            "all" if args.all else "top" if args.top else "average" if args.average else _mix_weights(args.mix, model)
        )
        options = {
            "layers": choice,
            "pooled": args.pooled,
            "pretokenize": args.pretokenize,
            "dtype": args.dtype,
            "cpu_matmul": args.cpu_matmul,  # changes the vectors ("int8"), and is not in the model config
            "errors": args.errors,
            "sentence_to_index": not args.forget_sentences,
        }
        return model, tokenizer, choice, run_identity(input_path, args.model, model, options)

    model, tokenizer, choice, identity = processes.together(prepare)
    split = tokenizer.split_words if args.pretokenize else str.split
    total = count_lines(input_path) if processes.rank == 0 else None
    own_lines = total if processes.world_size == 1 else count_lines(input_path, processes.shard)
    make_output = partial(Hdf5Output if args.format == "hdf5" else NpyOutput, output_path, identity, args.resume)
    output = processes.together(make_output if processes.rank == 0 else None)

    def embed_shard():
        try:
            with DeferredStop() as stop:
                _embed_lines(args, model, tokenizer, split, choice, output, stop, processes.shard, own_lines)
        except (OSError, RuntimeError) as error:
            raise WriteFailure.of(output_path, error) from error

    def assemble():
        sentence_to_index, skipped = {}, []
        for index, text in read_lines(input_path, args.errors):
            if text is None:
                skipped.append(index + 1)
            else:
                sentence_to_index[text] = str(index)
        try:
            output.finish(None if args.forget_sentences else sentence_to_index)
        except (OSError, RuntimeError) as error:
            raise WriteFailure.of(output_path, error) from error
        return skipped

    try:
        # The other ranks read the finished lines before rank 0 writes any new one.
        output = processes.together(partial(make_output, attach=True) if processes.rank > 0 else None) or output
        if output.finished and processes.rank == 0:
            print(f"hf-elmo: resuming: {len(output.finished)} of {total} lines are already written", file=sys.stderr)
        processes.together(embed_shard)
        skipped = processes.together(assemble if processes.rank == 0 else None)
    except WriteFailure as error:
        kept = (
            "nothing was written"
            if processes.rank == 0 and output.discard_if_empty()
            else f"the finished lines are kept in {output.parts}/, rerun with --resume once fixed"
        )
        raise CliError(f"{error}; {kept}", error.code, error.quiet) from error
    except CliError:
        if processes.rank == 0:
            output.discard_if_empty()
        raise
    if processes.rank > 0:
        return 0
    summary = f"wrote {total} lines to {output_path}"
    if processes.world_size > 1:
        summary += f" from {processes.world_size} processes"
    if skipped:
        summary += (
            f" ({len(skipped)} not valid UTF-8, skipped: written as entries of 0 words"
            + ("" if args.verbose else "; --verbose lists their line numbers")
            + ")"
        )
    print(summary, file=sys.stderr)
    if args.verbose and skipped:
        print(f"skipped lines: {' '.join(map(str, skipped))}", file=sys.stderr)
    return 0


def check_device(device: str):
    """A one-line error for a device this machine cannot use, before any model is loaded."""
    try:
        kind = torch.device(device).type
    except RuntimeError as error:
        raise CliError(f"--device {device}: not a torch device; use e.g. cpu, cuda, cuda:1 or mps") from error
    if kind == "cuda" and not torch.cuda.is_available():
        raise CliError(f"--device {device}: CUDA is not available here")
    if kind == "cuda" and (torch.device(device).index or 0) >= torch.cuda.device_count():
        raise CliError(f"--device {device}: this machine has {torch.cuda.device_count()} CUDA device(s)")
    if kind == "mps" and not torch.backends.mps.is_available():
        raise CliError(f"--device {device}: MPS (Apple GPUs) is not available here")
    if kind not in ("cpu", "cuda", "mps"):
        raise CliError(f"--device {device}: hf-elmo runs on cpu, cuda or mps")


def _mix_weights(text: str, model) -> list[float]:
    try:
        weights = [float(w) for w in text.split(",")]
    except ValueError as error:
        raise CliError(f"--mix takes comma-separated numbers, got {text!r}") from error
    if len(weights) != model.config.num_representation_layers:
        raise CliError(
            f"--mix needs {model.config.num_representation_layers} weights (one per layer), got {len(weights)}"
        )
    return weights


def _embed_lines(
    args, model, tokenizer, split, choice, output, stop: DeferredStop, shard: tuple[int, int], total: int
):
    """
    Embeds every unfinished line of `shard` (`(rank, world_size)`, see `Processes`; `total` lines), a length-sorted
    batch at a time, writing and flushing after each batch. Rank 0 shows its progress.
    """
    from tqdm.auto import tqdm

    rank, world_size = shard
    lines = read_lines(Path(args.input), args.errors, shard)
    done = sum(1 for index in output.finished if int(index) % world_size == rank)
    with tqdm(
        total=total, initial=done, unit="sent", desc="embedding", file=sys.stderr, mininterval=1.0, disable=rank > 0
    ) as bar:
        while chunk := list(itertools.islice(lines, args.batch_size * BUCKET_BATCHES)):
            # An undecodable line skipped under --errors skip is written as an entry of 0 words, like an empty line.
            pending = [
                (index, [] if text is None else split(text))
                for index, text in chunk
                if str(index) not in output.finished
            ]
            short = sorted((p for p in pending if len(p[1]) <= args.max_words), key=lambda p: len(p[1]))
            groups = [short[i : i + args.batch_size] for i in range(0, len(short), args.batch_size)]
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
                stop.check(output.parts, done)


def convert_command(args) -> int:
    from transformers.utils import logging as transformers_logging

    from .conversion import ElmoConversionError, convert, push_to_hub

    needed = ["--model-dir"] if args.format == "elmoformanylangs" else ["--options-file", "--weight-file"]
    missing = [flag for flag in needed if getattr(args, flag[2:].replace("-", "_")) is None]
    if missing:
        raise CliError(f"convert --format {args.format} needs {' and '.join(missing)}", code=2)
    transformers_logging.disable_progress_bar()  # a bar for writing one small shard is noise
    try:
        if args.format == "elmoformanylangs":
            from .conversion_elmoformanylangs import convert_elmoformanylangs

            output = convert_elmoformanylangs(args.model_dir, args.output_dir, overwrite=args.overwrite)
        else:
            output = convert(args.options_file, args.weight_file, args.output_dir, overwrite=args.overwrite)
    except ElmoConversionError as error:
        raise CliError(str(error)) from error
    print(f"wrote {output}")
    if args.push_to_hub:
        retry = f"upload it with: hf upload {args.push_to_hub} {output}" + (" --private" if args.private else "")
        if _offline_without_network():
            raise CliError(
                f"{output} was written, but the upload to {args.push_to_hub} failed: the Hub cannot be "
                f"reached; {retry}"
            )
        try:
            commit = push_to_hub(output, args.push_to_hub, private=args.private)
        except Exception as error:  # noqa: BLE001  whatever failed (network, auth, HTTP client), the folder stands
            raise CliError(
                f"{output} was written, but the upload to {args.push_to_hub} failed: {_first_line(error)}; {retry}"
            ) from error
        print(f"uploaded to {args.push_to_hub}: {commit}")
    return 0


def export_command(args) -> int:
    from transformers.utils import logging as transformers_logging

    from .conversion import ElmoConversionError, export

    transformers_logging.disable_progress_bar()  # a bar for loading a few tensors is noise

    if Path(args.model_dir).is_dir():
        _check_model_folder(Path(args.model_dir), args.model_dir)
    try:
        if args.format == "onnx":
            from .onnx_elmo import ONNX_FILE, export_onnx

            output = export_onnx(args.model_dir, args.output_dir, overwrite=args.overwrite)
            print(f"wrote {output}/{ONNX_FILE} with its config and tokenizer files")
            return 0
        output = export(args.model_dir, args.output_dir, overwrite=args.overwrite)
    except ElmoConversionError as error:
        raise CliError(str(error)) from error
    print(f"wrote {output}/options.json and {output}/weights.hdf5")
    return 0


def info_command(args) -> int:
    model, _ = load_model(args.model)
    config = model.config
    rows = {
        "model": args.model,
        "dtype": str(model.dtype).removeprefix("torch."),
        "parameters": f"{model.num_parameters():,}",
        "representation layers": f"{config.num_representation_layers} (token layer + {config.n_layers} LSTM layers)",
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


def build_parser(progs: dict[str, str] | None = None) -> argparse.ArgumentParser:
    """The `hf-elmo` parser; `progs` renames subcommands run as standalone scripts (`{"convert": "convert.py"}`)."""
    parser = argparse.ArgumentParser(prog="hf-elmo", description="ELMo models for Hugging Face transformers.")
    commands = parser.add_subparsers(dest="command", required=True)
    progs = progs or {}

    embed = commands.add_parser(
        "embed",
        prog=progs.get("embed"),
        help="embed a text file, one sentence per line, to HDF5 or .npy files",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    embed.add_argument("model", help="model folder, bundled model (ko-nsmc) or Hub id")
    embed.add_argument("input", help="text file, UTF-8, one sentence per line (.gz: gzip-compressed)")
    embed.add_argument("output", help="HDF5 file to write (a folder with --format npy)")
    layers = embed.add_mutually_exclusive_group(required=True)
    layers.add_argument("--all", action="store_true", help="all layers: (n_layers + 1, words, dim)")
    layers.add_argument("--top", action="store_true", help="the top layer: (words, dim)")
    layers.add_argument("--average", action="store_true", help="the mean of all layers: (words, dim)")
    layers.add_argument("--mix", metavar="W0,W1,...", help="the sum of the layers times these weights: (words, dim)")
    embed.add_argument("--pooled", action="store_true", help="one vector per line: the mean over its words")
    embed.add_argument("--format", choices=["hdf5", "npy"], default="hdf5", help="output layout (default hdf5)")
    embed.add_argument(
        "--pretokenize",
        action="store_true",
        help="split lines with the tokenizer's pre-tokenizer instead of on whitespace",
    )
    embed.add_argument("--batch-size", type=int, default=64, help="sentences per batch (default 64)")
    embed.add_argument(
        "--max-words",
        type=int,
        default=1000,
        help="longer lines are run alone in windows of this many positions, the LSTM state carried "
        "(same result, bounded memory; default 1000)",
    )
    embed.add_argument("--device", default="cpu", help="torch device, e.g. cpu, cuda, cuda:1 (default cpu)")
    embed.add_argument(
        "--dtype",
        choices=sorted(DTYPES),
        default="float32",
        help="compute dtype (default float32); outputs are stored as float32",
    )
    embed.add_argument(
        "--cpu-matmul",
        choices=CPU_MATMULS,
        default="auto",
        help="library of the CPU products (config.cpu_matmul; default auto: the fastest measured here); "
        "int8 is faster at small batches and changes the vectors slightly",
    )
    embed.add_argument(
        "--errors",
        choices=["strict", "replace", "skip"],
        default="strict",
        help="a line that is not UTF-8: stop (default), replace bad bytes, or skip it (0 words)",
    )
    embed.add_argument("--resume", action="store_true", help="continue a stopped run, keeping the lines it wrote")
    embed.add_argument("--forget-sentences", action="store_true", help="do not write sentence_to_index")
    embed.add_argument("--verbose", action="store_true", help="list the line numbers of skipped lines")
    embed.set_defaults(func=embed_command)

    convert = commands.add_parser(
        "convert",
        prog=progs.get("convert"),
        help="convert an original checkpoint (options.json + weights.hdf5) or an ELMoForManyLangs model",
    )
    convert.add_argument(
        "--format",
        choices=["original", "elmoformanylangs"],
        default="original",
        help="bilm-tf/AllenNLP files (default) or an ELMoForManyLangs release (folder or .zip)",
    )
    convert.add_argument("--options-file", help="original options.json (path or http(s) URL)")
    convert.add_argument("--weight-file", help="original weights.hdf5 (path or http(s) URL)")
    convert.add_argument("--model-dir", help="with --format elmoformanylangs: the unpacked release folder or its .zip")
    convert.add_argument("--output-dir", required=True, help="folder to write; must not exist or be empty")
    convert.add_argument("--overwrite", action="store_true", help="replace a non-empty output folder")
    convert.add_argument("--push-to-hub", metavar="REPO_ID", help="also upload the folder to this Hub repository")
    convert.add_argument("--private", action="store_true", help="create the Hub repository as private")
    convert.set_defaults(func=convert_command)

    export = commands.add_parser(
        "export",
        prog=progs.get("export"),
        help="export a model folder to the original layout (options.json + weights.hdf5) or to ONNX",
    )
    export.add_argument(
        "--format",
        choices=["original", "onnx"],
        default="original",
        help="bilm-tf/AllenNLP files (default) or model.onnx for ONNX Runtime, any batch size and sentence length, "
        "beside the config and tokenizer files (needs the onnx extra)",
    )
    export.add_argument("--model-dir", required=True, help="an hf_elmo model folder")
    export.add_argument("--output-dir", required=True, help="folder to write; must not exist or be empty")
    export.add_argument("--overwrite", action="store_true", help="replace a non-empty output folder")
    export.set_defaults(func=export_command)

    info = commands.add_parser(
        "info", prog=progs.get("info"), help="print a model's sizes, layers, parameter count and dtype"
    )
    info.add_argument("model", help="model folder or Hub id")
    info.set_defaults(func=info_command)

    # Parsed by hf_elmo.pretraining itself (see main); listed here for `hf-elmo --help`.
    commands.add_parser(
        "pretrain", help="pre-train an ELMo biLM from scratch (hf-elmo pretrain --help)", add_help=False
    )
    return parser


def pretrain_command(argv: list[str]) -> int:
    try:
        from .pretraining import main as pretrain
    except ImportError as error:  # its module imports the Trainer
        raise CliError('pre-training needs the training extra: pip install "hf_elmo[training]"', code=2) from error

    try:
        metrics = pretrain(argv)
    except (ValueError, ImportError) as error:
        raise CliError(_first_line(error), code=2) from error
    print(json.dumps(metrics, indent=2))
    return 0


def main(argv=None, prog: str = "hf-elmo") -> int:
    """Runs `hf-elmo ARGV`; a standalone script running one subcommand passes its own name as `prog`."""
    argv = sys.argv[1:] if argv is None else list(argv)
    try:
        if argv[:1] == ["pretrain"]:
            return pretrain_command(argv[1:])
        args = build_parser({argv[0]: prog} if argv and prog != "hf-elmo" else None).parse_args(argv)
        return args.func(args)
    except CliError as error:
        if not error.quiet:
            print(f"{prog}: error: {error}", file=sys.stderr)
        return error.code
    except KeyboardInterrupt:
        print(f"{prog}: interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
