"""Converts an ELMoForManyLangs model (an unpacked release folder or its .zip) into a model folder. The same as
`hf-elmo convert --format elmoformanylangs`; run with --help for the flags."""

import sys
from pathlib import Path

from hf_elmo.cli import main as hf_elmo_main


def main(argv=None) -> int:
    return hf_elmo_main(
        ["convert", "--format", "elmoformanylangs", *(sys.argv[1:] if argv is None else argv)],
        prog=Path(__file__).name,
    )


if __name__ == "__main__":
    sys.exit(main())
