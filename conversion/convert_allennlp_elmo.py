"""Converts an original ELMo checkpoint (options.json + weights.hdf5, local paths or URLs) into a model folder."""

import argparse
import sys

from hf_elmo.conversion import ElmoConversionError, convert


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--options-file", required=True, help="original options.json (path or http(s) URL)")
    parser.add_argument("--weight-file", required=True, help="original weights.hdf5 (path or http(s) URL)")
    parser.add_argument("--output-dir", required=True, help="folder to write; must not exist or be empty")
    parser.add_argument("--overwrite", action="store_true", help="replace a non-empty output folder")
    args = parser.parse_args(argv)
    try:
        output = convert(args.options_file, args.weight_file, args.output_dir, overwrite=args.overwrite)
    except ElmoConversionError as error:
        print(f"error: {error}", file=sys.stderr)
        return 1
    print(f"wrote {output}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
