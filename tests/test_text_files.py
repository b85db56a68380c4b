"""The line reader shared by `hf-elmo embed` and pre-training: plain and gzip files, bad bytes, shards."""

import errno
import gzip
import io
import os

import pytest
from utils import unreadable

import hf_elmo.text_files
from hf_elmo.text_files import TextFileError, UndecodableLine, count_lines, read_lines, read_sentences

TEXT = b"the cat\n\n  sat \xff on \n the mat\n"


def test_lines_are_stripped_and_numbered_from_zero(tmp_path):
    (tmp_path / "in.txt").write_bytes(TEXT.replace(b"\xff", b""))
    assert list(read_lines(tmp_path / "in.txt")) == [(0, "the cat"), (1, ""), (2, "sat  on"), (3, "the mat")]


def test_undecodable_lines_raise_are_replaced_or_skipped(tmp_path):
    (tmp_path / "in.txt").write_bytes(TEXT)
    with pytest.raises(UndecodableLine, match=r"in\.txt line 3: not valid UTF-8 \(invalid start byte at byte 6\)$"):
        list(read_lines(tmp_path / "in.txt"))
    assert list(read_lines(tmp_path / "in.txt", "replace"))[2] == (2, "sat \ufffd on")
    assert list(read_lines(tmp_path / "in.txt", "skip"))[2] == (2, None)


def test_a_shard_holds_the_lines_of_its_rank_and_skips_the_others_undecoded(tmp_path):
    (tmp_path / "in.txt").write_bytes(TEXT)
    assert list(read_lines(tmp_path / "in.txt", shard=(1, 2))) == [(1, ""), (3, "the mat")]  # line 2 is not decoded
    assert [count_lines(tmp_path / "in.txt", (rank, 3)) for rank in range(3)] == [2, 1, 1]
    assert count_lines(tmp_path / "in.txt") == 4


def test_gzip_files_are_read_by_their_suffix_and_refused_without_it(tmp_path):
    (tmp_path / "in.txt.gz").write_bytes(gzip.compress(TEXT))
    (tmp_path / "in.txt").write_bytes(TEXT)
    assert list(read_lines(tmp_path / "in.txt.gz", "skip")) == list(read_lines(tmp_path / "in.txt", "skip"))
    (tmp_path / "compressed.txt").write_bytes(gzip.compress(TEXT))
    with pytest.raises(TextFileError, match="holds gzip-compressed bytes; name it with a .gz suffix"):
        list(read_lines(tmp_path / "compressed.txt"))
    (tmp_path / "cut.txt.gz").write_bytes(gzip.compress(TEXT * 100)[:50])
    with pytest.raises(TextFileError, match=r"cut\.txt\.gz: not a complete gzip file"):
        list(read_lines(tmp_path / "cut.txt.gz", "skip"))


def test_sentences_are_the_non_blank_lines_of_every_file_in_order(tmp_path):
    (tmp_path / "a.txt").write_text("one\n\n  two  \n", encoding="utf-8")
    (tmp_path / "b.txt.gz").write_bytes(gzip.compress(b"\nthree\r\n"))
    assert list(read_sentences([tmp_path / "a.txt", str(tmp_path / "b.txt.gz")])) == ["one", "two", "three"]


def test_a_line_with_a_control_character_is_not_text_under_each_errors_choice(tmp_path):
    """NUL, ESC or DEL in a line: read as a line that is not UTF-8 would be. Tabs and the separators `str.split`
    splits on stay text."""
    path = tmp_path / "in.txt"
    path.write_bytes(b"a\tb\x1fc\nx\x00y\n\x1b[1mbold\nz\x7f\n")
    with pytest.raises(UndecodableLine, match=r"in.txt line 2: not text \(control character U\+0000 at character 1,"):
        list(read_lines(path, "strict"))
    assert list(read_lines(path, "replace")) == [
        (0, "a\tb\x1fc"),
        (1, "x\ufffdy"),
        (2, "\ufffd[1mbold"),
        (3, "z\ufffd"),
    ]
    assert list(read_lines(path, "skip")) == [(0, "a\tb\x1fc"), (1, None), (2, None), (3, None)]
    assert list(read_lines(path, "skip", shard=(1, 2))) == [(1, None), (3, None)]


def test_pretraining_reads_a_control_character_as_embed_does(tmp_path):
    """One rule for every reader: the sentences pre-training reads (`read_sentences`) refuse a line holding NUL as
    `embed` does, where pre-training trained on it."""
    (tmp_path / "in.txt").write_bytes(b"the cat\nsat\x00 on\n")
    with pytest.raises(UndecodableLine) as raised:
        list(read_sentences([tmp_path / "in.txt"]))
    assert str(raised.value) == (
        f"{tmp_path / 'in.txt'} line 2: not text (control character U+0000 at character 3, as in binary and UTF-16 "
        "files)"
    )


def test_a_named_pipe_or_a_folder_is_refused_by_its_true_cause_without_waiting(tmp_path):
    """A FIFO exists (it was "no such input file"), and opening it would wait for a writer: it is refused unopened,
    as a folder is, naming what it is."""
    fifo = tmp_path / "lines.fifo"
    os.mkfifo(fifo)
    with pytest.raises(TextFileError) as raised:
        list(read_lines(fifo))
    assert str(raised.value) == (
        f"cannot read {fifo}: it is a named pipe (FIFO), not a file, and its lines are read more than once: write "
        "them to a file first"
    )
    with pytest.raises(TextFileError, match=f"^cannot read {tmp_path}: Is a directory$"):
        count_lines(tmp_path)
    with pytest.raises(TextFileError, match="No such file or directory$"):
        list(read_sentences([tmp_path / "missing.txt"]))


def test_a_file_without_read_permission_is_refused_naming_the_permission(tmp_path, monkeypatch):
    """Was a `PermissionError` traceback (issue 50)."""
    path = tmp_path / "in.txt"
    path.write_text("a line\n")
    unreadable(monkeypatch, path)
    with pytest.raises(TextFileError, match=f"^cannot read {path}: Permission denied$"):
        list(read_lines(path))


def test_a_read_error_after_the_file_opened_names_the_systems_reason(tmp_path, monkeypatch):
    """A disk that fails mid-file (which cannot happen here on purpose: the file object stands in for it) is the
    system's reason in one line, as a file that cannot be opened is, after the lines read before it."""
    path = tmp_path / "in.txt"
    path.write_bytes(b"first line\nsecond line\n")

    class FailingDisk(io.BytesIO):
        def __iter__(self):
            yield b"first line\n"
            raise OSError(errno.EIO, os.strerror(errno.EIO))

    monkeypatch.setattr(hf_elmo.text_files, "open", lambda *_: FailingDisk(), raising=False)
    lines = read_lines(path)
    assert next(lines) == (0, "first line")
    with pytest.raises(TextFileError, match=rf"^cannot read {path}: {os.strerror(errno.EIO)}$"):
        next(lines)
