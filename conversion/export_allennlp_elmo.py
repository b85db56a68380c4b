"""Exports an hf_elmo model folder to the original layout (options.json + weights.hdf5) read by AllenNLP and bilm-tf."""

import argparse
import sys

from hf_elmo.conversion import ElmoConversionError, export


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--model-dir", required=True, help="an hf_elmo model folder")
    parser.add_argument("--output-dir", required=True, help="folder to write; must not exist or be empty")
    parser.add_argument("--overwrite", action="store_true", help="replace a non-empty output folder")
    args = parser.parse_args(argv)
    try:
        output = export(args.model_dir, args.output_dir, overwrite=args.overwrite)
    except ElmoConversionError as error:
        print(f"error: {error}", file=sys.stderr)
        return 1
    print(f"wrote {output}/options.json and {output}/weights.hdf5")
    return 0


if __name__ == "__main__":
    sys.exit(main())
