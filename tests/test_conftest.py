"""The shared test setup itself: without ../shared the parity tests skip with a reason, except in CI, where they
fail (a CI run must not pass by skipping them)."""

import os
import subprocess
import sys
from pathlib import Path

TESTS_DIR = Path(__file__).resolve().parent


def run_pytest(target: str, cwd: Path, ci: str, path: list[Path], **variables) -> subprocess.CompletedProcess:
    """`pytest -q -rs -n 0 TARGET` (one test, without the project's worker processes) in a child process from
    `cwd`, under `CI=ci`, with `path` as its PYTHONPATH and the environment `variables` set."""
    env = {**os.environ, **variables, "CI": ci, "PYTHONPATH": os.pathsep.join(map(str, path))}
    command = [sys.executable, "-m", "pytest", "-q", "-rs", "-n", "0", "-p", "no:cacheprovider", target]
    return subprocess.run(command, env=env, capture_output=True, text=True, timeout=120, cwd=cwd)


def run_parity_test(tmp_path, ci: str) -> subprocess.CompletedProcess:
    target = f"{TESTS_DIR / 'test_modeling_elmo.py'}::test_parity_first_batch_without_state"
    return run_pytest(target, TESTS_DIR.parent, ci, [TESTS_DIR.parent], HF_ELMO_SHARED=str(tmp_path / "absent"))


def test_parity_tests_skip_with_a_reason_without_shared(tmp_path):
    result = run_parity_test(tmp_path, ci="")
    assert result.returncode == 0, result.stdout
    assert "1 skipped" in result.stdout and "the original test checkpoint is not at" in result.stdout


def test_parity_tests_fail_in_ci_without_shared(tmp_path):
    result = run_parity_test(tmp_path, ci="true")
    assert result.returncode == 1, result.stdout
    assert "1 error" in result.stdout and "CI=true and the original test checkpoint is not at" in result.stdout


# A test module that needs a package no machine has, through `utils.require`.
REQUIRING_TEST = """
from utils import require


def test_needs_the_package():
    require("hf_elmo_absent_package", reason="the package this test is about")
"""


def run_requiring_test(tmp_path, ci: str) -> subprocess.CompletedProcess:
    (tmp_path / "test_requiring.py").write_text(REQUIRING_TEST)
    return run_pytest("test_requiring.py", tmp_path, ci, [TESTS_DIR, TESTS_DIR.parent])


def test_require_skips_a_missing_package_outside_ci(tmp_path):
    result = run_requiring_test(tmp_path, ci="")
    assert result.returncode == 0, result.stdout
    assert "1 skipped" in result.stdout and "the package this test is about" in result.stdout


def test_require_fails_on_a_missing_package_under_ci(tmp_path):
    """Under `CI=true`, where `.ci/run` installed the test extra, a package that does not import fails the test."""
    result = run_requiring_test(tmp_path, ci="true")
    assert result.returncode == 1, result.stdout
    assert "1 failed" in result.stdout
    assert "CI=true and hf_elmo_absent_package does not import" in result.stdout
    assert "the package this test is about" in result.stdout
