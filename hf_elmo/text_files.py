"""Reading text files of one sentence per line, plain or gzip-compressed, as `hf-elmo embed` and pre-training do.

Lines are the bytes between `\\n`s, decoded as UTF-8 and stripped: line `i` of a file is the same line whoever reads
it, which is what lets `embed` name its outputs by line index and split a file between processes by index alone.
One rule for every reader (`embed`, `pretrain`, word counts): a line holding a control character that `str.split` does
not take for whitespace (NUL, ESC, DEL, ...) is no more text than one that is not UTF-8. No sentence holds one, while
binary and UTF-16 files hold them everywhere (so that 2,000 NUL bytes would otherwise be one "word").
"""

import errno
import gzip
import os
import re
import stat
import zlib
from collections.abc import Iterable, Iterator
from pathlib import Path

from .errors import first_line

GZIP_MAGIC = b"\x1f\x8b"
# The C0 control characters (and DEL) that are not whitespace to `str.split`.
NOT_TEXT = re.compile("[\x00-\x08\x0e-\x1b\x7f]")


class TextFileError(ValueError):
    """A file that cannot be read as lines of text; the message names the file and what to do."""


class UndecodableLine(TextFileError):
    """A line that is not valid UTF-8, read with `errors="strict"`; the message names the file, line and byte."""


class LineTooLong(TextFileError):
    """A line of more characters than the reader allows; the message names the file, line, length and limit."""


def unreadable_reason(path: str | os.PathLike) -> str | None:
    """
    Why `path` cannot be read as a text file, in the words of a message (`cannot read PATH: REASON`), or None where it
    can: it does not exist, is a folder, cannot be opened (as the system names why: no read permission), or is no
    regular file (a named pipe, a device), whose lines could be read once only where every reader reads them more than
    once (counted, then read). Opening a named pipe would wait for a writer: it is never opened.
    """
    try:
        mode = os.stat(path).st_mode
    except OSError as error:
        return error.strerror or first_line(error)
    if stat.S_ISDIR(mode):
        return os.strerror(errno.EISDIR)
    if not stat.S_ISREG(mode):
        kind = "a named pipe (FIFO)" if stat.S_ISFIFO(mode) else "a device or socket"
        return f"it is {kind}, not a file, and its lines are read more than once: write them to a file first"
    try:
        os.close(os.open(path, os.O_RDONLY))
    except OSError as error:
        return error.strerror or first_line(error)
    return None


def open_text_file(path: Path):
    """
    The file's bytes, decompressed when it is named `.gz`; gzip bytes under another name, and a file that cannot be
    read (`unreadable_reason`), are a `TextFileError`.
    """
    if reason := unreadable_reason(path):
        raise TextFileError(f"cannot read {path}: {reason}")
    if path.suffix == ".gz":
        return gzip.open(path, "rb")
    handle = open(path, "rb")
    if handle.read(2) == GZIP_MAGIC:
        handle.close()
        raise TextFileError(f"{path} holds gzip-compressed bytes; name it with a .gz suffix to read it decompressed")
    handle.seek(0)
    return handle


def read_lines(
    path: str | Path, errors: str = "strict", shard: tuple[int, int] = (0, 1), max_characters: int | None = None
) -> Iterator[tuple[int, str | None]]:
    """
    `(index, stripped text)` of each line, streamed. A line that is not UTF-8, or not text (`NOT_TEXT`), raises
    `UndecodableLine` under `errors="strict"`, has its bad bytes (or characters) replaced under `"replace"` and comes
    as text None under `"skip"`.
    With `shard=(rank, world_size)`, only the lines `index % world_size == rank` (others are not decoded). A text of
    more than `max_characters` characters raises `LineTooLong`.
    """
    path, (rank, world_size) = Path(path), shard
    try:
        with open_text_file(path) as handle:
            for index, raw in enumerate(handle):
                if index % world_size != rank:
                    continue
                try:
                    text = raw.decode("utf-8", "replace" if errors == "replace" else "strict")
                except UnicodeDecodeError as error:
                    if errors == "strict":
                        raise UndecodableLine(
                            f"{path} line {index + 1}: not valid UTF-8 ({error.reason} at byte {error.start})"
                        ) from error
                    text = None
                if text is not None and (control := NOT_TEXT.search(text)):
                    if errors == "strict":
                        raise UndecodableLine(
                            f"{path} line {index + 1}: not text (control character U+{ord(control.group()):04X} at "
                            f"character {control.start()}, as in binary and UTF-16 files)"
                        )
                    text = NOT_TEXT.sub("\ufffd", text) if errors == "replace" else None
                text = None if text is None else text.strip()
                if max_characters is not None and text is not None and len(text) > max_characters:
                    raise LineTooLong(
                        f"{path} line {index + 1}: {len(text):,} characters, more than the {max_characters:,} a line "
                        "may hold"
                    )
                yield index, text
    except (gzip.BadGzipFile, EOFError, zlib.error) as error:
        raise TextFileError(f"{path}: not a complete gzip file ({first_line(error)})") from error
    except OSError as error:  # opened, then failed (a disk's read error, a permission taken meanwhile)
        raise TextFileError(f"cannot read {path}: {error.strerror or first_line(error)}") from error


def count_lines(path: str | Path, shard: tuple[int, int] = (0, 1), max_characters: int | None = None) -> int:
    """How many lines `read_lines(path, shard=shard)` yields; a line longer than `max_characters` raises
    `LineTooLong`."""
    return sum(1 for _ in read_lines(path, "replace", shard, max_characters))


def read_sentences(paths: Iterable[str | Path]) -> Iterator[str]:
    """The non-blank lines of text files, stripped, in order (an undecodable line raises `UndecodableLine`)."""
    for path in paths:
        for _, text in read_lines(path):
            if text:
                yield text
