"""Converts an original ELMo checkpoint (options.json + weights.hdf5, local paths or URLs) into a model folder,
optionally uploading it to the Hugging Face Hub: `hf-elmo convert` under this script's name (--help for the flags)."""

import sys
from pathlib import Path

from hf_elmo.cli import main as hf_elmo_main


def main(argv=None) -> int:
    return hf_elmo_main(["convert", *(sys.argv[1:] if argv is None else argv)], prog=Path(__file__).name)


if __name__ == "__main__":
    sys.exit(main())
