"""Exports an hf_elmo model folder to the original layout (options.json + weights.hdf5) that AllenNLP and bilm-tf
read, bit for bit the weights a converted checkpoint came from:

    python conversion/export_allennlp_elmo.py --model-dir elmo --output-dir elmo-original [--overwrite]

This is `hf-elmo export` under this script's name: the same parser, flags (--help lists them) and messages. The
export itself is `hf_elmo.conversion_original.export_original`.
"""

import sys
from pathlib import Path

from hf_elmo.cli import main as hf_elmo_main
from hf_elmo.errors import run_entry_point


def main(argv=None) -> int:
    return hf_elmo_main(["export", *(sys.argv[1:] if argv is None else argv)], prog=Path(__file__).name)


if __name__ == "__main__":
    sys.exit(run_entry_point(main))
