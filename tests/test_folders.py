"""`hf_elmo.folders`: output folders complete or absent, a failed write in one line, and the staging folders of
killed writers removed, never a live writer's or a user's."""

import errno
import fcntl
import os
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

from hf_elmo import folders
from hf_elmo.errors import ElmoConversionError
from hf_elmo.folders import (
    STAGING_MARK,
    LinkRefused,
    apply_umask,
    atomic_directory,
    create_exclusively,
    lock_folder,
    lock_output,
    make_new_folder,
    write_failure_reason,
)


def staging_folder(parent: Path, name: str) -> Path:
    """A staging folder of `parent / name` as a writer leaves it, holding a file."""
    staging = Path(tempfile.mkdtemp(prefix=f".{name}{STAGING_MARK}", dir=parent))
    (staging / "model.safetensors").write_bytes(b"half")
    return staging


def test_a_killed_writers_staging_folder_goes_and_a_live_ones_stays(tmp_path):
    """A writer killed mid-write leaves its staging folder unlocked: the next write of the same output removes it. One
    a live process locks, another output's and a user's look-alike stay."""
    killed, live, other_output = (
        staging_folder(tmp_path, "out"),
        staging_folder(tmp_path, "out"),
        staging_folder(tmp_path, "other"),
    )
    users = tmp_path / ".out.backup"
    users.mkdir()
    descriptor = lock_folder(live)  # as the live writer holds it
    try:
        with atomic_directory(tmp_path / "out") as staging:
            (staging / "config.json").write_text("{}")
    finally:
        os.close(descriptor)
    assert not killed.exists()
    assert live.exists() and other_output.exists() and users.exists()
    assert sorted(path.name for path in (tmp_path / "out").iterdir()) == ["config.json"]


def test_a_writer_holds_the_lock_on_its_staging_folder_until_it_is_done(tmp_path):
    with atomic_directory(tmp_path / "out") as staging:
        with pytest.raises(BlockingIOError):  # what a later writer finds: a live one, kept
            lock_folder(staging)
    descriptor = lock_folder(tmp_path / "out")  # released once the folder is in place
    assert descriptor is not None
    os.close(descriptor)


def test_a_staging_folder_taken_for_a_killed_writers_before_it_was_locked_is_made_again(tmp_path, monkeypatch):
    """Another writer of the same output may remove a staging folder between its making and its locking: the writer
    makes another, instead of writing into a folder that is gone."""
    made, mkdtemp = [], tempfile.mkdtemp

    def removed_at_once(*args, **kwargs):
        made.append(mkdtemp(*args, **kwargs))
        if len(made) == 1:
            os.rmdir(made[0])
        return made[-1]

    monkeypatch.setattr(folders.tempfile, "mkdtemp", removed_at_once)
    with atomic_directory(tmp_path / "out") as staging:
        (staging / "config.json").write_text("{}")
    assert len(made) == 2 and staging == Path(made[1])
    assert sorted(path.name for path in tmp_path.iterdir()) == ["out"]


@pytest.mark.parametrize(
    "code, message",
    [
        (errno.ENOSPC, "No space left on device; free some space and run again"),
        (errno.EROFS, "Read-only file system; write to a folder on a writable filesystem"),
    ],
)
def test_a_failed_write_is_one_line_naming_the_cause_and_leaves_nothing(tmp_path, code, message):
    with pytest.raises(ElmoConversionError) as raised:
        with atomic_directory(tmp_path / "out") as staging:
            (staging / "config.json").write_text("{}")
            raise OSError(code, os.strerror(code))
    assert str(raised.value) == f"cannot write {tmp_path / 'out'}: {message}"
    assert list(tmp_path.iterdir()) == []


def test_a_read_only_parent_is_one_line(tmp_path, monkeypatch):
    def read_only(*args, **kwargs):
        raise OSError(errno.EROFS, os.strerror(errno.EROFS), str(tmp_path))

    monkeypatch.setattr(folders.tempfile, "mkdtemp", read_only)
    with pytest.raises(ElmoConversionError, match=r"^cannot write .*out: Read-only file system; write to a folder"):
        with atomic_directory(tmp_path / "out"):
            pytest.fail("the block runs only once the staging folder exists")


def test_a_replaced_folder_comes_back_when_its_replacement_cannot_take_its_place(tmp_path, monkeypatch):
    """With overwrite, the user's folder is moved aside, not removed, until the new one is in place."""
    (tmp_path / "out").mkdir()
    (tmp_path / "out" / "mine.txt").write_text("the user's")
    rename = Path.rename

    def fail_into_place(self, target):
        if Path(target) == tmp_path / "out" and STAGING_MARK in self.name:
            raise OSError(errno.EIO, os.strerror(errno.EIO))
        return rename(self, target)

    monkeypatch.setattr(Path, "rename", fail_into_place)
    with pytest.raises(ElmoConversionError, match="Input/output error"):
        with atomic_directory(tmp_path / "out", overwrite=True) as staging:
            (staging / "config.json").write_text("{}")
    assert [path.name for path in tmp_path.iterdir()] == ["out"]
    assert (tmp_path / "out" / "mine.txt").read_text() == "the user's"


def test_a_second_process_on_a_held_output_is_refused_in_one_line_until_the_first_ends(tmp_path):
    """The lock of a run's output: another process holding it refuses this one, naming it; once that process is
    killed (its lock file left behind), the output is free, and the lock file goes when this run releases it."""
    output = tmp_path / "out"
    holder = subprocess.Popen(
        [sys.executable, "-c", HOLD_LOCK, str(output)], stdout=subprocess.PIPE, text=True, env=os.environ
    )
    try:
        assert holder.stdout.readline() == "held\n"
        with pytest.raises(ElmoConversionError) as raised:
            lock_output(output)
        assert str(raised.value) == (
            f"another run (process {holder.pid}) is writing {output}; wait for it to end, or stop it first"
        )
    finally:
        holder.kill()
        holder.wait()
    assert [path.name for path in tmp_path.iterdir()] == [".out.lock"]  # what a killed run leaves
    with lock_output(output) as lock:
        assert lock.lock_file.read_text() == f"{os.getpid()}\n"
    assert list(tmp_path.iterdir()) == []


# Holds the lock of sys.argv[1] until killed.
HOLD_LOCK = """
import sys, time
from hf_elmo.folders import lock_output
lock = lock_output(sys.argv[1])
print("held", flush=True)
time.sleep(600)
"""


def test_a_released_lock_file_is_never_held_by_two_runs(tmp_path):
    """A run that opened the lock file just before its holder released (and removed) it locks the removed file: it
    must take a new one, not run beside the next run that made the new file."""
    output = tmp_path / "out"
    first = lock_output(output)
    opened = os.open(first.lock_file, os.O_RDWR)  # as a second run opens it, before it locks
    first.release()
    third = lock_output(output)
    try:
        fcntl.flock(opened, fcntl.LOCK_EX | fcntl.LOCK_NB)  # the removed file is free: it is not the lock in place
        with pytest.raises(ElmoConversionError, match="is writing"):
            lock_output(output)
    finally:
        os.close(opened)
        third.release()


@pytest.mark.parametrize(
    "code, message",
    [
        (errno.ENOLCK, "No locks available"),
        (errno.EOPNOTSUPP, "Operation not supported"),
    ],
)
def test_a_filesystem_that_cannot_lock_refuses_the_run_in_one_line(tmp_path, monkeypatch, code, message):
    def cannot_lock(*args):
        raise OSError(code, os.strerror(code))

    monkeypatch.setattr(folders.fcntl, "flock", cannot_lock)
    with pytest.raises(ElmoConversionError) as raised:
        lock_output(tmp_path / "out")
    assert str(raised.value) == (
        f"cannot lock {tmp_path / '.out.lock'}: {message}; this filesystem cannot keep two runs out of "
        f"{tmp_path / 'out'}: write to a local filesystem"
    )


def test_a_lock_that_cannot_be_written_is_one_line(tmp_path, monkeypatch):
    def read_only(*args, **kwargs):
        raise OSError(errno.EROFS, os.strerror(errno.EROFS))

    monkeypatch.setattr(folders.os, "open", read_only)
    with pytest.raises(ElmoConversionError) as raised:
        lock_output(tmp_path / "out")
    assert str(raised.value) == (
        f"cannot write {tmp_path / 'out'}: Read-only file system; write to a folder on a writable filesystem"
    )


def test_write_failures_are_told_from_other_errors():
    """What torch.save and safetensors raise for a full disk reads as one; other errors are not write failures."""
    from safetensors import SafetensorError

    assert write_failure_reason(OSError(errno.ENOSPC, "No space left on device")) == "No space left on device"
    serializing = SafetensorError("Error while serializing: I/O error: No space left on device (os error 28)")
    assert write_failure_reason(serializing) == "No space left on device (os error 28)"
    # What torch.save raised on a full tmpfs (torch 2.13).
    torch_save = RuntimeError("[enforce fail at inline_container.cc:672] . unexpected pos 576 vs 534")
    assert write_failure_reason(torch_save) == "torch.save could not write a checkpoint (is the disk full?)"
    assert write_failure_reason(RuntimeError("shapes do not match")) is None
    assert write_failure_reason(ValueError("bad")) is None


# -- nothing written through a link (issue 50) ------------------------------------------------------------------------


@pytest.fixture
def users_file(tmp_path) -> Path:
    """A file of the user's, which a link the package finds may name: it must keep its bytes."""
    mine = tmp_path / "mine.txt"
    mine.write_bytes(b"the user's own bytes\n")
    return mine


def test_a_link_where_the_lock_file_would_be_is_refused_and_not_followed(tmp_path, users_file):
    """`ln -s mine.txt .out.lock`: the lock is refused in one line, `mine.txt` does not get the process id."""
    link = tmp_path / ".out.lock"
    link.symlink_to(users_file)
    with pytest.raises(LinkRefused) as raised:
        lock_output(tmp_path / "out")
    assert str(raised.value) == (
        f"{link} is a link (to {users_file}) where hf_elmo makes its lock file; it was not followed and nothing was "
        "written through it: remove the link and run again"
    )
    assert users_file.read_bytes() == b"the user's own bytes\n" and link.is_symlink()
    assert write_failure_reason(raised.value) == str(raised.value)  # what every writer's handler reports


def test_a_link_put_where_the_lock_file_is_opened_is_refused(tmp_path, users_file, monkeypatch):
    """A link made between the check and the open: `O_NOFOLLOW` refuses it as well."""
    link, check = tmp_path / ".out.lock", folders.refuse_link

    def link_made_after_the_check(path, what):
        check(path, what)
        link.symlink_to(users_file)

    monkeypatch.setattr(folders, "refuse_link", link_made_after_the_check)
    with pytest.raises(LinkRefused):
        lock_output(tmp_path / "out")
    assert users_file.read_bytes() == b"the user's own bytes\n"


def test_a_hard_link_where_the_lock_file_would_be_is_refused_unwritten(tmp_path, users_file):
    os.link(users_file, tmp_path / ".out.lock")
    with pytest.raises(ElmoConversionError, match=r"\.out\.lock is a second name \(hard link\) of another file"):
        lock_output(tmp_path / "out")
    assert users_file.read_bytes() == b"the user's own bytes\n"


def test_a_staging_file_is_made_new_never_through_a_link(tmp_path, users_file):
    """A killed writer's leftover (a file, or a hard link to a user's file) is removed by name and the file made
    anew; a symbolic link there is refused and left, as the file it names."""
    staging = tmp_path / ".out.partial"
    staging.write_bytes(b"a killed writer's half")
    with create_exclusively(staging) as handle:
        handle.write(b"new")
    assert staging.read_bytes() == b"new"
    staging.unlink()
    os.link(users_file, staging)
    with create_exclusively(staging) as handle:
        handle.write(b"new")
    assert staging.read_bytes() == b"new" and users_file.read_bytes() == b"the user's own bytes\n"
    staging.unlink()
    staging.symlink_to(users_file)
    with pytest.raises(LinkRefused, match="where hf_elmo makes its staging file"):
        create_exclusively(staging)
    assert staging.is_symlink() and users_file.read_bytes() == b"the user's own bytes\n"


def test_a_staging_folder_of_a_fixed_name_is_made_new_never_through_a_link(tmp_path):
    """What a killed run left (a folder with files, a file) is removed and the folder made; a link to a user's folder
    is refused, and the folder keeps what it holds."""
    staging, users_folder = tmp_path / ".out.partial", tmp_path / "mine"
    staging.mkdir()
    (staging / "half.bin").write_bytes(b"half")
    make_new_folder(staging)
    assert staging.is_dir() and not any(staging.iterdir())
    staging.rmdir()
    staging.write_bytes(b"a file")
    make_new_folder(staging)
    assert staging.is_dir()
    staging.rmdir()
    users_folder.mkdir()
    (users_folder / "keep.txt").write_text("kept")
    staging.symlink_to(users_folder)
    with pytest.raises(LinkRefused, match="where hf_elmo makes its staging folder"):
        make_new_folder(staging)
    assert staging.is_symlink() and [path.name for path in users_folder.iterdir()] == ["keep.txt"]


def test_permissions_are_given_to_a_folder_s_files_not_to_what_its_links_name(tmp_path, users_file):
    users_file.chmod(0o600)
    folder = tmp_path / "out"
    folder.mkdir()
    (folder / "config.json").write_text("{}")
    (folder / "link").symlink_to(users_file)
    apply_umask(folder)
    assert users_file.stat().st_mode & 0o777 == 0o600
