"""The package's error types and the one way a failure becomes a one-line message.

Every error a user can cause is reported as one line that says what is wrong and how to fix it: the converters
raise [`ElmoConversionError`], every `hf-elmo` command (the `embed` pipeline included) [`CommandError`] (with an exit
status), and any other exception that reaches a command is cut to its [`first_line`].

A file the package reads is checked before it is used, by the one reader of its kind (`char_vocab.json`:
`alphabet_elmo`; a Trainer state: `pretraining`; `embed`'s parts: `embedding_files`), on the two helpers here:
[`read_json_file`] bounds the size before reading, and [`JsonFields`] checks each field's type and bounds as it is
taken; what does not hold is a [`FileContentError`] of one line naming the file and the field.
"""

import errno
import math
import numbers
import os
import sys


class ElmoConversionError(Exception):
    """A checkpoint, release or model folder that cannot be converted or written; the message says why."""


class CommandError(Exception):
    """
    The failure of an `hf-elmo` command, the base of every error a command reports: one line on stderr, with exit
    status `code`; `quiet` when another process of the command reports it.
    """

    def __init__(self, message: str, code: int = 1, quiet: bool = False):
        super().__init__(message)
        self.code, self.quiet = code, quiet


def first_line(error: BaseException) -> str:
    """The first line of an exception's message (its type's name when it has none), for one-line errors."""
    text = str(error).strip()
    return text.splitlines()[0] if text else type(error).__name__


# -- the files the package reads --------------------------------------------------------------------------------------

# The largest JSON file a reader takes, unless it names its own bound: checked before a byte is read, so that a
# damaged or hostile file is refused before it is held in memory.
JSON_FILE_LIMIT = 64 << 20
# What a field of each Python type is called in a message; `float` takes integers too, `int` never takes a bool.
KIND_NAMES = {
    int: "an integer",
    float: "a number",
    str: "a string",
    bool: "true or false",
    list: "a list",
    dict: "an object",
    type(None): "null",
}


def is_integer(value) -> bool:
    """A whole number as an argument or a field may hold one: an int, numpy's too, and never a bool (Python counts
    `True` as the int 1, so `isinstance(True, int)`; a `true` in a JSON file or a flag passed by mistake is no count).
    Every integer check of the package is this one (a test holds `isinstance(..., int)` to it)."""
    return isinstance(value, numbers.Integral) and not isinstance(value, bool)


def is_number(value) -> bool:
    """A real number: an int or a float, numpy's too, never a bool (as [`is_integer`])."""
    return isinstance(value, numbers.Real) and not isinstance(value, bool)


class FileContentError(ValueError):
    """
    A file the package reads that cannot be read or does not hold what it should: one line naming the file, the
    field, what it holds and what to do. `cut_short` where the file ends before its JSON does (as a write that was
    stopped leaves it), so that a reader may take it for a file that was never finished.
    """

    def __init__(self, message: str, cut_short: bool = False):
        super().__init__(message)
        self.cut_short = cut_short


def read_json_file(path, fix: str, max_bytes: int = JSON_FILE_LIMIT):
    """
    The JSON value `path` holds. A `FileContentError` ending with `fix` where it is no regular file (a folder, a
    named pipe), cannot be read (as the system names why), is larger than `max_bytes` (known before reading), is not
    UTF-8, or is not JSON, nested too deep or holding a number too long to convert.
    """
    import json
    import stat

    try:
        # Non-blocking, so that a named pipe is refused instead of waiting for a writer.
        descriptor = os.open(path, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0))
        try:
            status = os.fstat(descriptor)
            if not stat.S_ISREG(status.st_mode):
                raise FileContentError(f"{path} is not a regular file; {fix}")
            if status.st_size > max_bytes:
                raise FileContentError(
                    f"{path} holds {status.st_size:,} bytes, more than the {max_bytes:,} it may; {fix}"
                )
            with os.fdopen(os.dup(descriptor), "rb") as handle:  # read(n) takes n bytes of memory: the file's size
                data = handle.read(status.st_size + 1)
        finally:
            os.close(descriptor)
    except OSError as error:
        raise FileContentError(f"cannot read {path}: {error.strerror or first_line(error)}") from error
    if len(data) > status.st_size:
        raise FileContentError(f"{path} grew while it was read: another process is writing it; read it once written")
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as error:
        raise FileContentError(f"{path} is not UTF-8 ({error.reason} at byte {error.start}); {fix}") from error
    try:
        return json.loads(text)
    except json.JSONDecodeError as error:
        cut_short = error.pos >= len(text.rstrip())
        problem = "ends before its JSON does" if cut_short else f"is not JSON ({error.msg} at character {error.pos})"
        raise FileContentError(f"{path} {problem}; {fix}", cut_short=cut_short) from error
    except (ValueError, RecursionError) as error:  # a number of too many digits, lists nested too deep
        raise FileContentError(f"{path} is not JSON that can be read ({first_line(error)}); {fix}") from error


def json_object_or_none(path) -> dict | None:
    """The JSON object the file `path` holds (`read_json_file`), or None where it cannot be read or holds no object:
    for a look ahead whose reader, run later, says why."""
    try:
        value = read_json_file(path, fix="")
    except FileContentError:
        return None
    return value if isinstance(value, dict) else None


def describe_value(value) -> str:
    """A JSON value as a message names it: its kind, and the value itself where it is short."""
    if isinstance(value, bool) or value is None:
        return json_text(value)
    if is_number(value):
        return f"the number {json_text(value)}"
    if isinstance(value, str):
        return f"the string {json_text(value)}"
    return f"{KIND_NAMES[type(value)]} of {len(value):,} item{'s' if len(value) != 1 else ''}"


def json_text(value) -> str:
    """`value` as JSON writes it, cut to 40 characters."""
    import json

    text = json.dumps(value, ensure_ascii=False)
    return text if len(text) <= 40 else text[:37] + "..."


class JsonFields:
    """
    The fields of one JSON object read from `path` (at `where` within it: `""` for the file's own object), each
    checked as it is taken (`take`): the wrong type, out of bounds or missing is a `FileContentError` naming the
    file and the field, ending with `fix`.
    """

    def __init__(self, data, path, fix: str, where: str = ""):
        self.path, self.fix, self.where = path, fix, where
        if not isinstance(data, dict):
            raise self.error(f"{where or 'the file'} is {describe_value(data)}, not an object")
        self.data = data

    @classmethod
    def of_file(cls, path, fix: str, max_bytes: int = JSON_FILE_LIMIT) -> "JsonFields":
        """The fields of the JSON object the file `path` holds (`read_json_file`); anything else is a
        `FileContentError` ending with `fix`."""
        return cls(read_json_file(path, fix, max_bytes), path, fix)

    def error(self, problem: str) -> FileContentError:
        return FileContentError(f"{self.path}: {problem}; {self.fix}")

    def name(self, key: str) -> str:
        """How a message names the field `key`: its path in the file, a key that is not a plain name quoted as JSON
        writes it (so that no key, a newline's, breaks the line)."""
        key = key if key.replace("_", "a").isalnum() and key.isascii() else json_text(key)
        return f"{self.where}.{key}" if self.where else key

    def take(self, key: str, kinds, *, minimum=None, maximum=None, required: bool = True, default=None):
        """
        The field `key`: one of `kinds` (a type or a tuple of them, as in `KIND_NAMES`), a number within `minimum` and
        `maximum` where they are given, a list or an object of at most `maximum` items; `default` where it is absent
        and not `required`.
        """
        kinds = kinds if isinstance(kinds, tuple) else (kinds,)
        if key not in self.data:
            if required:
                raise self.error(f"{self.name(key)} is missing")
            return default
        value = self.data[key]
        expected = " or ".join(KIND_NAMES[kind] for kind in kinds)
        if not any(is_of_kind(value, kind) for kind in kinds):
            raise self.error(f"{self.name(key)} is {describe_value(value)}, not {expected}")
        if is_number(value):
            too_low, too_high = minimum is not None and value < minimum, maximum is not None and value > maximum
            if not math.isfinite(value) or too_low or too_high:  # JSON as Python reads it has NaN and Infinity
                raise self.error(
                    f"{self.name(key)} is {describe_value(value)}, not {expected} {bounds(minimum, maximum)}"
                )
        elif isinstance(value, (list, dict)) and maximum is not None and len(value) > maximum:
            raise self.error(f"{self.name(key)} holds {len(value):,} items, more than the {maximum:,} it may")
        return value


def bounds(minimum, maximum) -> str:
    """How a message names the bounds of a number: `from 0 to 9`, `of at least 0`, `of at most 9`, `that is finite`."""
    if minimum is not None and maximum is not None:
        return f"from {minimum:,} to {maximum:,}"
    if minimum is not None:
        return f"of at least {minimum:,}"
    return "that is finite" if maximum is None else f"of at most {maximum:,}"


def is_of_kind(value, kind) -> bool:
    """Whether the JSON value `value` is of the Python type `kind`, as `KIND_NAMES` names them."""
    if kind is float:
        return is_number(value)
    if kind is int:
        return is_integer(value)
    return isinstance(value, kind)


# -- the one handler of every entry point -----------------------------------------------------------------------------

# Exit statuses, as shells and argparse read them.
ENVIRONMENT_FAILURE, USAGE_FAILURE, INTERRUPTED = 1, 2, 130
# What a system error asks of the user, for the errors a full or read-only disk and permissions give.
OS_ERROR_FIXES = {
    errno.ENOSPC: "free space there or write elsewhere",
    errno.EDQUOT: "free space there or write elsewhere",
    errno.EACCES: "check its permissions or write elsewhere",
    errno.EPERM: "check its permissions or write elsewhere",
    errno.EROFS: "write elsewhere",
}


def os_error_line(error: OSError) -> str:
    """An `OSError` in one line: what the system says, the file it names, and the fix for the common ones."""
    reason = error.strerror or first_line(error)
    where = " -> ".join(str(name) for name in (error.filename, error.filename2) if name is not None)
    fix = OS_ERROR_FIXES.get(error.errno)
    return reason + (f": {where}" if where else "") + (f"; {fix}" if fix else "")


def failure_of(error: BaseException) -> tuple[str, int] | None:
    """
    The one line and exit status of a failure an entry point reports (`run_entry_point`), or None for one it does
    not know (a bug: its traceback is wanted). The package's own errors first (`CommandError` with its status,
    `FileContentError` and `ElmoConversionError`: a file to fix, 1), then the system's (`OSError`, `MemoryError`,
    torch's out-of-memory: 1), a missing extra (`ImportError`: 1), and the libraries' refusals of a value given
    (`ValueError`: transformers' `HfArgumentParser` and a tokenizer's checks of an argument, 2).
    """
    if isinstance(error, CommandError):
        return str(error), error.code
    if isinstance(error, KeyboardInterrupt):
        return "interrupted", INTERRUPTED
    if isinstance(error, (FileContentError, ElmoConversionError)):
        return first_line(error), ENVIRONMENT_FAILURE
    if isinstance(error, OSError):
        return os_error_line(error), ENVIRONMENT_FAILURE
    torch = sys.modules.get("torch")  # imported by whoever ran out of its memory; not imported here
    if isinstance(error, MemoryError) or (torch is not None and isinstance(error, torch.OutOfMemoryError)):
        return f"out of memory: {first_line(error)}; use a smaller batch", ENVIRONMENT_FAILURE
    if isinstance(error, ImportError):
        return first_line(error), ENVIRONMENT_FAILURE
    if isinstance(error, ValueError):
        return first_line(error), USAGE_FAILURE
    return None


def run_entry_point(main, *args, prog: str | None = None) -> int:
    """
    `main(*args)` run as a command's whole process: the console script's (`hf_elmo.cli.main`) and every script's
    `if __name__ == "__main__":` line. Returns the exit status: `main`'s own where it returns an integer, else 0;
    a failure `failure_of` knows is one line on stderr, `{prog}: error: ...` (`prog`: the script's name by default),
    and its status (1 environment, 2 usage, 130 interrupted); `SystemExit` (argparse's) and unknown errors pass.
    A `CommandError` that is `quiet` (another process reports it) prints nothing.
    """
    prog = prog or os.path.basename(sys.argv[0])
    try:
        status = main(*args)
    except (Exception, KeyboardInterrupt) as error:
        failure = failure_of(error)
        if failure is None:
            raise
        message, code = failure
        if not getattr(error, "quiet", False):
            print(f"{prog}: error: {message}", file=sys.stderr)
        return code
    return status if is_integer(status) else 0
