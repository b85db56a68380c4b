"""The quickstart, `hf-elmo quickstart`, from a checkout: the Korean ELMo shipped inside hf_elmo, offline.

    python examples/quickstart.py

The same command under this script's name (`hf_elmo/quickstart.py` holds it): a homonym's senses layer by layer,
then sentiment. Next step, on a machine online: `python examples/convert_original_elmo.py` converts the original
English ELMo.
"""

import sys
from pathlib import Path

from hf_elmo.cli import main as hf_elmo_main
from hf_elmo.errors import run_entry_point


def main(argv=None) -> int:
    return hf_elmo_main(["quickstart", *(sys.argv[1:] if argv is None else argv)], prog=Path(__file__).name)


if __name__ == "__main__":
    sys.exit(run_entry_point(main))
