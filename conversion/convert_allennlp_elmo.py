"""Converts an original ELMo checkpoint (options.json + weights.hdf5, local paths or URLs) into a model folder,
optionally uploading it to the Hugging Face Hub."""

import argparse
import sys

from huggingface_hub import HfApi

from hf_elmo.conversion import ElmoConversionError, convert


def push_folder(folder, repo_id: str, private: bool = False) -> str:
    """Creates `repo_id` (if needed) and uploads `folder` to it with the standard Hub API; returns the commit URL."""
    api = HfApi()
    api.create_repo(repo_id, private=private, exist_ok=True)
    commit = api.upload_folder(folder_path=str(folder), repo_id=repo_id,
                               commit_message="Upload ELMo converted with hf_elmo")
    return str(commit)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--options-file", required=True, help="original options.json (path or http(s) URL)")
    parser.add_argument("--weight-file", required=True, help="original weights.hdf5 (path or http(s) URL)")
    parser.add_argument("--output-dir", required=True, help="folder to write; must not exist or be empty")
    parser.add_argument("--overwrite", action="store_true", help="replace a non-empty output folder")
    parser.add_argument("--push-to-hub", metavar="REPO_ID", help="also upload the folder to this Hub repository")
    parser.add_argument("--private", action="store_true", help="create the Hub repository as private")
    args = parser.parse_args(argv)
    try:
        output = convert(args.options_file, args.weight_file, args.output_dir, overwrite=args.overwrite)
    except ElmoConversionError as error:
        print(f"error: {error}", file=sys.stderr)
        return 1
    print(f"wrote {output}")
    if args.push_to_hub:
        print(f"uploaded to {args.push_to_hub}: {push_folder(output, args.push_to_hub, args.private)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
