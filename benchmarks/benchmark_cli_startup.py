"""Seconds from starting `hf-elmo --help` (and each `hf-elmo CMD --help`) to its exit, beside `import hf_elmo`.

Each command runs in a fresh process, `--runs` times (5 by default), and the median is printed as one markdown table;
the first rows are the interpreter's own start-up (`python -c pass`) and what `import hf_elmo` is made of. `hf-elmo`
is the console script installed beside this Python (`pip install -e .`).

    python benchmarks/benchmark_cli_startup.py --runs 5
"""

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import time
from pathlib import Path


def median_seconds(command: list[str], runs: int) -> float:
    """The median wall time of `runs` fresh processes of `command`, which must exit 0."""
    times = []
    for _ in range(runs):
        began = time.perf_counter()
        subprocess.run(command, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        times.append(time.perf_counter() - began)
    return statistics.median(times)


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--runs", type=int, default=5, help="processes per command (default 5)")
    args = parser.parse_args()
    script = shutil.which("hf-elmo", path=str(Path(sys.executable).parent))
    if script is None:
        sys.exit("no hf-elmo beside this Python: pip install -e . first")
    commands = {
        "python -c pass": [sys.executable, "-c", "pass"],
        # What `import hf_elmo` is made of: its registration with the Auto classes (`register_auto_classes`) needs
        # transformers' config class, which imports torch, and the model classes.
        'python -c "import torch"': [sys.executable, "-c", "import torch"],
        'python -c "from transformers import PretrainedConfig"': [
            sys.executable,
            "-c",
            "from transformers import PretrainedConfig",
        ],
        'python -c "from transformers import PreTrainedModel"': [
            sys.executable,
            "-c",
            "from transformers import PreTrainedModel",
        ],
        'python -c "import hf_elmo"': [sys.executable, "-c", "import hf_elmo"],
        # The form torchrun takes: the commands' module is imported before the parser runs.
        "python -m hf_elmo.cli --help": [sys.executable, "-m", "hf_elmo.cli", "--help"],
        "hf-elmo --help": [script, "--help"],
        **{f"hf-elmo {name} --help": [script, name, "--help"] for name in ("embed", "convert", "export", "info")},
        "hf-elmo pretrain --help": [script, "pretrain", "--help"],
    }
    load_before = f"{os.getloadavg()[0]:.2f}"
    print(f"| command | median of {args.runs} (s) |\n| --- | --- |")
    for name, command in commands.items():
        print(f"| `{name}` | {median_seconds(command, args.runs):.2f} |", flush=True)
    print(f"load average before / after: {load_before} / {os.getloadavg()[0]:.2f} (other processes share these cores)")


if __name__ == "__main__":
    main()
