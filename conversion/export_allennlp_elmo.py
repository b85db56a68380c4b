"""Exports an hf_elmo model folder to the original layout (options.json + weights.hdf5) read by AllenNLP and bilm-tf:
`hf-elmo export` under this script's name (--help for the flags)."""

import sys
from pathlib import Path

from hf_elmo.cli import main as hf_elmo_main


def main(argv=None) -> int:
    return hf_elmo_main(["export", *(sys.argv[1:] if argv is None else argv)], prog=Path(__file__).name)


if __name__ == "__main__":
    sys.exit(main())
