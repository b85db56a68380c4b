"""Converts an ELMoForManyLangs model (HIT-SCIR's releases: an unpacked folder or its .zip) into an hf_elmo model
folder, optionally uploading it to the Hugging Face Hub:

    python conversion/convert_elmoformanylangs.py --model-dir RELEASE.zip --output-dir elmo \\
        [--overwrite] [--push-to-hub USER/REPO [--private]]

This is `hf-elmo convert --format elmoformanylangs` under this script's name: the same parser, flags (--help lists
them) and messages. The conversion itself is `hf_elmo.conversion_elmoformanylangs.convert_elmoformanylangs`.
"""

import sys
from pathlib import Path

from hf_elmo.cli import main as hf_elmo_main
from hf_elmo.errors import run_entry_point


def main(argv=None) -> int:
    return hf_elmo_main(
        ["convert", "--format", "elmoformanylangs", *(sys.argv[1:] if argv is None else argv)],
        prog=Path(__file__).name,
    )


if __name__ == "__main__":
    sys.exit(run_entry_point(main))
