"""The `hf-elmo` command: embed a corpus to disk, convert an original checkpoint, describe a model.

`hf-elmo embed MODEL INPUT OUTPUT` writes, for each line `i` of INPUT (one sentence per line, words separated by
whitespace), the ELMo representation of its words; the `<S>`/`</S>` boundary positions are left out, as in
AllenNLP's `allennlp elmo` command. Shapes per line, for `n` words and `dim = 2 * projection_dim`:

    --all (n_layers + 1, n, dim)    --top, --average, --mix (n, dim)
    with --pooled, the mean over the words: (n_layers + 1, dim) or (dim,); zeros for an empty line

`--format hdf5` (default): one float32 dataset per line named `str(i)`, plus a `sentence_to_index` dataset of shape
`(1,)` holding a JSON string `{stripped line text: str(i)}` (the layout of `allennlp elmo`, so its readers work).
`--format npy`: OUTPUT is a folder with one `{i}.npy` per line and `sentence_to_index.json` holding the same JSON.
Empty lines, and undecodable ones skipped with `--errors skip`, are kept as entries with 0 words. INPUT may be
gzip-compressed if its name ends in `.gz`. Lines are written as the run goes, into `OUTPUT.parts/`, which becomes
OUTPUT at the end, so that OUTPUT is complete or absent; a run that was stopped or killed continues with
`--resume`, skipping the lines already written, if it has the same input file, model and output options.

Under `torchrun` or `accelerate launch` (WORLD_SIZE > 1), each process embeds its share of the lines into the same
`OUTPUT.parts/` (on a filesystem every node sees) and rank 0 assembles OUTPUT once all have finished; `--device cuda`
runs each process on the GPU of its LOCAL_RANK. A resume may use any number of processes.
"""

import argparse
import json
import os
import socket
import sys
import urllib.parse
from functools import partial
from pathlib import Path

import torch

from .configuration_elmo import CPU_MATMULS
from .embedding_pipeline import EmbedSettings, Processes, embed_file, run_identity
from .errors import EmbedError, first_line

DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}


class CliError(EmbedError):
    """
    A failure of an `hf-elmo` command, to report as one line on stderr with exit status `code`. An `EmbedError`, so
    that one raised while the processes of an `embed` run load the model stops all of them
    (`Processes.run_in_lockstep`).
    """


# -- model ------------------------------------------------------------------------------------------------------------


def load_model(name: str, dtype: torch.dtype | str = "auto", device: str = "cpu", cpu_matmul: str = "auto"):
    """An `ElmoModel` in eval mode and its `ElmoTokenizer` from a local folder, a bundled model's name or a Hub id;
    `cpu_matmul` is the machine setting of `ElmoConfig`, chosen here at load time."""
    from transformers.utils import logging as transformers_logging

    from .bundled import resolve_model_name
    from .modeling_elmo import ElmoModel
    from .tokenization_elmo import ElmoTokenizer

    transformers_logging.disable_progress_bar()
    name = resolve_model_name(name)
    path = Path(name).expanduser()
    offline = False
    if path.is_dir():
        _check_model_folder(path, name)
    elif path.exists():
        raise CliError(f"{name} is a file; the model is a folder (or a Hub id)")
    elif name.startswith((".", "/", "~")) or name.count("/") > 1:
        raise CliError(f"no such model folder: {name}")
    else:
        offline = _offline_without_network()
    try:
        model = ElmoModel.from_pretrained(path if path.is_dir() else name, dtype=dtype, cpu_matmul=cpu_matmul)
        tokenizer = ElmoTokenizer.from_pretrained(path if path.is_dir() else name)
        model = model.to(device).eval()
    except (OSError, ValueError, TypeError, RuntimeError) as error:
        if offline:
            raise CliError(
                f"no such model folder: {name}; as a Hub id it is not in the Hub cache, and the Hub cannot be reached"
            ) from error
        raise CliError(f"cannot load {name} as an hf_elmo model: {first_line(error)}") from error
    if tokenizer.max_characters_per_token != model.config.max_characters_per_token:  # a folder without tokenizer files
        tokenizer = ElmoTokenizer(model.config.max_characters_per_token, pre_tokenizer=tokenizer.pre_tokenizer)
    return model, tokenizer


def _check_model_folder(path: Path, name: str):
    """A one-line error for a folder that is not an hf_elmo model (checked before `ElmoConfig` reads it)."""
    try:
        model_type = json.loads((path / "config.json").read_text(encoding="utf-8")).get("model_type")
    except FileNotFoundError as error:
        raise CliError(f"{name} is not an hf_elmo model folder (no config.json)") from error
    except (OSError, ValueError, AttributeError) as error:
        raise CliError(f"{name} is not an hf_elmo model folder (config.json: {first_line(error)})") from error
    if model_type != "elmo":
        raise CliError(f"{name} is not an hf_elmo model folder (model_type {model_type!r})")


def _offline_without_network() -> bool:
    """
    Tries once, for a few seconds at most, to open a connection to the Hub. Without one, switches huggingface_hub
    to offline mode and returns True: a cached model still loads, anything else fails at once instead of after
    half a minute of retries. Behind a proxy, or with `HF_HUB_OFFLINE=1`, nothing is tried.
    """
    from huggingface_hub import constants

    if constants.is_offline_mode() or any(os.environ.get(key) for key in ("HTTPS_PROXY", "https_proxy", "ALL_PROXY")):
        return False
    endpoint = urllib.parse.urlsplit(constants.ENDPOINT)
    try:
        socket.create_connection((endpoint.hostname, endpoint.port or 443), timeout=5).close()
        return False
    except OSError:
        constants.HF_HUB_OFFLINE = True
        return True


# -- commands ---------------------------------------------------------------------------------------------------------


def embed_command(args) -> int:
    processes = Processes()
    try:
        model, tokenizer, layers, identity = processes.run_in_lockstep(partial(prepare_embedding, args, processes))
        counts = embed_file(
            model,
            tokenizer,
            Path(args.input),
            Path(args.output),
            processes,
            EmbedSettings(
                split=tokenizer.split_words if args.pretokenize else str.split,
                errors=args.errors,
                layers=layers,
                pooled=args.pooled,
                batch_size=args.batch_size,
                max_words=args.max_words,
            ),
            identity=identity,
            output_format=args.format,
            sentence_to_index=not args.forget_sentences,
            resume=args.resume,
        )
    finally:
        processes.close()
    if counts is None:  # rank > 0: rank 0 reports
        return 0
    total, skipped = counts
    summary = f"wrote {total} lines to {Path(args.output)}"
    if processes.world_size > 1:
        summary += f" from {processes.world_size} processes"
    if skipped:
        summary += (
            f" ({len(skipped)} not valid UTF-8, skipped: written as entries of 0 words"
            + ("" if args.verbose else "; --verbose lists their line numbers")
            + ")"
        )
    print(summary, file=sys.stderr)
    if args.verbose and skipped:
        print(f"skipped lines: {' '.join(map(str, skipped))}", file=sys.stderr)
    return 0


def prepare_embedding(args, processes: Processes) -> tuple:
    """The arguments of `embed` checked and the model loaded: `(model, tokenizer, layers, run identity)`."""
    input_path = Path(args.input)
    if not input_path.is_file():
        raise CliError(f"no such input file: {input_path}")
    if args.batch_size < 1 or args.max_words < 1:
        raise CliError("--batch-size and --max-words must be at least 1")
    device = processes.device(args.device)
    check_device(device)
    model, tokenizer = load_model(args.model, DTYPES[args.dtype], device, args.cpu_matmul)
    layers = "all" if args.all else "top" if args.top else "average" if args.average else _mix_weights(args.mix, model)
    options = {
        "layers": layers,
        "pooled": args.pooled,
        "pretokenize": args.pretokenize,
        "dtype": args.dtype,
        "cpu_matmul": args.cpu_matmul,  # changes the vectors ("int8"), and is not in the model config
        "errors": args.errors,
        "sentence_to_index": not args.forget_sentences,
    }
    return model, tokenizer, layers, run_identity(input_path, args.model, model, options)


def check_device(device: str):
    """A one-line error for a device this machine cannot use, before any model is loaded."""
    try:
        kind = torch.device(device).type
    except RuntimeError as error:
        raise CliError(f"--device {device}: not a torch device; use e.g. cpu, cuda, cuda:1 or mps") from error
    if kind == "cuda" and not torch.cuda.is_available():
        raise CliError(f"--device {device}: CUDA is not available here")
    if kind == "cuda" and (torch.device(device).index or 0) >= torch.cuda.device_count():
        raise CliError(f"--device {device}: this machine has {torch.cuda.device_count()} CUDA device(s)")
    if kind == "mps" and not torch.backends.mps.is_available():
        raise CliError(f"--device {device}: MPS (Apple GPUs) is not available here")
    if kind not in ("cpu", "cuda", "mps"):
        raise CliError(f"--device {device}: hf-elmo runs on cpu, cuda or mps")


def _mix_weights(text: str, model) -> list[float]:
    try:
        weights = [float(w) for w in text.split(",")]
    except ValueError as error:
        raise CliError(f"--mix takes comma-separated numbers, got {text!r}") from error
    if len(weights) != model.config.num_representation_layers:
        raise CliError(
            f"--mix needs {model.config.num_representation_layers} weights (one per layer), got {len(weights)}"
        )
    return weights


def convert_command(args) -> int:
    from transformers.utils import logging as transformers_logging

    from .conversion_original import convert_original
    from .errors import ElmoConversionError
    from .folders import push_to_hub

    needed = ["--model-dir"] if args.format == "elmoformanylangs" else ["--options-file", "--weight-file"]
    missing = [flag for flag in needed if getattr(args, flag[2:].replace("-", "_")) is None]
    if missing:
        raise CliError(f"convert --format {args.format} needs {' and '.join(missing)}", code=2)
    transformers_logging.disable_progress_bar()  # a bar for writing one small shard is noise
    try:
        if args.format == "elmoformanylangs":
            from .conversion_elmoformanylangs import convert_elmoformanylangs

            output = convert_elmoformanylangs(args.model_dir, args.output_dir, overwrite=args.overwrite)
        else:
            output = convert_original(args.options_file, args.weight_file, args.output_dir, overwrite=args.overwrite)
    except ElmoConversionError as error:
        raise CliError(str(error)) from error
    print(f"wrote {output}")
    if args.push_to_hub:
        retry = f"upload it with: hf upload {args.push_to_hub} {output}" + (" --private" if args.private else "")
        if _offline_without_network():
            raise CliError(
                f"{output} was written, but the upload to {args.push_to_hub} failed: the Hub cannot be "
                f"reached; {retry}"
            )
        try:
            commit = push_to_hub(output, args.push_to_hub, private=args.private)
        except Exception as error:  # noqa: BLE001  whatever failed (network, auth, HTTP client), the folder stands
            raise CliError(
                f"{output} was written, but the upload to {args.push_to_hub} failed: {first_line(error)}; {retry}"
            ) from error
        print(f"uploaded to {args.push_to_hub}: {commit}")
    return 0


def export_command(args) -> int:
    from transformers.utils import logging as transformers_logging

    from .conversion_original import export_original
    from .errors import ElmoConversionError

    transformers_logging.disable_progress_bar()  # a bar for loading a few tensors is noise

    if Path(args.model_dir).is_dir():
        _check_model_folder(Path(args.model_dir), args.model_dir)
    try:
        if args.format == "onnx":
            from .onnx_elmo import ONNX_FILE, export_onnx

            output = export_onnx(args.model_dir, args.output_dir, overwrite=args.overwrite)
            print(f"wrote {output}/{ONNX_FILE} with its config and tokenizer files")
            return 0
        output = export_original(args.model_dir, args.output_dir, overwrite=args.overwrite)
    except ElmoConversionError as error:
        raise CliError(str(error)) from error
    print(f"wrote {output}/options.json and {output}/weights.hdf5")
    return 0


def info_command(args) -> int:
    model, _ = load_model(args.model)
    config = model.config
    rows = {
        "model": args.model,
        "dtype": str(model.dtype).removeprefix("torch."),
        "parameters": f"{model.num_parameters():,}",
        "representation layers": f"{config.num_representation_layers} (token layer + {config.n_layers} LSTM layers)",
        "representation size": f"{config.hidden_size} (2 x projection_dim {config.projection_dim})",
        "LSTM cells": f"{config.cell_dim} per direction and layer",
        "skip connections": config.use_skip_connections,
        "character CNN": f"{len(config.filters)} filter widths, {config.n_filters} filters, "
        f"{config.n_highway} highway layers, {config.activation}",
        "max characters per token": config.max_characters_per_token,
    }
    for key, value in rows.items():
        print(f"{key}: {value}")
    return 0


def build_parser(progs: dict[str, str] | None = None) -> argparse.ArgumentParser:
    """The `hf-elmo` parser; `progs` renames subcommands run as standalone scripts (`{"convert": "convert.py"}`)."""
    parser = argparse.ArgumentParser(prog="hf-elmo", description="ELMo models for Hugging Face transformers.")
    commands = parser.add_subparsers(dest="command", required=True)
    progs = progs or {}

    embed = commands.add_parser(
        "embed",
        prog=progs.get("embed"),
        help="embed a text file, one sentence per line, to HDF5 or .npy files",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    embed.add_argument("model", help="model folder, bundled model (ko-nsmc) or Hub id")
    embed.add_argument("input", help="text file, UTF-8, one sentence per line (.gz: gzip-compressed)")
    embed.add_argument("output", help="HDF5 file to write (a folder with --format npy)")
    layers = embed.add_mutually_exclusive_group(required=True)
    layers.add_argument("--all", action="store_true", help="all layers: (n_layers + 1, words, dim)")
    layers.add_argument("--top", action="store_true", help="the top layer: (words, dim)")
    layers.add_argument("--average", action="store_true", help="the mean of all layers: (words, dim)")
    layers.add_argument("--mix", metavar="W0,W1,...", help="the sum of the layers times these weights: (words, dim)")
    embed.add_argument("--pooled", action="store_true", help="one vector per line: the mean over its words")
    embed.add_argument("--format", choices=["hdf5", "npy"], default="hdf5", help="output layout (default hdf5)")
    embed.add_argument(
        "--pretokenize",
        action="store_true",
        help="split lines with the tokenizer's pre-tokenizer instead of on whitespace",
    )
    embed.add_argument("--batch-size", type=int, default=64, help="sentences per batch (default 64)")
    embed.add_argument(
        "--max-words",
        type=int,
        default=1000,
        help="longer lines are run alone in windows of this many positions, the LSTM state carried "
        "(same result, bounded memory; default 1000)",
    )
    embed.add_argument("--device", default="cpu", help="torch device, e.g. cpu, cuda, cuda:1 (default cpu)")
    embed.add_argument(
        "--dtype",
        choices=sorted(DTYPES),
        default="float32",
        help="compute dtype (default float32); outputs are stored as float32",
    )
    embed.add_argument(
        "--cpu-matmul",
        choices=CPU_MATMULS,
        default="auto",
        help="library of the CPU products (config.cpu_matmul; default auto: the fastest measured here); "
        "int8 is faster at small batches and changes the vectors slightly",
    )
    embed.add_argument(
        "--errors",
        choices=["strict", "replace", "skip"],
        default="strict",
        help="a line that is not UTF-8: stop (default), replace bad bytes, or skip it (0 words)",
    )
    embed.add_argument("--resume", action="store_true", help="continue a stopped run, keeping the lines it wrote")
    embed.add_argument("--forget-sentences", action="store_true", help="do not write sentence_to_index")
    embed.add_argument("--verbose", action="store_true", help="list the line numbers of skipped lines")
    embed.set_defaults(func=embed_command)

    def folder_writer(name: str, help: str, formats: list[str], format_help: str) -> argparse.ArgumentParser:
        """`convert` and `export`: a subcommand writing one folder, in one of `formats` (the first by default)."""
        subparser = commands.add_parser(name, prog=progs.get(name), help=help)
        subparser.add_argument("--format", choices=formats, default=formats[0], help=format_help)
        subparser.add_argument("--output-dir", required=True, help="folder to write; must not exist or be empty")
        subparser.add_argument("--overwrite", action="store_true", help="replace a non-empty output folder")
        return subparser

    convert = folder_writer(
        "convert",
        "convert an original checkpoint (options.json + weights.hdf5) or an ELMoForManyLangs model",
        ["original", "elmoformanylangs"],
        "bilm-tf/AllenNLP files (default) or an ELMoForManyLangs release (folder or .zip)",
    )
    convert.add_argument("--options-file", help="original options.json (path or http(s) URL)")
    convert.add_argument("--weight-file", help="original weights.hdf5 (path or http(s) URL)")
    convert.add_argument("--model-dir", help="with --format elmoformanylangs: the unpacked release folder or its .zip")
    convert.add_argument("--push-to-hub", metavar="REPO_ID", help="also upload the folder to this Hub repository")
    convert.add_argument("--private", action="store_true", help="create the Hub repository as private")
    convert.set_defaults(func=convert_command)

    export = folder_writer(
        "export",
        "export a model folder to the original layout (options.json + weights.hdf5) or to ONNX",
        ["original", "onnx"],
        "bilm-tf/AllenNLP files (default) or model.onnx for ONNX Runtime, any batch size and sentence length, "
        "beside the config and tokenizer files (needs the onnx extra)",
    )
    export.add_argument("--model-dir", required=True, help="an hf_elmo model folder")
    export.set_defaults(func=export_command)

    info = commands.add_parser(
        "info", prog=progs.get("info"), help="print a model's sizes, layers, parameter count and dtype"
    )
    info.add_argument("model", help="model folder or Hub id")
    info.set_defaults(func=info_command)

    # Parsed by hf_elmo.pretraining itself (see main); listed here for `hf-elmo --help`.
    commands.add_parser(
        "pretrain", help="pre-train an ELMo biLM from scratch (hf-elmo pretrain --help)", add_help=False
    )
    return parser


def pretrain_command(argv: list[str]) -> int:
    try:
        from .pretraining import keep_freed_memory
        from .pretraining import main as pretrain
    except ImportError as error:  # its module imports the Trainer
        raise CliError('pre-training needs the training extra: pip install "hf_elmo[training]"', code=2) from error

    keep_freed_memory()
    try:
        metrics = pretrain(argv)
    except (ValueError, ImportError) as error:
        raise CliError(first_line(error), code=2) from error
    print(json.dumps(metrics, indent=2))
    return 0


def main(argv=None, prog: str = "hf-elmo") -> int:
    """Runs `hf-elmo ARGV`; a standalone script running one subcommand passes its own name as `prog`."""
    argv = sys.argv[1:] if argv is None else list(argv)
    try:
        if argv[:1] == ["pretrain"]:
            return pretrain_command(argv[1:])
        args = build_parser({argv[0]: prog} if argv and prog != "hf-elmo" else None).parse_args(argv)
        return args.func(args)
    except EmbedError as error:
        if not error.quiet:
            print(f"{prog}: error: {error}", file=sys.stderr)
        return error.code
    except KeyboardInterrupt:
        print(f"{prog}: interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
