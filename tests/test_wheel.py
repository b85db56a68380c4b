"""The package as a user gets it: the sdist and the wheel built with the standard front end (`python -m build`, the
wheel from the sdist), both passing `twine check --strict`, and the wheel installed into a fresh virtual environment,
where the quickstart, `hf-elmo embed` and a pipeline run from a folder outside the checkout.

Nothing is downloaded: the build runs without isolation (setuptools, from the test extra, is installed here), and the
fresh environment sees this environment's packages through a `.pth` line naming its site-packages. A `.pth` line adds
a folder to `sys.path` without reading the `.pth` files inside it, so the editable install of this checkout (a finder
that those files start) is not seen there: `hf_elmo` can only come from the wheel.
"""

import os
import shutil
import subprocess
import sys
import sysconfig
import textwrap
from pathlib import Path

import h5py
import pytest
from utils import require

import hf_elmo

require("build", reason="building the wheel needs build, of the test extra")
require("twine", reason="checking the artifacts needs twine, of the test extra")

ROOT = Path(__file__).resolve().parents[1]
# What the build does not read: environments, caches, outputs, earlier builds.
NOT_SOURCES = (".git", ".venv", ".device", "outputs", "build", "dist", "*.egg-info", "__pycache__", ".*_cache")
# The one place the version is written; the artifacts' names and metadata read it from there.
VERSION = hf_elmo.__version__


def run(command: list, cwd: Path, env: dict | None = None, timeout: int = 300) -> subprocess.CompletedProcess:
    """`command` from `cwd`; a non-zero exit fails the test with its output."""
    result = subprocess.run(list(map(str, command)), capture_output=True, text=True, cwd=cwd, env=env, timeout=timeout)
    assert result.returncode == 0, f"{command}\n{result.stdout}\n{result.stderr}"
    return result


@pytest.fixture(scope="module")
def artifacts(tmp_path_factory) -> Path:
    """The sdist and the wheel of a copy of this checkout (a build writes `build/` and `*.egg-info` beside the
    sources, which the checkout must not get), in a folder of their own."""
    folder = tmp_path_factory.mktemp("wheel")
    sources = folder / "sources"
    shutil.copytree(ROOT, sources, ignore=shutil.ignore_patterns(*NOT_SOURCES))
    run([sys.executable, "-m", "build", "--no-isolation", "--outdir", folder / "dist", sources], cwd=folder)
    return folder / "dist"


@pytest.fixture(scope="module")
def installed(artifacts, tmp_path_factory) -> tuple[Path, dict]:
    """A fresh virtual environment holding the wheel, this environment's packages beside it, and the environment
    variables to run it with (offline, no PYTHONPATH): `(its bin folder, variables)`."""
    venv = tmp_path_factory.mktemp("venv")
    run([sys.executable, "-m", "venv", "--without-pip", venv], cwd=venv)
    python = venv / "bin" / "python"
    site_packages = Path(
        run([python, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"], venv).stdout.strip()
    )
    (site_packages / "outer_environment.pth").write_text(sysconfig.get_paths()["purelib"] + "\n", encoding="utf-8")
    env = {key: value for key, value in os.environ.items() if key not in ("PYTHONPATH", "PYTHONHOME", "VIRTUAL_ENV")}
    env.update(HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1", PATH=f"{venv / 'bin'}{os.pathsep}{env['PATH']}")
    # --ignore-installed: the outer environment's editable hf_elmo is seen by pip here, and must be left alone.
    wheel = artifacts / f"hf_elmo-{VERSION}-py3-none-any.whl"
    run([python, "-m", "pip", "install", "-q", "--no-deps", "--no-index", "--ignore-installed", wheel], venv, env)
    return venv / "bin", env


def test_sdist_and_wheel_pass_twine_check(artifacts):
    assert sorted(path.name for path in artifacts.iterdir()) == [
        f"hf_elmo-{VERSION}-py3-none-any.whl",
        f"hf_elmo-{VERSION}.tar.gz",
    ]
    result = run([sys.executable, "-m", "twine", "check", "--strict", *sorted(artifacts.iterdir())], cwd=artifacts)
    assert result.stdout.count("PASSED") == 2, result.stdout


@pytest.mark.slow
def test_the_installed_wheel_runs_the_quickstart_embed_and_a_pipeline_outside_the_checkout(installed, tmp_path):
    bin_folder, env = installed
    where = textwrap.dedent("""
        import sys
        import hf_elmo, hf_elmo.cli
        print(hf_elmo.__file__, hf_elmo.cli.__file__, sep="\\n")
        print(*(finder.__module__ for finder in sys.meta_path), sep="\\n", file=sys.stderr)
    """)
    found = run([bin_folder / "python", "-c", where], tmp_path, env)
    venv = bin_folder.parent.resolve()
    assert all(Path(path).resolve().is_relative_to(venv) for path in found.stdout.split()), found.stdout
    assert not any(finder.startswith("__editable__") for finder in found.stderr.split()), found.stderr

    quickstart = run([bin_folder / "hf-elmo", "quickstart"], tmp_path, env).stdout.splitlines()
    assert any(line.startswith("The layer that separates the senses best here is layer ") for line in quickstart)
    assert (tmp_path / "quickstart-bae.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"

    (tmp_path / "in.txt").write_text("배가 고프다\n이 영화 정말 재미있다\n", encoding="utf-8")
    run([bin_folder / "hf-elmo", "embed", "ko-nsmc", "in.txt", "out.h5", "--top", "--pretokenize"], tmp_path, env)
    bundled = hf_elmo.bundled_model_path("ko-nsmc")  # the same files as the wheel's
    with h5py.File(tmp_path / "out.h5", "r") as handle:
        assert sorted(handle) == ["0", "1", "sentence_to_index"]
        # Each position: [forward ; backward], a projection each way.
        assert handle["0"].shape[1] == 2 * hf_elmo.ElmoConfig.from_pretrained(bundled).projection_dim

    classify = textwrap.dedent("""
        from transformers import pipeline
        import hf_elmo

        classifier = pipeline("text-classification", model=hf_elmo.bundled_model_path("ko-nsmc-sentiment"))
        for result in classifier(["정말 재미있고 감동적인 영화였어요", "지루하고 스토리도 엉망이다"]):
            print(result["label"])
    """)
    assert run([bin_folder / "python", "-c", classify], tmp_path, env).stdout.split() == ["positive", "negative"]
