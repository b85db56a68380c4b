"""The commands of `hf-elmo`: embed a corpus to disk, convert an original checkpoint, export or describe a model.

The command line is parsed by `hf_elmo_launcher` (which also describes what `embed` writes), without importing torch
or transformers; `run` runs the parsed command and reports its failure as one line. `python -m hf_elmo.cli` is the same
command, in the form `torchrun` and `accelerate launch` take.
"""

import json
import sys
from functools import partial
from pathlib import Path

import torch

from hf_elmo_launcher import DTYPE_NAMES, main

from .embedding_pipeline import EmbedSettings, Processes, embed_file, run_identity
from .errors import EmbedError, first_line

DTYPES = {name: getattr(torch, name) for name in DTYPE_NAMES}


class CliError(EmbedError):
    """
    A failure of an `hf-elmo` command, to report as one line on stderr with exit status `code`. An `EmbedError`, so
    that one raised while the processes of an `embed` run load the model stops all of them
    (`Processes.run_in_lockstep`).
    """


# -- model ------------------------------------------------------------------------------------------------------------


def load_model(name: str, dtype: torch.dtype | str = "auto", device: str = "cpu", cpu_matmul: str = "auto"):
    """An `ElmoModel` in eval mode and its `ElmoTokenizer` from a local folder, a bundled model's name or a Hub id
    (`resolve_model_name`); `cpu_matmul` is the machine setting of `ElmoConfig`, chosen here at load time."""
    from transformers.utils import logging as transformers_logging

    from .modeling_elmo import ElmoModel
    from .tokenization_elmo import ElmoTokenizer

    transformers_logging.disable_progress_bar()
    folder_or_id = resolved(name)
    try:
        model = ElmoModel.from_pretrained(folder_or_id, dtype=dtype, cpu_matmul=cpu_matmul)
        tokenizer = ElmoTokenizer.from_pretrained(folder_or_id)
        model = model.to(device).eval()
    except (OSError, ValueError, TypeError, RuntimeError) as error:
        raise CliError(f"cannot load {name} as an hf_elmo model: {first_line(error)}") from error
    if tokenizer.max_characters_per_token != model.config.max_characters_per_token:  # a folder without tokenizer files
        tokenizer = ElmoTokenizer(model.config.max_characters_per_token, pre_tokenizer=tokenizer.pre_tokenizer)
    return model, tokenizer


def resolved(name: str, hub: bool = True) -> str:
    """`resolve_model_name(name, hub)`, its error a `CliError`."""
    from .bundled import resolve_model_name

    try:
        return resolve_model_name(name, hub)
    except ValueError as error:
        raise CliError(str(error)) from error


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
    if total == 0:  # most likely the wrong file: say so, though an empty output is what an empty input gives
        print(f"hf-elmo: warning: {args.input} holds no lines; wrote {Path(args.output)} with none", file=sys.stderr)
        return 0
    summary = f"wrote {total} line{'' if total == 1 else 's'} to {Path(args.output)}"
    if processes.world_size > 1:
        summary += f" from {processes.world_size} processes"
    if skipped:
        summary += (
            f" ({len(skipped)} not UTF-8 text, skipped: written as entries of 0 words"
            + ("" if args.verbose else "; --verbose lists their line numbers")
            + ")"
        )
    print(summary, file=sys.stderr)
    if args.verbose and skipped:
        print(f"skipped lines: {' '.join(map(str, skipped))}", file=sys.stderr)
    return 0


def prepare_embedding(args, processes: Processes) -> tuple:
    """The arguments of `embed` checked (the input file already was, by `hf_elmo_launcher`) and the model loaded:
    `(model, tokenizer, layers, run identity)`."""
    input_path = Path(args.input)
    if args.batch_size < 1 or args.max_words < 1:
        raise CliError("--batch-size and --max-words must be at least 1")
    device = processes.device(args.device)
    check_device(device)
    model, tokenizer = load_model(args.model, DTYPES[args.dtype], device, args.cpu_matmul)
    if tokenizer.pre_tokenizer == "korean_morphemes" and not args.pretokenize:
        # Split on whitespace, a line's words would reach the biLM as units it never read in pre-training (배를, not
        # 배 and 를).
        raise CliError(
            f"{args.model} reads Korean morphemes (pre_tokenizer korean_morphemes), not whitespace words: pass "
            "--pretokenize (one vector per morpheme)"
        )
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

    from .bundled import hub_unreachable
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
        raise CliError(first_line(error)) from error
    print(f"wrote {output}")
    if args.push_to_hub:
        retry = f"upload it with: hf upload {args.push_to_hub} {output}" + (" --private" if args.private else "")
        if hub_unreachable():
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

    model_dir = resolved(args.model_dir, hub=False)
    try:
        if args.format == "onnx":
            from .onnx_elmo import ONNX_FILE, export_onnx

            output = export_onnx(model_dir, args.output_dir, overwrite=args.overwrite)
            print(f"wrote {output}/{ONNX_FILE} with its config and tokenizer files")
            return 0
        output = export_original(model_dir, args.output_dir, overwrite=args.overwrite)
    except ElmoConversionError as error:  # a model that does not load says why in its first line
        raise CliError(first_line(error)) from error
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


COMMANDS = {
    "embed": embed_command,
    "convert": convert_command,
    "export": export_command,
    "info": info_command,
    "pretrain": pretrain_command,
}


def run(command: str, args, prog: str = "hf-elmo") -> int:
    """
    Runs `command` on the arguments `hf_elmo_launcher.main` parsed (for `pretrain`, the list its own parser reads);
    a failure is one line on stderr, `{prog}: error: ...`, and the exit status.
    """
    try:
        return COMMANDS[command](args)
    except EmbedError as error:
        if not error.quiet:
            print(f"{prog}: error: {error}", file=sys.stderr)
        return error.code
    except KeyboardInterrupt:
        print(f"{prog}: interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
