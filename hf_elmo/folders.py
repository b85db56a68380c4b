"""Writing model folders: every folder the package writes appears complete or not at all, readable as `mkdir` and
`open` would leave it, and uploads to the Hub as it is.

The converters (`conversion_original.py`, `conversion_elmoformanylangs.py`), the ONNX export and pre-training write
their outputs through [`atomic_directory`]: into a staging folder beside the output, `.NAME.incomplete-XXXXXXXX`,
renamed to NAME once complete. While it writes, the process holds an exclusive `flock` on its staging folder, so
that a later write of NAME tells the staging folder of a killed writer (no lock: removed) from a live one's (kept).
A write that fails, on a full disk or a read-only folder, is one line naming the cause.

A run that writes an output over time (`hf-elmo embed`, `hf-elmo pretrain`, the example scripts) holds its
[`OutputLock`] from before it looks at what the output holds until it is done: a second run on the same output is
refused in one line while the first lives, instead of both writing it.

Nothing the package writes for itself beside an output (a lock, a staging file or folder, a part) is ever opened
through a link: [`create_exclusively`] makes each file new (`O_CREAT | O_EXCL | O_NOFOLLOW`), [`make_new_folder`] each
staging folder of a fixed name, and the lock file is opened with `O_NOFOLLOW`. A link found where the package makes
its own file or folder is refused in one line ([`LinkRefused`]) and left as it is, and so is the file it names.
"""

import contextlib
import errno
import glob
import os
import re
import shutil
import stat
import tempfile
from collections.abc import Iterable
from pathlib import Path

from .errors import ElmoConversionError, first_line

try:
    import fcntl
except ImportError:  # Windows: staging folders are not locked, and none is ever taken for a killed writer's
    fcntl = None

# What names a staging folder: `.NAME` + this + tempfile's random suffix.
STAGING_MARK = ".incomplete-"
# What names the lock file of a run's output: `.NAME` + this.
LOCK_SUFFIX = ".lock"
# The advice a failed write ends with, by errno.
WRITE_ADVICE = {
    errno.ENOSPC: "free some space and run again",
    errno.EDQUOT: "free some space and run again",
    errno.EROFS: "write to a folder on a writable filesystem",
    errno.EACCES: "write to a folder you are allowed to write to",
    errno.EPERM: "write to a folder you are allowed to write to",
}


class LinkRefused(ElmoConversionError):
    """A link where the package makes a file or folder of its own: not followed, nothing written through it."""

    def __init__(self, path: Path, what: str):
        try:
            target = f" (to {os.readlink(path)})"
        except OSError:
            target = ""
        super().__init__(
            f"{path} is a link{target} where hf_elmo makes its {what}; it was not followed and nothing was written "
            "through it: remove the link and run again"
        )


def refuse_link(path: Path, what: str) -> None:
    """Raises `LinkRefused` where `path`, where the package makes its `what` (a lock, a staging file), is a link."""
    if os.path.islink(path):
        raise LinkRefused(path, what)


def create_exclusively(path: Path, what: str = "staging file"):
    """
    The binary file object of a new file `path`, made by this call and open for writing and reading back (as HDF5
    does): never a file that was there, never one a link names (`O_CREAT | O_EXCL | O_NOFOLLOW`). A file a killed
    writer left at `path` is removed first (its name alone: a hard link's other names keep their file); a link there
    is `LinkRefused`.
    """
    refuse_link(path, what)
    with contextlib.suppress(FileNotFoundError):
        os.unlink(path)
    flags = os.O_RDWR | os.O_CREAT | os.O_EXCL | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_CLOEXEC", 0)
    try:
        descriptor = os.open(path, flags, 0o666)
    except FileExistsError:
        refuse_link(path, what)  # a link put there meanwhile
        raise
    return os.fdopen(descriptor, "w+b")


def make_new_folder(path: Path, what: str = "staging folder") -> None:
    """
    Makes `path` a new, empty folder of this process's own: what a killed writer left there (a folder, a file) is
    removed first, a link there is `LinkRefused`; `mkdir` makes it (it never follows a link), and it is checked to
    be a folder, not a link, once made.
    """
    refuse_link(path, what)
    if os.path.isdir(path):
        shutil.rmtree(path)
    else:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    try:
        os.mkdir(path)
    except FileExistsError:
        refuse_link(path, what)
        raise
    if not stat.S_ISDIR(os.lstat(path).st_mode):
        raise LinkRefused(path, what)


def replacing_problem(output: str | os.PathLike, inputs: Iterable[str | os.PathLike], replaced_by: str) -> str | None:
    """
    Why the folder `output`, which `replaced_by` (`--overwrite`, "the finished run") replaces whole, may not be, in
    one line, or None: it is, or holds, the folder the process runs in (`--output-dir .`), whose files it would
    delete, or one of the `inputs` the command reads, which would be gone once the new folder stands in its place.
    """
    output = Path(os.path.abspath(Path(output).expanduser()))
    if Path.cwd().is_relative_to(output):
        return f"{output} holds the folder this command runs in, and {replaced_by} replaces it whole: write elsewhere"
    for path in inputs:
        if Path(os.path.abspath(Path(path).expanduser())).is_relative_to(output):
            return f"{path} is inside {output}, which {replaced_by} replaces whole: write to another folder"
    return None


def write_failure_reason(error: BaseException) -> str | None:
    """
    Why a write failed (a full disk, a read-only folder), where `error` is a failed write, else None: an `OSError`,
    what safetensors and `torch.save` raise for one (`torch.save` reports a full disk as a failed check of its zip
    writer, without the system's reason), or a link refused (`LinkRefused`).
    """
    from safetensors import SafetensorError

    if isinstance(error, LinkRefused):
        return first_line(error)
    if isinstance(error, OSError):
        return error.strerror or first_line(error)
    if isinstance(error, SafetensorError) and "I/O error: " in str(error):
        return first_line(error).rpartition("I/O error: ")[2]
    if isinstance(error, RuntimeError) and "inline_container" in str(error):
        return "torch.save could not write a checkpoint (is the disk full?)"
    return None


def write_error(path: str | os.PathLike, error: BaseException) -> ElmoConversionError:
    """The one-line error for a failed write of `path` (`write_failure_reason`): the cause as the system names it (a
    full disk, a read-only filesystem) and what to do."""
    code = error.errno if isinstance(error, OSError) else None
    if code is None and (number := re.search(r"\(os error (\d+)\)", str(error))):  # safetensors' way of naming it
        code = int(number.group(1))
    advice = WRITE_ADVICE.get(code)
    reason = write_failure_reason(error) or first_line(error)
    return ElmoConversionError(f"cannot write {path}: {reason}" + (f"; {advice}" if advice else ""))


def apply_umask(folder: Path):
    """
    Gives `folder` and everything in it the permissions `mkdir` and `open` would: `mkdtemp` makes folders 700 and
    transformers writes `model.safetensors` as 600, which would keep other users of a shared machine out.
    """
    umask = os.umask(0)
    os.umask(umask)
    for path in [folder, *folder.rglob("*")]:
        if not path.is_symlink():  # chmod would change the file a link names
            os.chmod(path, (0o777 if path.is_dir() else 0o666) & ~umask)


def lock_folder(folder: Path) -> int | None:
    """
    An open descriptor of `folder` holding an exclusive `flock` on it, which the system drops when the process ends
    however it ends; the caller closes it. `BlockingIOError` where another process (or another descriptor) holds the
    lock; None where the filesystem cannot lock folders (no one can then tell a dead writer's folder: none is removed).
    """
    if fcntl is None:
        return None
    descriptor = os.open(folder, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW)
    try:
        fcntl.flock(descriptor, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        os.close(descriptor)
        raise
    except OSError:
        os.close(descriptor)
        return None
    return descriptor


class OutputLock:
    """
    A run's hold on its output `path`: an exclusive `flock` on the file `.NAME.lock` beside it, which the system drops
    when the process ends however it ends (a killed run's output is free at once), and which holds the holder's
    process id for the message of a run refused. `release` removes the file; a lock file a killed run left is taken
    and removed by the next run. Also a context manager that releases on exit.
    """

    def __init__(self, path: Path, lock_file: Path, descriptor: int):
        self.path, self.lock_file, self.descriptor = path, lock_file, descriptor

    def release(self):
        """Removes the lock file, then drops the lock (in this order: a run that opened the file meanwhile finds it
        gone once it has the lock, and takes a new one); once only."""
        if self.descriptor is None:
            return
        with contextlib.suppress(FileNotFoundError):
            os.unlink(self.lock_file)
        os.close(self.descriptor)
        self.descriptor = None

    def __enter__(self) -> "OutputLock":
        return self

    def __exit__(self, *exc_info):
        self.release()


def lock_output(path: str | os.PathLike) -> OutputLock:
    """
    Takes the lock of a run that writes the output `path` (a folder or a file, with what the run keeps beside it:
    `OUTPUT.parts/`, staging folders) for as long as the run lives. One line (`ElmoConversionError`) where another
    live process holds it, naming that process; where the lock file cannot be written (a read-only folder); and where
    the filesystem cannot lock files (some network filesystems): a run there would go unlocked, so it is refused.
    """
    path = Path(os.path.abspath(path))
    lock_file = path.with_name(f".{path.name}{LOCK_SUFFIX}")
    if fcntl is None:
        raise ElmoConversionError(f"cannot lock {lock_file}: this system has no flock to keep two runs out of {path}")
    while True:
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            refuse_link(lock_file, "lock file")
            descriptor = os.open(lock_file, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, 0o666)
        except OSError as error:
            if error.errno == errno.ELOOP:  # a link put there meanwhile
                raise LinkRefused(lock_file, "lock file") from error
            raise write_error(path, error) from error
        held = os.fstat(descriptor)
        if not stat.S_ISREG(held.st_mode) or held.st_nlink > 1:  # 0: released meanwhile, and taken anew below
            os.close(descriptor)
            kind = "a second name (hard link) of another file" if stat.S_ISREG(held.st_mode) else "no regular file"
            raise ElmoConversionError(
                f"{lock_file} is {kind} where hf_elmo makes its lock file; nothing was written to it: remove it and "
                "run again"
            )
        try:
            fcntl.flock(descriptor, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError as error:
            holder = os.read(descriptor, 32).decode("ascii", "replace").strip()
            os.close(descriptor)
            raise ElmoConversionError(
                f"another run{f' (process {holder})' if holder.isdigit() else ''} is writing {path}; wait for it to "
                "end, or stop it first"
            ) from error
        except OSError as error:
            os.close(descriptor)
            raise ElmoConversionError(
                f"cannot lock {lock_file}: {error.strerror or first_line(error)}; this filesystem cannot keep two "
                f"runs out of {path}: write to a local filesystem"
            ) from error
        # The file may have been removed (its run released it) between opening and locking: lock the one in place.
        try:
            in_place = os.stat(lock_file).st_ino == os.fstat(descriptor).st_ino
        except FileNotFoundError:
            in_place = False
        if in_place:
            break
        os.close(descriptor)
    with contextlib.suppress(OSError):  # the process id is for messages alone; a full disk fails the run later
        os.ftruncate(descriptor, 0)
        os.write(descriptor, f"{os.getpid()}\n".encode())
    return OutputLock(path, lock_file, descriptor)


def remove_stale_staging(output_dir: Path):
    """Removes the staging folders of `output_dir` that killed writers left: those no live process locks."""
    pattern = glob.escape(str(output_dir.parent / f".{output_dir.name}{STAGING_MARK}")) + "*"
    for candidate in map(Path, glob.glob(pattern)):
        try:
            if candidate.is_symlink() or not candidate.is_dir():
                continue
            descriptor = lock_folder(candidate)
        except OSError:  # locked by a live writer, or gone meanwhile
            continue
        if descriptor is not None:
            try:
                shutil.rmtree(candidate, ignore_errors=True)
            finally:
                os.close(descriptor)


@contextlib.contextmanager
def atomic_directory(output_dir: str | os.PathLike, overwrite: bool = False):
    """
    Yields a staging folder beside `output_dir` that becomes `output_dir` only if the block succeeds; on any error it
    is removed and `output_dir` is left as it was. A failed write (`write_failure_reason`: a full disk, a read-only
    folder, also where safetensors or `torch.save` wrote) is an `ElmoConversionError` of one line naming it. Staging
    folders of `output_dir` left by killed writers go first.
    """
    output_dir = Path(output_dir)
    if output_dir.exists() and not output_dir.is_dir():
        raise ElmoConversionError(f"{output_dir} exists and is not a folder")
    if output_dir.is_dir() and any(output_dir.iterdir()) and not overwrite:
        raise ElmoConversionError(
            f"{output_dir} exists and is not empty (pass --overwrite, or overwrite=True, to replace it)"
        )
    staging, descriptor = None, None
    try:
        output_dir.parent.mkdir(parents=True, exist_ok=True)
        remove_stale_staging(output_dir)
        staging, descriptor = locked_staging(output_dir)
        yield staging
        apply_umask(staging)
        replace_folder(staging, output_dir)
    except Exception as error:
        if write_failure_reason(error) is None:
            raise
        raise write_error(output_dir, error) from error
    finally:
        if staging is not None:
            shutil.rmtree(staging, ignore_errors=True)
        if descriptor is not None:
            os.close(descriptor)


def locked_staging(output_dir: Path) -> tuple[Path, int | None]:
    """
    A new staging folder of `output_dir` and the descriptor holding its lock (`lock_folder`). Between making and
    locking it, another writer of `output_dir` may take it for a killed writer's and remove it: then another is made.
    """
    while True:
        staging = Path(tempfile.mkdtemp(prefix=f".{output_dir.name}{STAGING_MARK}", dir=output_dir.parent))
        try:
            descriptor = lock_folder(staging)
        except (FileNotFoundError, BlockingIOError):  # removed, or being removed
            continue
        if descriptor is None or os.fstat(descriptor).st_nlink > 0:
            return staging, descriptor
        os.close(descriptor)  # locked once the remover was done with it: a removed folder


def replace_folder(source: Path, target: Path):
    """
    Renames `source` to `target`. An existing `target` is moved aside first (into `.NAME.replaced-XXXXXXXX`) and
    removed only once `source` stands in its place, or moved back if the rename fails: a user's folder is never
    removed before its replacement is complete and in place.
    """
    if not target.exists():
        source.rename(target)
        return
    retired = Path(tempfile.mkdtemp(prefix=f".{target.name}.replaced-", dir=target.parent))
    target.rename(retired / target.name)
    try:
        source.rename(target)
    except OSError:
        (retired / target.name).rename(target)
        retired.rmdir()
        raise
    shutil.rmtree(retired, ignore_errors=True)


def push_to_hub(folder, repo_id: str, private: bool = False) -> str:
    """Creates `repo_id` (if needed) and uploads `folder` with the standard Hub API; returns the commit URL."""
    from huggingface_hub import HfApi

    api = HfApi()
    api.create_repo(repo_id, private=private, exist_ok=True)
    return str(
        api.upload_folder(
            folder_path=str(folder), repo_id=repo_id, commit_message="Upload ELMo converted with hf_elmo"
        )
    )
