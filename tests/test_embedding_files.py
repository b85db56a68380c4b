"""The `hf-elmo embed` job (`hf_elmo.embedding_files`): its functions called alone on a tiny
model, and runs of the command that stop, fail, resume and split the input between processes (`torchrun`)."""

import errno
import gzip
import json
import os
import resource
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import numpy as np
import pytest
import torch
from utils import (
    FLOAT32_TOLERANCE,
    PROJECT_ROOT,
    read_hdf5,
    reference_layers,
    run_cli,
    tiny_config,
    unreadable,
)

from hf_elmo import ElmoModel, ElmoTokenizer, embedding_files
from hf_elmo.cli import main
from hf_elmo.embedding_files import (
    DeferredStop,
    EmbedSettings,
    JobProcess,
    batch_lines,
    embed_file,
    open_output,
    run_identity,
)
from hf_elmo.errors import CommandError
from hf_elmo.folders import lock_output

ROOT = PROJECT_ROOT
WORDS = "the a cat dog sat on mat quickly under over house river été".split()


# -- the functions alone ----------------------------------------------------------------------------------------------


def test_batches_are_sorted_by_length_without_finished_lines_and_long_lines_come_alone():
    lines = [(0, "a b c"), (1, ""), (2, "a"), (3, None), (4, "a b c d e f"), (5, "a b")]
    batches = list(batch_lines(iter(lines), str.split, finished={"5"}, batch_size=2, max_words=4))
    assert batches == [
        [(1, []), (3, [])],  # an undecodable line skipped (None) is an entry of 0 words
        [(2, ["a"]), (0, ["a", "b", "c"])],
        [(4, ["a", "b", "c", "d", "e", "f"])],
    ]


def test_deferred_stop_waits_for_a_write_and_restores_the_handlers(tmp_path):
    previous = signal.getsignal(signal.SIGINT)
    with DeferredStop(tmp_path, done=3) as stop:
        with stop.writing():  # no signal yet: the run goes on
            stop.done += 1
        with pytest.raises(CommandError, match=f"stopped by signal {int(signal.SIGINT)} after 5 lines") as stopped:
            with stop.writing():
                os.kill(os.getpid(), signal.SIGINT)  # recorded, not raised: the write goes on to its end
                stop.done += 1
    assert stopped.value.code == 128 + signal.SIGINT
    assert signal.getsignal(signal.SIGINT) is previous


def test_a_stop_cuts_a_long_batch_at_once():
    """A batch that would compute for a minute (one very long line) is stopped within moments of SIGTERM: nothing of
    it was written, so nothing is lost but the batch."""
    timer = threading.Timer(0.2, os.kill, (os.getpid(), signal.SIGTERM))
    with DeferredStop(Path("out.h5.parts"), done=7):
        started = time.monotonic()
        timer.start()
        try:
            with pytest.raises(CommandError, match=r"stopped by signal 15 after 7 lines; the finished lines are in "):
                while time.monotonic() - started < 60:
                    pass
        finally:
            timer.join()  # the signal has come while the handler stood
    assert time.monotonic() - started < 5


def embed_settings(**overrides) -> EmbedSettings:
    """The top layer of each line, 2 lines a batch; lines of more than 2 words run in windows (`embed_long`)."""
    settings = dict(
        split=str.split, errors="strict", layers="top", pooled=False, batch_size=2, max_words=2, max_line_length=1000
    )
    return EmbedSettings(**{**settings, **overrides})


def test_embed_file_writes_every_line_and_resumes_only_its_own_run(tiny_model, tiny_tokenizer, tmp_path, monkeypatch):
    monkeypatch.delenv("WORLD_SIZE", raising=False)
    lines = ["the cat sat", "", "a dog", "the mat"]
    (tmp_path / "in.txt").write_text("\n".join(lines) + "\n", encoding="utf-8")
    identity = run_identity(tmp_path / "in.txt", "tiny", tiny_model, {"layers": "top"})
    process = JobProcess()
    counts = embed_file(
        tiny_model,
        tiny_tokenizer,
        tmp_path / "in.txt",
        tmp_path / "out",
        process,
        embed_settings(),
        identity=identity,
        output_format="npy",
        sentence_to_index=True,
        resume=False,
    )
    assert counts == (len(lines), [])
    for index, line in enumerate(lines):
        np.testing.assert_allclose(
            np.load(tmp_path / "out" / f"{index}.npy"),
            reference_layers(tiny_model, line.split())[-1],
            atol=FLOAT32_TOLERANCE,
        )
    assert json.loads((tmp_path / "out" / "sentence_to_index.json").read_text()) == {
        line: str(index) for index, line in enumerate(lines)
    }

    # A run stopped before its first line: its process, gone, holds no lock.
    open_output("npy", tmp_path / "stopped", identity, resume=False).release()
    state = (tmp_path / "stopped.parts" / "hf_elmo_embed.json").read_text()
    with pytest.raises(CommandError, match=r"cannot resume .*stopped\.parts: it holds a run with another layers \("):
        embed_file(
            tiny_model,
            tiny_tokenizer,
            tmp_path / "in.txt",
            tmp_path / "stopped",
            process,
            embed_settings(layers="all"),
            identity={**identity, "layers": "all"},
            output_format="npy",
            sentence_to_index=True,
            resume=True,
        )
    assert (tmp_path / "stopped.parts" / "hf_elmo_embed.json").read_text() == state


# -- runs of the command ----------------------------------------------------------------------------------------------


def corpus(n_lines: int, seed: int = 0) -> list[str]:
    rng = np.random.default_rng(seed)
    return [" ".join(rng.choice(WORDS, size=rng.integers(0, 12))) for _ in range(n_lines)]


def start_cli(*args, **popen) -> subprocess.Popen:
    """`python -m hf_elmo.cli ARGS` started in the background, offline."""
    env = {**os.environ, "PYTHONPATH": str(ROOT), "HF_HUB_OFFLINE": "1"}
    return subprocess.Popen([sys.executable, "-m", "hf_elmo.cli", *map(str, args)], env=env, **popen)


def wait_for_parts(parts: Path, pattern: str, count: int, process: subprocess.Popen, seconds: float):
    """Waits until `parts` holds `count` files matching `pattern`, the process ends or `seconds` pass."""
    deadline = time.monotonic() + seconds
    while len(list(parts.glob(pattern))) < count and process.poll() is None and time.monotonic() < deadline:
        time.sleep(0.05)


def test_killed_run_resumes_to_the_same_output(model_dir, tmp_path, capsys):
    lines = corpus(300)
    (tmp_path / "in.txt").write_text("\n".join(lines) + "\n", encoding="utf-8")
    output, parts = tmp_path / "out.h5", tmp_path / "out.h5.parts"
    process = start_cli(
        "embed", model_dir, tmp_path / "in.txt", output, "--all", "--batch-size", "1", stderr=subprocess.DEVNULL
    )
    wait_for_parts(parts, "*.npz", 20, process, seconds=60)
    process.send_signal(signal.SIGKILL)
    process.wait()
    written_before = list(parts.glob("*.npz"))
    assert 20 <= len(written_before) < len(lines) and not output.exists()

    capsys.readouterr()
    assert (
        main(
            ["embed", str(model_dir), str(tmp_path / "in.txt"), str(output), "--all", "--batch-size", "16", "--resume"]
        )
        == 0
    )
    assert f"resuming: {len(written_before)} of {len(lines)} lines" in capsys.readouterr().err
    assert main(["embed", str(model_dir), str(tmp_path / "in.txt"), str(tmp_path / "fresh.h5"), "--all"]) == 0
    got, want = read_hdf5(output), read_hdf5(tmp_path / "fresh.h5")
    assert sorted(got) == sorted(want) and len(got) == len(lines) + 1
    assert got.pop("sentence_to_index")[0] == want.pop("sentence_to_index")[0]
    for name in want:
        np.testing.assert_allclose(got[name], want[name], atol=FLOAT32_TOLERANCE, err_msg=name)


def test_write_failure_is_reported_and_resumable(model_dir, tmp_path):
    """A file-size limit makes a part write fail mid-run, as a full disk would."""
    output = tmp_path / "out.h5"
    failed = embed_until_the_disk_fills(model_dir, tmp_path, seed=1)
    assert failed.returncode != 0
    assert "Traceback" not in failed.stderr
    assert "hf-elmo: error: cannot write" in failed.stderr and "--resume" in failed.stderr
    parts = list((tmp_path / "out.h5.parts").iterdir())
    assert any(part.suffix == ".npz" for part in parts) and not any("partial" in part.name for part in parts)

    assert main(["embed", str(model_dir), str(tmp_path / "in.txt"), str(output), "--all", "--resume"]) == 0
    assert main(["embed", str(model_dir), str(tmp_path / "in.txt"), str(tmp_path / "fresh.h5"), "--all"]) == 0
    got, want = read_hdf5(output), read_hdf5(tmp_path / "fresh.h5")
    assert sorted(got) == sorted(want)
    for name in want:
        if name != "sentence_to_index":
            np.testing.assert_allclose(got[name], want[name], atol=FLOAT32_TOLERANCE)


def limit_file_size(limit: int):
    """For `preexec_fn`: writes past `limit` bytes fail with EFBIG, as on a full disk."""

    def apply():
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
        resource.setrlimit(resource.RLIMIT_FSIZE, (limit, limit))

    return apply


FULL_DISK_LINES = 200


def embed_until_the_disk_fills(model_dir: Path, folder: Path, seed: int):
    """`hf-elmo embed --all` of `FULL_DISK_LINES` lines into `folder/out.h5` under a file-size limit that fails a
    part's write, as a full disk would."""
    (folder / "in.txt").write_text("\n".join(corpus(FULL_DISK_LINES, seed=seed)) + "\n", encoding="utf-8")
    return run_cli(
        "embed",
        model_dir,
        folder / "in.txt",
        folder / "out.h5",
        "--all",
        "--batch-size",
        "32",
        preexec_fn=limit_file_size(60_000),
    )


def snapshot(folder: Path) -> dict[str, tuple[int, bytes]]:
    return {path.name: (path.stat().st_mtime_ns, path.read_bytes()) for path in sorted(folder.iterdir())}


def test_resume_refuses_a_run_with_another_input_model_or_option(model_dir, tmp_path, capsys):
    output, parts = tmp_path / "out.h5", tmp_path / "out.h5.parts"
    failed = embed_until_the_disk_fills(model_dir, tmp_path, seed=4)
    assert failed.returncode == 1 and any(part.suffix == ".npz" for part in parts.iterdir()), failed.stderr
    before = snapshot(parts)

    other_input = tmp_path / "other.txt"
    other_input.write_text("\n".join(corpus(200, seed=5)) + "\n", encoding="utf-8")
    other_model = tmp_path / "other-model"
    torch.manual_seed(7)
    ElmoModel(tiny_config()).save_pretrained(other_model)
    ElmoTokenizer(max_characters_per_token=20).save_pretrained(other_model)
    attempts = {
        "input file": [model_dir, other_input, output, "--all"],
        "model, model weights": [other_model, tmp_path / "in.txt", output, "--all"],
        "layers": [model_dir, tmp_path / "in.txt", output, "--top"],
        "pooled": [model_dir, tmp_path / "in.txt", output, "--all", "--pooled"],
        "cpu_matmul": [model_dir, tmp_path / "in.txt", output, "--all", "--cpu-matmul", "int8"],
    }
    for differs, arguments in attempts.items():
        capsys.readouterr()
        assert main(["embed", *map(str, arguments), "--resume"]) == 1
        error = capsys.readouterr().err.strip()
        assert error.startswith(f"hf-elmo: error: cannot resume {parts}: it holds a run with another {differs} ("), (
            error
        )
        assert "\n" not in error and not output.exists()
        assert snapshot(parts) == before  # left as it was

    assert main(["embed", str(model_dir), str(tmp_path / "in.txt"), str(output), "--all", "--resume"]) == 0
    assert len(read_hdf5(output)) == FULL_DISK_LINES + 1  # every line, and sentence_to_index


def test_stopped_run_names_its_parts_folder(model_dir, tmp_path):
    (tmp_path / "in.txt").write_text("\n".join(corpus(300, seed=6)) + "\n", encoding="utf-8")
    output, parts = tmp_path / "out.h5", tmp_path / "out.h5.parts"
    process = start_cli(
        "embed",
        model_dir,
        tmp_path / "in.txt",
        output,
        "--all",
        "--batch-size",
        "1",
        stderr=subprocess.PIPE,
        text=True,
    )
    wait_for_parts(parts, "*.npz", 5, process, seconds=60)
    process.send_signal(signal.SIGINT)
    stderr = process.communicate(timeout=60)[1]
    assert process.returncode == 128 + signal.SIGINT
    error = [line for line in stderr.splitlines() if "hf-elmo: error" in line]
    assert len(error) == 1 and f"the finished lines are in {parts}/, rerun with --resume" in error[0], stderr
    assert not output.exists() and len(list(parts.glob("*.npz"))) >= 5


def test_npy_output_is_complete_or_absent(model_dir, model, tmp_path):
    lines = corpus(40, seed=8)
    lines[30] = " ".join(["dog"] * 400)  # its .npy (3 x 400 x 16 float32) is past the file-size limit below
    (tmp_path / "in.txt").write_text("\n".join(lines) + "\n", encoding="utf-8")
    output, parts = tmp_path / "npy", tmp_path / "npy.parts"
    failed = run_cli(
        "embed", model_dir, tmp_path / "in.txt", output, "--all", "--format", "npy", preexec_fn=limit_file_size(50_000)
    )
    assert failed.returncode == 1 and "hf-elmo: error: cannot write" in failed.stderr, failed.stderr
    assert f"cannot write {output}: File too large;" in failed.stderr  # the system's cause, not numpy's byte counts
    assert not output.exists()
    assert not any("partial" in path.name for path in parts.iterdir()) and (parts / "0.npy").is_file()

    assert (
        main(["embed", str(model_dir), str(tmp_path / "in.txt"), str(output), "--all", "--format", "npy", "--resume"])
        == 0
    )
    assert not parts.exists()
    assert sorted(path.name for path in output.iterdir()) == sorted(
        [f"{i}.npy" for i in range(len(lines))] + ["sentence_to_index.json"]
    )
    np.testing.assert_allclose(
        np.load(output / "30.npy"), reference_layers(model, lines[30].split()), atol=FLOAT32_TOLERANCE
    )


class FullDiskFile:
    """A file opened for writing on a full disk: every write fails with ENOSPC."""

    def __init__(self, handle):
        self.handle = handle

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.handle.close()

    def write(self, data):
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))


def stop_on_a_full_disk(model_dir: Path, folder: Path, monkeypatch, capsys) -> str:
    """`embed --format npy` of 6 lines into `folder/npy`, one a batch, on a disk that fills after 3 lines: the
    command's stderr, once it failed."""
    (folder / "in.txt").write_text("\n".join(corpus(6, seed=12)) + "\n", encoding="utf-8")
    written, real_create = [], embedding_files.create_exclusively

    def filling_create(path, *args, **kwargs):
        handle = real_create(path, *args, **kwargs)
        if str(path).endswith(".npy.partial"):
            written.append(path)
            return FullDiskFile(handle) if len(written) > 3 else handle
        return handle

    with monkeypatch.context() as patch:
        patch.setattr(embedding_files, "create_exclusively", filling_create)
        capsys.readouterr()
        argv = ["embed", model_dir, folder / "in.txt", folder / "npy", "--top", "--format", "npy", "--batch-size", "1"]
        assert main(list(map(str, argv))) == 1
    return capsys.readouterr().err


def test_a_full_disk_is_named_and_the_run_resumes(model_dir, tmp_path, monkeypatch, capsys):
    """numpy writing an array to a full disk says only "2560 requested and 992 written": the command names the
    cause, as the system does, and keeps the lines written for --resume."""
    output, parts = tmp_path / "npy", tmp_path / "npy.parts"
    assert stop_on_a_full_disk(model_dir, tmp_path, monkeypatch, capsys).splitlines()[-1] == (
        f"hf-elmo: error: cannot write {output}: No space left on device; the finished lines are kept in {parts}/, "
        "rerun with --resume once fixed"
    )
    kept = sorted(path.name for path in parts.iterdir())
    assert len(kept) == 4 and kept[-1] == "hf_elmo_embed.json" and all(name.endswith(".npy") for name in kept[:3])
    argv = ["embed", model_dir, tmp_path / "in.txt", output, "--top", "--format", "npy", "--resume"]
    assert main(list(map(str, argv))) == 0
    assert len(list(output.glob("*.npy"))) == 6 and not parts.exists()


def test_a_second_run_on_the_same_parts_stops_at_once(model_dir, tmp_path, monkeypatch, capsys):
    """Two `--resume` runs on one `OUTPUT.parts/` would both redo its lines and both fail at assembly: while one
    holds the parts, the other stops in one line, changing nothing."""
    stop_on_a_full_disk(model_dir, tmp_path, monkeypatch, capsys)
    parts, before = tmp_path / "npy.parts", snapshot(tmp_path / "npy.parts")
    argv = ["embed", model_dir, tmp_path / "in.txt", tmp_path / "npy", "--top", "--format", "npy", "--resume"]
    with lock_output(tmp_path / "npy"):  # as the first run, still writing, holds it
        assert main(list(map(str, argv))) == 1
    assert capsys.readouterr().err == (
        f"hf-elmo: error: another run (process {os.getpid()}) is writing {tmp_path / 'npy'}; wait for it to end, or "
        "stop it first\n"
    )
    assert snapshot(parts) == before and not (tmp_path / "npy").exists()
    assert main(list(map(str, argv))) == 0  # once it is gone, the parts resume


def test_a_line_longer_than_the_limit_is_refused_before_anything_is_written(model_dir, tmp_path, capsys):
    """A line of hundreds of megabytes would take many minutes and gigabytes: the input is refused, naming the
    line and the limit, before any line is written."""
    (tmp_path / "in.txt").write_text("the cat\n" + "a " * 600 + "\nthe dog\n", encoding="utf-8")
    argv = ["embed", str(model_dir), str(tmp_path / "in.txt"), str(tmp_path / "out.h5"), "--top"]
    capsys.readouterr()
    assert main([*argv, "--max-line-length", "1000"]) == 1
    assert capsys.readouterr().err == (
        f"hf-elmo: error: {tmp_path / 'in.txt'} line 2: 1,199 characters, more than the 1,000 a line may hold; split "
        "it into sentences, or raise --max-line-length\n"
    )
    assert sorted(path.name for path in tmp_path.iterdir()) == ["in.txt"]
    assert main([*argv, "--max-line-length", "1199"]) == 0
    assert read_hdf5(tmp_path / "out.h5")["1"].shape == (600, 16)


def torchrun_cli(*args, processes: int = 2, **popen) -> subprocess.Popen:
    """`torchrun --nproc_per_node PROCESSES -m hf_elmo.cli ARGS` on the CPU (gloo), a free port chosen by torchrun."""
    env = {
        **os.environ,
        "PYTHONPATH": str(ROOT),
        "HF_HUB_OFFLINE": "1",
        "OMP_NUM_THREADS": "1",
        "CUDA_VISIBLE_DEVICES": "",
    }
    command = [
        sys.executable,
        "-m",
        "torch.distributed.run",
        "--standalone",
        "--nproc_per_node",
        str(processes),
        "-m",
        "hf_elmo.cli",
        *map(str, args),
    ]
    return subprocess.Popen(command, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, **popen)


def assert_same_embeddings(got: dict[str, np.ndarray], want: dict[str, np.ndarray]):
    """The same datasets and sentence_to_index; the values within tolerance (other ranks batch lines differently)."""
    assert sorted(got) == sorted(want)
    assert json.loads(got.pop("sentence_to_index")[0]) == json.loads(want.pop("sentence_to_index")[0])
    for name in want:
        np.testing.assert_allclose(got[name], want[name], atol=FLOAT32_TOLERANCE, err_msg=name)


@pytest.mark.slow
def test_torchrun_two_processes_write_the_single_process_file(model_dir, tmp_path):
    lines = corpus(61, seed=9)
    (tmp_path / "in.txt").write_text("\n".join(lines) + "\n", encoding="utf-8")
    run = torchrun_cli("embed", model_dir, tmp_path / "in.txt", tmp_path / "two.h5", "--all", "--batch-size", "4")
    stderr = run.communicate(timeout=300)[1]
    assert run.returncode == 0, stderr[-4000:]
    assert f"wrote {len(lines)} lines to {tmp_path / 'two.h5'} from 2 processes" in stderr
    assert not (tmp_path / "two.h5.parts").exists()
    assert main(["embed", str(model_dir), str(tmp_path / "in.txt"), str(tmp_path / "one.h5"), "--all"]) == 0
    assert_same_embeddings(read_hdf5(tmp_path / "two.h5"), read_hdf5(tmp_path / "one.h5"))


@pytest.mark.slow
def test_torchrun_failure_on_one_rank_writes_no_output(model_dir, tmp_path):
    """Line 4 is not UTF-8 and belongs to rank 1 (odd index): rank 0 embeds its lines, then all stop, OUTPUT absent."""
    lines = [line.encode() for line in corpus(40, seed=10)]
    lines[3] = b"sat \xff on"
    (tmp_path / "in.txt").write_bytes(b"\n".join(lines) + b"\n")
    output, parts = tmp_path / "out.h5", tmp_path / "out.h5.parts"
    run = torchrun_cli("embed", model_dir, tmp_path / "in.txt", output, "--all", "--batch-size", "4")
    stderr = run.communicate(timeout=300)[1]
    assert run.returncode != 0
    errors = [line for line in stderr.splitlines() if "hf-elmo: error" in line]
    assert errors == [
        f"hf-elmo: error: rank 1: {tmp_path / 'in.txt'} line 4: not valid UTF-8 (invalid start byte "
        f"at byte 4); pass --errors replace or --errors skip"
    ], stderr[-4000:]
    assert not output.exists()
    written = set()
    for part in parts.glob("*.npz"):
        with np.load(part) as arrays:
            written.update(int(name) for name in arrays.files)
    assert written == set(range(0, len(lines), 2))  # rank 0's lines, all of them


def test_world_size_without_a_launcher_is_one_line(model_dir, tmp_path, monkeypatch, capsys):
    (tmp_path / "in.txt").write_text("the cat\n", encoding="utf-8")
    monkeypatch.setenv("WORLD_SIZE", "2")
    monkeypatch.setenv("RANK", "0")
    monkeypatch.delenv("MASTER_ADDR", raising=False)
    assert main(["embed", str(model_dir), str(tmp_path / "in.txt"), str(tmp_path / "o.h5"), "--top"]) == 1
    error = capsys.readouterr().err.strip()
    assert (
        error.startswith("hf-elmo: error: cannot join the other 1 processes (WORLD_SIZE is set): ")
        and error.endswith("; start hf-elmo with torchrun or accelerate launch")
        and "\n" not in error
    ), error
    assert not (tmp_path / "o.h5").exists() and not (tmp_path / "o.h5.parts").exists()


@pytest.mark.slow
def test_torchrun_killed_run_resumes_per_rank_and_writes_npy(model_dir, tmp_path):
    lines = corpus(400, seed=11)
    (tmp_path / "in.txt").write_text("\n".join(lines) + "\n", encoding="utf-8")
    output, parts = tmp_path / "npy", tmp_path / "npy.parts"
    arguments = ["embed", model_dir, tmp_path / "in.txt", output, "--top", "--format", "npy", "--batch-size", "1"]
    run = torchrun_cli(*arguments)
    wait_for_parts(parts, "*.npy", 40, run, seconds=120)
    # The ranks, then torchrun, as a lost node would (torchrun starts each rank in a session of its own).
    for pid in [*map(int, Path(f"/proc/{run.pid}/task/{run.pid}/children").read_text().split()), run.pid]:
        os.kill(pid, signal.SIGKILL)
    run.communicate()
    written = {int(path.stem) for path in parts.glob("*.npy")}
    assert 40 <= len(written) < len(lines) and not output.exists()
    assert {index % 2 for index in written} == {0, 1}  # both ranks had written lines

    resumed = torchrun_cli(*arguments, "--resume")
    stderr = resumed.communicate(timeout=300)[1]
    assert resumed.returncode == 0, stderr[-4000:]
    assert f"resuming: {len(written)} of {len(lines)} lines are already written" in stderr
    assert (
        main(["embed", str(model_dir), str(tmp_path / "in.txt"), str(tmp_path / "one"), "--top", "--format", "npy"])
        == 0
    )
    assert sorted(path.name for path in output.iterdir()) == sorted(path.name for path in (tmp_path / "one").iterdir())
    assert json.loads((output / "sentence_to_index.json").read_text()) == json.loads(
        (tmp_path / "one" / "sentence_to_index.json").read_text()
    )
    for index in range(len(lines)):
        np.testing.assert_allclose(
            np.load(output / f"{index}.npy"),
            np.load(tmp_path / "one" / f"{index}.npy"),
            atol=FLOAT32_TOLERANCE,
            err_msg=str(index),
        )


def test_gzip_input_is_read(model_dir, tmp_path):
    lines = corpus(5, seed=2)
    (tmp_path / "in.txt").write_text("\n".join(lines) + "\n", encoding="utf-8")
    (tmp_path / "in.txt.gz").write_bytes(gzip.compress((tmp_path / "in.txt").read_bytes()))
    for name in ("in.txt", "in.txt.gz"):
        assert main(["embed", str(model_dir), str(tmp_path / name), str(tmp_path / f"{name}.h5"), "--top"]) == 0
    plain, compressed = read_hdf5(tmp_path / "in.txt.h5"), read_hdf5(tmp_path / "in.txt.gz.h5")
    assert sorted(plain) == sorted(compressed)
    for name in plain:
        np.testing.assert_array_equal(plain[name], compressed[name], err_msg=name)  # the same batches: same bits


# -- links and damaged parts (issue 50) -------------------------------------------------------------------------------


def embed_args(model_dir: Path, folder: Path, output: str, *options) -> list[str]:
    return ["embed", str(model_dir), str(folder / "in.txt"), str(folder / output), "--top", *options]


@pytest.mark.parametrize("name", [".out.h5.lock", ".out.h5.partial"])
def test_a_link_where_embed_makes_its_own_file_is_refused_and_what_it_names_is_unchanged(
    model_dir, tmp_path, capsys, name
):
    """`ln -s mine.txt .out.h5.lock` (or `.out.h5.partial`, where OUTPUT is assembled): the run is refused in one
    line before any line is embedded, the link is not followed and `mine.txt` keeps its bytes."""
    (tmp_path / "in.txt").write_text("\n".join(corpus(5, seed=3)) + "\n", encoding="utf-8")
    mine = tmp_path / "mine.txt"
    mine.write_bytes(b"the user's own bytes\n")
    link = tmp_path / name
    link.symlink_to(mine)
    capsys.readouterr()
    assert main(embed_args(model_dir, tmp_path, "out.h5")) == 1
    what = "lock file" if name.endswith(".lock") else "staging file"
    assert capsys.readouterr().err == (
        f"hf-elmo: error: {link} is a link (to {mine}) where hf_elmo makes its {what}; it was not followed and "
        "nothing was written through it: remove the link and run again\n"
    )
    assert mine.read_bytes() == b"the user's own bytes\n" and link.is_symlink()
    assert sorted(path.name for path in tmp_path.iterdir()) == sorted(["in.txt", "mine.txt", name])


def stopped_hdf5_run(model_dir: Path, folder: Path, monkeypatch, make_link: bool = False) -> Path:
    """The parts folder of an `embed` of 6 lines, 2 a batch, stopped at its assembly as a resumed run finds it: by a
    link made at `.out.h5.partial` meanwhile (`make_link`, as another process could), or else by a disk that fills
    then (a stand-in: the assembly raises what a full disk does)."""
    (folder / "in.txt").write_text("\n".join(corpus(6, seed=8)) + "\n", encoding="utf-8")
    link, finish = folder / ".out.h5.partial", embedding_files.Hdf5Output.finish

    def stopped(output, *args):
        if make_link:
            link.symlink_to(folder / "mine.txt")
            return finish(output, *args)
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    with monkeypatch.context() as patch:
        patch.setattr(embedding_files.Hdf5Output, "finish", stopped)
        assert main(embed_args(model_dir, folder, "out.h5", "--batch-size", "2")) == 1
    return folder / "out.h5.parts"


def test_a_link_made_where_embed_assembles_its_output_is_refused_and_the_lines_kept(
    model_dir, tmp_path, monkeypatch, capsys
):
    """A link made at `.out.h5.partial` while the run embeds: the assembly is refused in one line, `mine.txt` keeps
    its bytes, and the lines are kept for --resume, which, the link gone, finishes."""
    mine = tmp_path / "mine.txt"
    mine.write_bytes(b"the user's own bytes\n")
    capsys.readouterr()
    parts = stopped_hdf5_run(model_dir, tmp_path, monkeypatch, make_link=True)
    link = tmp_path / ".out.h5.partial"
    assert capsys.readouterr().err.splitlines()[-1] == (
        f"hf-elmo: error: cannot write {tmp_path / 'out.h5'}: {link} is a link (to {mine}) where hf_elmo makes its "
        "staging file; it was not followed and nothing was written through it: remove the link and run again; the "
        f"finished lines are kept in {parts}/, rerun with --resume once fixed"
    )
    assert mine.read_bytes() == b"the user's own bytes\n" and not (tmp_path / "out.h5").exists()
    link.unlink()
    assert main(embed_args(model_dir, tmp_path, "out.h5", "--resume")) == 0
    assert len(read_hdf5(tmp_path / "out.h5")) == 7 and mine.read_bytes() == b"the user's own bytes\n"


def pickled_part(path: Path) -> None:
    """A part holding a pickled object where a line's array would be (np.load refuses it unread; so must resume)."""
    with open(path, "wb") as handle:
        np.savez(handle, **{path.stem: np.array([{"a": 1}], dtype=object)})


def lying_header(path: Path) -> None:
    """A part whose array's header claims more values than its bytes hold."""
    arrays = dict(np.load(path))
    name, array = next(iter(arrays.items()))
    arrays[name] = np.zeros((array.shape[0] + 1, *array.shape[1:]), dtype=np.float32)
    with open(path, "wb") as handle:
        np.savez(handle, **arrays)
    data = bytearray(path.read_bytes())
    cut = data.find(b"\x93NUMPY")  # the header of the first array, kept; its values cut by one row
    path.write_bytes(bytes(data[: cut + 128]) + bytes(data[cut + 128 + 4 * array[0].size :]))


DAMAGES = {
    "cut in half": lambda path: path.write_bytes(path.read_bytes()[: path.stat().st_size // 2]),
    "a pickled object": pickled_part,
    "a byte of its values changed": lambda path: path.write_bytes(
        (lambda data: data[:200] + bytes([data[200] ^ 0xFF]) + data[201:])(path.read_bytes())
    ),
    "a header claiming more values than it holds": lying_header,
}


@pytest.mark.parametrize("damage", DAMAGES)
def test_a_damaged_part_is_embedded_again_before_the_run_goes_on(model_dir, tmp_path, monkeypatch, capsys, damage):
    """A part of a stopped run cut in half, holding a pickled object, or with bytes that do not match its checksum or
    header: `--resume` names it in one line, removes it and embeds its lines again, before any other work; the
    output is the one a run that was never stopped writes."""
    parts = stopped_hdf5_run(model_dir, tmp_path, monkeypatch)
    capsys.readouterr()
    damaged = sorted(parts.glob("*.npz"), key=lambda part: int(part.stem))[1]
    DAMAGES[damage](damaged)
    assert main(embed_args(model_dir, tmp_path, "out.h5", "--resume")) == 0
    err = capsys.readouterr().err
    told = [line for line in err.splitlines() if " is damaged " in line]
    assert len(told) == 1 and told[0].startswith(f"hf-elmo: {damaged} is damaged (") and "Traceback" not in err
    assert told[0].endswith("): removed, its lines are embedded again")
    assert err.index(told[0]) < err.index("hf-elmo: resuming: ")  # before any line is embedded
    assert main(embed_args(model_dir, tmp_path, "fresh.h5", "--batch-size", "2")) == 0
    got, want = read_hdf5(tmp_path / "out.h5"), read_hdf5(tmp_path / "fresh.h5")
    assert sorted(got) == sorted(want)
    for name in want:
        if name != "sentence_to_index":
            np.testing.assert_allclose(got[name], want[name], atol=FLOAT32_TOLERANCE, err_msg=name)


def test_a_damaged_npy_part_is_embedded_again(model_dir, tmp_path, monkeypatch, capsys):
    """The same check for `--format npy`, whose parts are `.npy` files: one cut short is embedded again."""
    stop_on_a_full_disk(model_dir, tmp_path, monkeypatch, capsys)
    damaged = sorted((tmp_path / "npy.parts").glob("*.npy"))[0]
    damaged.write_bytes(damaged.read_bytes()[:-8])
    argv = ["embed", model_dir, tmp_path / "in.txt", tmp_path / "npy", "--top", "--format", "npy", "--resume"]
    assert main(list(map(str, argv))) == 0
    assert f"hf-elmo: {damaged} is damaged (line {damaged.stem}: its header says" in capsys.readouterr().err
    assert len(list((tmp_path / "npy").glob("*.npy"))) == 6
    for index in range(6):  # each line whole: its words' vectors
        assert np.load(tmp_path / "npy" / f"{index}.npy").dtype == np.float32


def test_a_run_state_that_is_not_json_is_one_line(model_dir, tmp_path, monkeypatch, capsys):
    """`OUTPUT.parts/hf_elmo_embed.json` damaged: `--resume` is refused in one line naming it, changing nothing."""
    parts = stopped_hdf5_run(model_dir, tmp_path, monkeypatch)
    capsys.readouterr()
    (parts / "hf_elmo_embed.json").write_text('["not", "an object"]')
    before = snapshot(parts)
    assert main(embed_args(model_dir, tmp_path, "out.h5", "--resume")) == 1
    assert capsys.readouterr().err == (
        f"hf-elmo: error: cannot resume {parts}: {parts / 'hf_elmo_embed.json'}: the file is a list of 2 items, not "
        f"an object; remove {parts} to start over\n"
    )
    assert snapshot(parts) == before


def test_an_input_without_read_permission_is_one_line_and_nothing_is_written(model_dir, tmp_path, monkeypatch, capsys):
    """Was a `PermissionError` traceback from `text_files` (issue 50). The system's refusal is made by a stand-in
    where the tests run as root, whom no permission keeps out."""
    path = tmp_path / "in.txt"
    path.write_text("a line\n")
    unreadable(monkeypatch, path)
    capsys.readouterr()
    assert main(embed_args(model_dir, tmp_path, "out.h5")) == 1
    assert capsys.readouterr().err == f"hf-elmo: error: cannot read {path}: Permission denied\n"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["in.txt"]


def test_a_named_pipe_as_input_is_named_as_one_without_waiting(model_dir, tmp_path, capsys):
    """A FIFO given as input was "no such input file": it exists. Opening it would wait for a writer. Answered by the
    command line (`command_line.missing_path`, in `text_files.unreadable_reason`'s words), before a model loads."""
    fifo = tmp_path / "in.fifo"
    os.mkfifo(fifo)
    capsys.readouterr()
    assert main(["embed", str(model_dir), str(fifo), str(tmp_path / "out.h5"), "--top"]) == 1
    assert capsys.readouterr().err == (
        f"hf-elmo: error: cannot read {fifo}: it is a named pipe (FIFO), not a file, and its lines are read more than "
        "once: write them to a file first\n"
    )


def test_embed_names_a_named_pipe_as_one_without_waiting(model, tmp_path):
    """What embed itself says of a FIFO, once the command line lets it through: its one line, unopened."""
    fifo = tmp_path / "in.fifo"
    os.mkfifo(fifo)
    with pytest.raises(CommandError, match=f"^cannot read {fifo}: it is a named pipe \\(FIFO\\), not a file"):
        embed_file(
            model,
            ElmoTokenizer(max_characters_per_token=model.config.max_characters_per_token),
            fifo,
            tmp_path / "out.h5",
            JobProcess(),
            embed_settings(),
            identity={},
            output_format="hdf5",
            sentence_to_index=True,
            resume=False,
        )
    assert sorted(path.name for path in tmp_path.iterdir()) == ["in.fifo"]
