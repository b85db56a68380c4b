"""The `hf-elmo embed` job: input lines to per-line vectors in HDF5 or `.npy` files.

`embed_file` runs it: each process of the job (`JobProcess`) embeds its shard of the input, a length-sorted batch at
a time (`batch_lines`, `embed_batch`, `embed_long`, `select_layers`), into `OUTPUT.parts/` (`Hdf5Output`,
`NpyOutput`), stopping within moments on Ctrl-C or SIGTERM, never in the middle of a write (`DeferredStop`); rank 0
then assembles OUTPUT. A run is identified by its input, model and output options (`run_identity`), only the run it
continues may resume from the parts, each of which is checked before the run goes on (`check_part`: a damaged one is
removed and its lines embedded again), and one run at a time writes OUTPUT (`folders.lock_output`).
The layouts and shapes are described in `hf_elmo/command_line.py` (`hf-elmo embed --help`), which parses the
arguments; the `embed` command of `hf_elmo/cli.py` calls `embed_file`.
"""

import contextlib
import hashlib
import io
import itertools
import json
import math
import os
import shutil
import signal
import sys
import zipfile
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from datetime import datetime, timedelta
from functools import partial
from pathlib import Path

import numpy as np
import torch

from .errors import CommandError, ElmoConversionError, FileContentError, JsonFields, first_line
from .folders import create_exclusively, lock_output, refuse_link
from .text_files import LineTooLong, TextFileError, UndecodableLine, count_lines, read_lines

# Lines read ahead and sorted by length, so that each batch holds sentences of similar length.
BUCKET_BATCHES = 32
SETTINGS_NAME = "hf_elmo_embed"


# -- run identity -----------------------------------------------------------------------------------------------------


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
    """`layers` `(n_layers + 1, words, dim)` -> the float32 array to store for one line (shapes: `embed --help`)."""
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
    Rank 0 takes the lock of OUTPUT (`folders.lock_output`) and holds it until `release`, so that a second run on the
    same output stops at once instead of redoing the work, then checks and makes the folder; each other rank opens it
    with `joins_rank_zero`.
    """

    # What ends the name of a part: `{first line}.npz` (HDF5) or `{line}.npy`.
    PART_SUFFIX = ""

    def __init__(self, path: Path, identity: dict, resume: bool, joins_rank_zero: bool = False):
        self.path, self.parts = path, path.with_name(path.name + ".parts")
        self.state_file = self.parts / f"{SETTINGS_NAME}.json"
        # The file beside OUTPUT that `finish` assembles it in before renaming it (HDF5).
        self.staging_file = path.with_name(f".{path.name}.partial")
        self.lock = None
        if joins_rank_zero:  # rank > 0: rank 0 has checked and made the folder; this one checks its job is the same
            if not self.state_file.is_file():
                raise CommandError(
                    f"{self.parts} is not visible to this process; with several nodes, write the output "
                    f"to a filesystem that all of them share"
                )
            _check_identity(self.state_file, identity, self.parts)
            self.finished = self.finished_lines()
            return
        try:
            self._lock()
            if path.exists():
                raise CommandError(
                    f"{path} exists" + (" and is complete" if resume else "") + "; remove it to write it again"
                )
            if self.parts.exists():
                if not resume:
                    raise CommandError(
                        f"{self.parts} holds an unfinished run; pass --resume to continue it, or remove it"
                    )
                _check_identity(self.state_file, identity, self.parts)
                self.remove_damaged_parts()
            try:
                self.parts.mkdir(parents=True, exist_ok=True)
                _write_whole(self.state_file, lambda handle: handle.write(json.dumps(identity, indent=1).encode()))
            except OSError as error:
                raise CommandError(f"cannot write to {self.parts}: {error.strerror or error}") from error
            self.finished = self.finished_lines()
        except BaseException:
            self.release()
            raise

    def _lock(self):
        """Takes the lock of OUTPUT; a one-line error where another run holds it, the filesystem cannot lock, or a
        link stands where the lock file, `OUTPUT.parts/` or the staging file would be (`folders.LinkRefused`), before
        any line is embedded."""
        try:
            self.lock = lock_output(self.path)
            refuse_link(self.parts, "parts folder")
            refuse_link(self.staging_file, "staging file")
        except ElmoConversionError as error:
            raise CommandError(str(error)) from error

    def remove_damaged_parts(self):
        """
        Checks every part of a run to resume (`check_part`) before any line is embedded: a damaged one (cut short,
        holding another kind of data) is removed, said so on stderr, and its lines are embedded again.
        """
        for part in sorted(self.parts.glob(f"*{self.PART_SUFFIX}")):
            try:
                check_part(part)
            except FileContentError as error:
                part.unlink()
                print(f"hf-elmo: {error}: removed, its lines are embedded again", file=sys.stderr)

    def release(self):
        """Drops the lock of OUTPUT (the end of the process drops it too)."""
        if self.lock is not None:
            self.lock.release()
            self.lock = None

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

    PART_SUFFIX = ".npz"

    def __init__(self, path: Path, identity: dict, resume: bool, joins_rank_zero: bool = False):
        try:
            import h5py  # noqa: F401
        except ImportError as error:
            raise CommandError("HDF5 output needs h5py: pip install h5py (or use --format npy)") from error
        super().__init__(path, identity, resume, joins_rank_zero)
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
            raise CommandError(
                f"{self.path.parent} has {free:,} bytes free, assembling {self.path} needs about "
                f"{needed:,}; free some space and rerun with --resume"
            )
        file = create_exclusively(self.staging_file)  # a link found there stays, unfollowed
        try:
            with file, h5py.File(file, "w") as handle:
                for part in sorted(self.parts.glob("*.npz"), key=lambda p: int(p.stem)):
                    with np.load(part) as arrays:
                        for name in arrays.files:
                            handle.create_dataset(name, data=arrays[name], dtype="float32")
                if sentence_to_index is not None:
                    dataset = handle.create_dataset("sentence_to_index", (1,), dtype=h5py.string_dtype())
                    dataset[0] = json.dumps(sentence_to_index)
            os.replace(self.staging_file, self.path)
        except BaseException:
            self.staging_file.unlink(missing_ok=True)
            raise
        shutil.rmtree(self.parts)


class NpyOutput(PartsOutput):
    """One `{index}.npy` per finished line in `OUTPUT.parts/`; `finish` adds `sentence_to_index.json`, drops the run
    state and renames the folder to OUTPUT."""

    PART_SUFFIX = ".npy"

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
    """
    Calls `write(buffer)` on an in-memory buffer, writes its bytes to a temporary file beside `path`, made new
    (`folders.create_exclusively`: never through a link), and renames it to `path` once complete. The file is
    written by its own `write`, which names the cause of a failure (a full disk), where numpy writing an array to a
    file would say only "N requested and M written".
    """
    buffer = io.BytesIO()
    write(buffer)
    partial = path.with_name(f".{path.name}.partial")
    handle = create_exclusively(partial)  # a link found there stays, unfollowed
    try:
        with handle:
            handle.write(buffer.getbuffer())
        os.replace(partial, path)
    except BaseException:
        partial.unlink(missing_ok=True)
        raise


def check_part(path: Path) -> None:
    """
    A `FileContentError` naming the part `path` of `OUTPUT.parts/` where it is not as the run wrote it: a `.npy`
    file, or a `.npz` archive of them stored uncompressed (as `np.savez` writes it), each named after its line and
    holding float32 values of one to three dimensions in exactly as many bytes as its header says (a pickled object
    is refused unread), and an archive whose every byte reads back with its checksum (`ZipFile.testzip`). Reads no
    more than the part holds: the sizes come from the file, never from a header alone.
    """
    problem = f"{path} is damaged"
    try:
        if path.suffix == ".npy":
            with open(path, "rb") as handle:
                _check_array(handle, os.fstat(handle.fileno()).st_size, path.stem, problem)
            return
        with zipfile.ZipFile(path) as archive:
            for member in archive.infolist():
                stem = member.filename.removesuffix(".npy")
                if member.filename == stem:
                    raise FileContentError(f"{problem} (it holds {member.filename!r}, not one line's array)")
                if member.compress_type != zipfile.ZIP_STORED:
                    raise FileContentError(f"{problem} ({member.filename} is compressed, as embed never writes it)")
                with archive.open(member) as handle:
                    _check_array(handle, member.file_size, stem, problem)
            if (bad := archive.testzip()) is not None:
                raise FileContentError(f"{problem} ({bad} does not match its checksum)")
    except (OSError, EOFError, zipfile.BadZipFile, zipfile.LargeZipFile) as error:
        raise FileContentError(f"{problem} ({first_line(error)})") from error


def _check_array(handle, size: int, stem: str, problem: str) -> None:
    """Checks the `.npy` bytes `handle` reads (`size` of them) for `check_part`: named after a line, float32, one to
    three dimensions, and as many bytes as its header says."""
    try:
        version = np.lib.format.read_magic(handle)
        read_header = np.lib.format.read_array_header_1_0 if version == (1, 0) else np.lib.format.read_array_header_2_0
        shape, _, dtype = read_header(handle)
    except ValueError as error:  # not a .npy header
        raise FileContentError(f"{problem} ({first_line(error)})") from error
    if not stem.isdigit() or dtype != np.float32 or not 1 <= len(shape) <= 3:
        raise FileContentError(f"{problem} (line {stem!r}: {dtype} values of shape {shape}, not float32 ones)")
    if handle.tell() + 4 * math.prod(shape) != size:
        raise FileContentError(f"{problem} (line {stem}: its header says {shape}, its bytes are {size:,})")


def _check_identity(state_file: Path, identity: dict, parts: Path):
    """Refuses to resume a run that was started with another input, model or output option, changing nothing."""
    stored, fix = {}, f"remove {parts} to start over"
    if state_file.exists():
        try:
            stored = JsonFields.of_file(state_file, fix).data
        except FileContentError as error:
            raise CommandError(f"cannot resume {parts}: {error}") from error
    differ = [key for key in identity if stored.get(key) != identity[key]]
    if differ:
        details = "; ".join(f"{key}: was {stored.get(key, 'not recorded')}, now {identity[key]}" for key in differ)
        raise CommandError(
            f"cannot resume {parts}: it holds a run with another {', '.join(differ)} ({details}); "
            f"rerun it as it was started, or remove {parts} to start over"
        )


class DeferredStop:
    """
    SIGINT and SIGTERM stop the run within moments, as a `CommandError` naming the parts folder and the `done` lines:
    at once while a batch is computed (the batch is dropped; none of it was written), however long the batch, and
    right after the write while one is written (`writing`), so that a stopped run never leaves a half-written file.
    """

    def __init__(self, parts: Path, done: int = 0):
        self.parts, self.done, self.signal, self.in_write = parts, done, None, False

    def __enter__(self):
        self.previous = {sig: signal.signal(sig, self._record) for sig in (signal.SIGINT, signal.SIGTERM)}
        return self

    def _record(self, signum, frame):
        self.signal = signum
        if not self.in_write:
            raise self.stopped()

    def __exit__(self, *exc):
        for sig, handler in self.previous.items():
            signal.signal(sig, handler)

    @contextlib.contextmanager
    def writing(self):
        """A write that a signal does not cut: the stop comes once the block is over."""
        self.in_write = True
        try:
            yield
        finally:
            self.in_write = False
        if self.signal is not None:
            raise self.stopped()

    def stopped(self) -> CommandError:
        return CommandError(
            f"stopped by signal {self.signal} after {self.done} lines; the finished lines are in {self.parts}/, "
            f"rerun with --resume to continue",
            code=128 + self.signal,
        )


# -- several processes ------------------------------------------------------------------------------------------------


class WriteFailure(CommandError):
    """A failed write of OUTPUT or its parts: the message says whether finished lines were kept for --resume."""

    @classmethod
    def of(cls, output_path: Path, error: BaseException) -> "WriteFailure":
        return cls(f"cannot write {output_path}: {getattr(error, 'strerror', None) or first_line(error)}")


class JobProcess:
    """
    This process of a `torchrun` / `accelerate launch` job: its rank among the job's processes, from the launcher's
    WORLD_SIZE, RANK and LOCAL_RANK (the one process, of rank 0, without a launcher). The processes exchange only
    short messages, over gloo on the CPU whatever device they compute on. Line `i` of the input goes to rank
    `i % world_size`: a rule of the line index alone, so the ranks split the input without talking, each gets a like
    mix of short and long lines, and a resume with any number of processes finds each finished line by its index.
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
                raise CommandError(
                    f"cannot join the other {self.world_size - 1} processes (WORLD_SIZE is set): "
                    f"{first_line(error)}; start hf-elmo with torchrun or accelerate launch"
                ) from error

    @property
    def shard(self) -> tuple[int, int]:
        return self.rank, self.world_size

    def device(self, name: str) -> str:
        """`cuda` is the GPU of this process's LOCAL_RANK when several processes run; other names are kept."""
        return f"cuda:{self.local_rank}" if name == "cuda" and self.world_size > 1 else name

    def run_in_lockstep(self, work=None):
        """
        Runs `work()` here (nothing if None) and waits for every process; a `CommandError` on any of them is raised on
        all, reported by rank 0 alone (prefixed with the rank that failed).
        """
        failure = None
        try:
            result = work() if work else None
        except CommandError as error:
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
                raise (WriteFailure if write_failure else CommandError)(
                    f"rank {rank}: {message}", code if failure else 1, quiet=self.rank > 0
                ) from failure
        return result

    def close(self):
        if torch.distributed.is_initialized():
            torch.distributed.destroy_process_group()


# -- the run ----------------------------------------------------------------------------------------------------------


def input_error(error: TextFileError) -> CommandError:
    """The one-line error for an input file that cannot be read, naming the flag that reads past a bad line."""
    hint = {
        UndecodableLine: "; pass --errors replace or --errors skip",
        LineTooLong: "; split it into sentences, or raise --max-line-length",
    }.get(type(error), "")
    return CommandError(f"{error}{hint}")


@dataclass(frozen=True)
class EmbedSettings:
    """
    How every line is embedded and stored: `split` makes its words, `errors` reads it as `read_lines` does, `layers`
    is "all", "top", "average" or one weight per layer, `pooled` averages over its words (shapes: `embed --help`).
    Lines come `batch_size` at a time; one of more than `max_words` words comes alone, run in windows of as many. An
    input with a line of more than `max_line_length` characters is refused before anything is written.
    """

    split: Callable[[str], list[str]]
    errors: str
    layers: str | list[float]
    pooled: bool
    batch_size: int
    max_words: int
    max_line_length: int


def open_output(
    output_format: str, path: Path, identity: dict, resume: bool, joins_rank_zero: bool = False
) -> Hdf5Output | NpyOutput:
    """The `OUTPUT.parts/` writer of `output_format` ("hdf5" or "npy"); arguments as `PartsOutput`'s."""
    return (Hdf5Output if output_format == "hdf5" else NpyOutput)(path, identity, resume, joins_rank_zero)


def batch_lines(
    lines: Iterator[tuple[int, str | None]],
    split: Callable[[str], list[str]],
    finished: set[str],
    batch_size: int,
    max_words: int,
) -> Iterator[list[tuple[int, list[str]]]]:
    """
    Batches of `(index, words)` of the lines not in `finished`. `BUCKET_BATCHES` batches are read ahead and sorted by
    length; a line of more than `max_words` words comes alone (for `embed_long`).
    """
    while chunk := list(itertools.islice(lines, batch_size * BUCKET_BATCHES)):
        # A line that is not text, skipped under --errors skip, is written as an entry of 0 words, like an empty line.
        pending = [(index, [] if text is None else split(text)) for index, text in chunk if str(index) not in finished]
        short = sorted((line for line in pending if len(line[1]) <= max_words), key=lambda line: len(line[1]))
        yield from (short[start : start + batch_size] for start in range(0, len(short), batch_size))
        yield from ([line] for line in pending if len(line[1]) > max_words)


def embed_shard(
    model,
    tokenizer,
    input_path: Path,
    output: Hdf5Output | NpyOutput,
    settings: EmbedSettings,
    shard: tuple[int, int],
    total: int,
):
    """
    Embeds every unfinished line of `shard` (`(rank, world_size)`, see `JobProcess`; `total` lines), a batch at a
    time, writing and flushing after each batch; SIGINT or SIGTERM stops it within moments (`DeferredStop`). Rank 0
    shows progress.
    """
    from tqdm.auto import tqdm

    rank, world_size = shard
    done = sum(1 for index in output.finished if int(index) % world_size == rank)
    lines = read_lines(input_path, settings.errors, shard)
    try:
        with (
            DeferredStop(output.parts, done) as stop,
            tqdm(
                total=total,
                initial=done,
                unit="sent",
                desc="embedding",
                file=sys.stderr,
                mininterval=1.0,
                disable=rank > 0,
            ) as bar,
        ):
            batches = batch_lines(lines, settings.split, output.finished, settings.batch_size, settings.max_words)
            for batch in batches:
                if len(batch[0][1]) > settings.max_words:
                    results = [embed_long(model, tokenizer, batch[0][1], settings.max_words)]
                else:
                    results = embed_batch(model, tokenizer, [words for _, words in batch])
                arrays = [select_layers(hidden_states, settings.layers, settings.pooled) for hidden_states in results]
                with stop.writing():
                    for (index, _), array in zip(batch, arrays):
                        output.write(index, array)
                    output.commit()
                    bar.update(len(batch))
                    stop.done += len(batch)
    except TextFileError as error:
        raise input_error(error) from error
    except (OSError, RuntimeError, ElmoConversionError) as error:  # the last: a link where a part is made
        raise WriteFailure.of(output.path, error) from error


def assemble(output: Hdf5Output | NpyOutput, input_path: Path, errors: str, sentence_to_index: bool) -> list[int]:
    """Builds OUTPUT from the parts (with `sentence_to_index` unless told not to); returns the skipped line numbers."""
    mapping, skipped = {}, []
    try:
        for index, text in read_lines(input_path, errors):
            if text is None:
                skipped.append(index + 1)
            else:
                mapping[text] = str(index)
    except TextFileError as error:
        raise input_error(error) from error
    try:
        output.finish(mapping if sentence_to_index else None)
    except (OSError, RuntimeError, ElmoConversionError) as error:
        raise WriteFailure.of(output.path, error) from error
    return skipped


def count_input(input_path: Path, process: JobProcess, max_line_length: int) -> tuple[int | None, int]:
    """
    `(lines of the input, lines of this process's shard)`, the first on rank 0 alone, which reads every line: an input
    that cannot be read, or holding a line of more than `max_line_length` characters, is refused before any line is
    written.
    """
    try:
        total = count_lines(input_path, max_characters=max_line_length) if process.rank == 0 else None
        if process.world_size == 1:
            return total, total
        return total, count_lines(input_path, process.shard, max_characters=max_line_length)
    except TextFileError as error:
        raise input_error(error) from error


def embed_file(
    model,
    tokenizer,
    input_path: Path,
    output_path: Path,
    process: JobProcess,
    settings: EmbedSettings,
    *,
    identity: dict,
    output_format: str,
    sentence_to_index: bool,
    resume: bool,
) -> tuple[int, list[int]] | None:
    """
    Embeds every line of `input_path` into `output_path` (`output_format` "hdf5" or "npy", with `sentence_to_index`
    or without): each process its shard into `OUTPUT.parts/`, which rank 0 makes first and assembles into OUTPUT
    last. `identity` is the run's (`run_identity`); with `resume`, a stopped run with the same identity continues.
    Returns, on rank 0, the number of lines and the numbers of those skipped as not text (None on other ranks).
    """
    total, own_lines = process.run_in_lockstep(partial(count_input, input_path, process, settings.max_line_length))
    output = process.run_in_lockstep(
        partial(open_output, output_format, output_path, identity, resume) if process.rank == 0 else None
    )
    try:
        # The other ranks read the finished lines before rank 0 writes any new one.
        open_joined = partial(open_output, output_format, output_path, identity, resume, joins_rank_zero=True)
        output = process.run_in_lockstep(open_joined if process.rank > 0 else None) or output
        if output.finished and process.rank == 0:
            print(f"hf-elmo: resuming: {len(output.finished)} of {total} lines are already written", file=sys.stderr)
        process.run_in_lockstep(
            partial(embed_shard, model, tokenizer, input_path, output, settings, process.shard, own_lines)
        )
        skipped = process.run_in_lockstep(
            partial(assemble, output, input_path, settings.errors, sentence_to_index) if process.rank == 0 else None
        )
    except WriteFailure as error:
        kept = (
            "nothing was written"
            if process.rank == 0 and output.discard_if_empty()
            else f"the finished lines are kept in {output.parts}/, rerun with --resume once fixed"
        )
        raise CommandError(f"{error}; {kept}", error.code, error.quiet) from error
    except CommandError:
        if process.rank == 0:
            output.discard_if_empty()
        raise
    finally:
        if output is not None:
            output.release()
    return (total, skipped) if process.rank == 0 else None
