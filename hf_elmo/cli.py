"""The commands of `hf-elmo`: embed a corpus to disk, convert an original checkpoint, export or describe a model.

The command line is parsed by `hf_elmo.command_line` (which also describes what `embed` writes), and what needs no
model answered there, before any model, data or tokenizer is loaded (`import hf_elmo` has imported torch by then);
`main` runs the parsed command inside the one handler of every entry point (`hf_elmo.errors.run_entry_point`), which
reports its failure as one line. `python -m hf_elmo.cli` is
the same command, in the form `torchrun` and `accelerate launch` take.
"""

import importlib.util
import json
import sys
from functools import partial
from pathlib import Path

import torch
from transformers.utils import logging as transformers_logging

from .command_line import PRE_TOKENIZER_NEEDS, local_pre_tokenizer, parse_command, whitespace_words_error
from .configuration_elmo import CPU_MATMULS
from .embedding_files import EmbedSettings, JobProcess, embed_file, run_identity
from .errors import CommandError, ElmoConversionError, first_line, run_entry_point
from .loading import hub_unreachable, load_model_and_tokenizer
from .modeling_elmo import (
    ElmoHeadModel,
    ElmoModel,
    ElmoPreTrainedModel,
)
from .tokenization_elmo import ElmoTokenizer

# -- model ------------------------------------------------------------------------------------------------------------


def load(name: str, device: str = "cpu", **from_pretrained_kwargs) -> tuple[ElmoPreTrainedModel, ElmoTokenizer]:
    """
    The model `name` (a folder, a bundled model or a Hub id: `hf_elmo.loading`) as its folder holds it (a task head,
    else the biLM) and its tokenizer, on `device`, for `embed` and `info`. A model that does not load is a
    `CommandError`, which stops every process of an `embed` run (`JobProcess.run_in_lockstep`).
    """
    transformers_logging.disable_progress_bar()  # transformers' bar for loading the weights is noise on stderr
    try:
        return load_model_and_tokenizer(name, device=device, **from_pretrained_kwargs)
    except ValueError as error:
        raise CommandError(str(error)) from error


def bilm_of(model: ElmoPreTrainedModel) -> ElmoModel:
    """The biLM of a model: a head's, or the model itself. (Loaded as `ElmoModel`, a head's folder would load the same
    weights, and transformers would report each weight of the head as unexpected.)"""
    return model.elmo if isinstance(model, ElmoHeadModel) else model


# -- commands ---------------------------------------------------------------------------------------------------------


def embed_command(args) -> int:
    process = JobProcess()
    try:
        model, tokenizer, layers, identity = process.run_in_lockstep(partial(prepare_embedding, args, process))
        counts = embed_file(
            model,
            tokenizer,
            Path(args.input),
            Path(args.output),
            process,
            EmbedSettings(
                split=tokenizer.split_words if args.pretokenize else str.split,
                errors=args.errors,
                layers=layers,
                pooled=args.pooled,
                batch_size=args.batch_size,
                max_words=args.max_words,
                max_line_length=args.max_line_length,
            ),
            identity=identity,
            output_format=args.format,
            sentence_to_index=not args.forget_sentences,
            resume=args.resume,
        )
    finally:
        process.close()
    if counts is None:  # rank > 0: rank 0 reports
        return 0
    total, skipped = counts
    if total == 0:  # most likely the wrong file: say so, though an empty output is what an empty input gives
        print(f"hf-elmo: warning: {args.input} holds no lines; wrote {Path(args.output)} with none", file=sys.stderr)
        return 0
    summary = f"wrote {total} line{'' if total == 1 else 's'} to {Path(args.output)}"
    if process.world_size > 1:
        summary += f" from {process.world_size} processes"
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


def prepare_embedding(args, process: JobProcess) -> tuple:
    """The arguments of `embed` checked (the input file, the counts and the mix already were, by
    `hf_elmo.command_line`) and the model loaded: `(biLM, tokenizer, layers, run identity)`."""
    input_path = Path(args.input)
    if args.cpu_matmul not in CPU_MATMULS:  # the parser leaves the names to the config (see command_line)
        raise CommandError(f"--cpu-matmul must be one of {', '.join(CPU_MATMULS)}, got {args.cpu_matmul!r}", code=2)
    device = process.device(args.device)
    check_device(device)
    # cpu_matmul is a machine setting of `ElmoConfig`, chosen at load time.
    model, tokenizer = load(args.model, device, dtype=getattr(torch, args.dtype), cpu_matmul=args.cpu_matmul)
    if isinstance(model, ElmoHeadModel) and process.rank == 0:
        print(f"hf-elmo: note: {bilm_note(args.model, model)}", file=sys.stderr)
    model = bilm_of(model)
    if error := whitespace_words_error(args.model, tokenizer.pre_tokenizer, args.pretokenize):  # a Hub model's
        raise CommandError(error)
    layers = "all" if args.all else "top" if args.top else "average" if args.average else args.mix
    if args.mix is not None and len(args.mix) != model.config.num_representation_layers:  # a Hub model's config
        raise CommandError(
            f"--mix needs {model.config.num_representation_layers} weights (one per layer), got {len(args.mix)}",
            code=2,
        )
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


def bilm_note(name: str, model: ElmoHeadModel) -> str:
    """What `embed` says of a head's folder: which biLM gives the vectors (the head's own, which fine-tuning may have
    changed), and where the pre-trained one is."""
    trained = "frozen while its head trained" if model.config.freeze_bilm else "fine-tuned with its head"
    return (
        f"{name} holds a task head ({type(model).__name__}): embed uses its biLM, {trained}; for the pre-trained "
        "biLM, embed the model it was fine-tuned from"
    )


def check_device(device: str):
    """A one-line error for a device this machine cannot use, before any model is loaded."""
    try:
        kind = torch.device(device).type
    except RuntimeError as error:
        raise CommandError(f"--device {device}: not a torch device; use e.g. cpu, cuda, cuda:1 or mps") from error
    if kind == "cuda" and not torch.cuda.is_available():
        raise CommandError(f"--device {device}: CUDA is not available here")
    if kind == "cuda" and (torch.device(device).index or 0) >= torch.cuda.device_count():
        raise CommandError(f"--device {device}: this machine has {torch.cuda.device_count()} CUDA device(s)")
    if kind == "mps" and not torch.backends.mps.is_available():
        raise CommandError(f"--device {device}: MPS (Apple GPUs) is not available here")
    if kind not in ("cpu", "cuda", "mps"):
        raise CommandError(f"--device {device}: hf-elmo runs on cpu, cuda or mps")


def convert_command(args) -> int:
    from .conversion_original import convert_original
    from .folders import push_to_hub

    needed = ["--model-dir"] if args.format == "elmoformanylangs" else ["--options-file", "--weight-file"]
    missing = [flag for flag in needed if getattr(args, flag[2:].replace("-", "_")) is None]
    if missing:
        raise CommandError(f"convert --format {args.format} needs {' and '.join(missing)}", code=2)
    transformers_logging.disable_progress_bar()  # a bar for writing one small shard is noise
    try:
        if args.format == "elmoformanylangs":
            from .conversion_elmoformanylangs import convert_elmoformanylangs

            output = convert_elmoformanylangs(args.model_dir, args.output_dir, overwrite=args.overwrite)
        else:
            output = convert_original(args.options_file, args.weight_file, args.output_dir, overwrite=args.overwrite)
    except ElmoConversionError as error:
        raise CommandError(first_line(error)) from error
    print(f"wrote {output}")
    if args.push_to_hub:
        retry = f"upload it with: hf upload {args.push_to_hub} {output}" + (" --private" if args.private else "")
        if hub_unreachable():
            raise CommandError(
                f"{output} was written, but the upload to {args.push_to_hub} failed: the Hub cannot be "
                f"reached; {retry}"
            )
        try:
            commit = push_to_hub(output, args.push_to_hub, private=args.private)
        except Exception as error:  # noqa: BLE001  whatever failed (network, auth, HTTP client), the folder stands
            raise CommandError(
                f"{output} was written, but the upload to {args.push_to_hub} failed: {first_line(error)}; {retry}"
            ) from error
        print(f"uploaded to {args.push_to_hub}: {commit}")
    return 0


def export_command(args) -> int:
    from .conversion_original import export_original

    transformers_logging.disable_progress_bar()  # a bar for loading a few tensors is noise
    # Not resolved here: the export resolves --model-dir (a folder or a bundled model's name) as it loads it.
    try:
        if args.format == "onnx":
            from .onnx_elmo import ONNX_FILE, export_onnx

            output = export_onnx(args.model_dir, args.output_dir, overwrite=args.overwrite)
            print(f"wrote {output}/{ONNX_FILE} with its config and tokenizer files")
            return 0
        output = export_original(args.model_dir, args.output_dir, overwrite=args.overwrite)
    except ElmoConversionError as error:  # a model that does not load says why in its first line
        raise CommandError(first_line(error)) from error
    print(f"wrote {output}/options.json and {output}/weights.hdf5")
    return 0


def info_command(args) -> int:
    model, _ = load(args.model)
    config, bilm = model.config, bilm_of(model)
    parameters = f"{model.num_parameters():,}"
    if bilm is not model:
        parameters += f" ({bilm.num_parameters():,} biLM, {model.num_parameters() - bilm.num_parameters():,} head)"
    rows = {
        "model": args.model,
        **({"task": model.description} if bilm is not model else {}),
        "dtype": str(model.dtype).removeprefix("torch."),
        "parameters": parameters,
        **(head_rows(model) if bilm is not model else {}),
        "representation layers": f"{config.num_representation_layers} (token layer + {config.n_layers} LSTM layers)",
        "representation size": f"{config.hidden_size} (2 x projection_dim {config.projection_dim})",
        "LSTM cells": f"{config.cell_dim} per direction and layer",
        "skip connections": config.use_skip_connections,
        "character CNN": f"{len(config.filters)} filter widths, {config.n_filters} filters, "
        f"{config.n_highway} highway layers, {config.activation}",
        "max characters per token": config.max_characters_per_token,
        **reading_rows(args.model),
    }
    for key, value in rows.items():
        print(f"{key}: {value}")
    return 0


def reading_rows(name: str) -> dict[str, str]:
    """What `info` says of the units a folder reads where a pre-tokenizer splits them (`ko-nsmc`: Korean morphemes,
    through kiwipiepy), and what `embed` needs for it."""
    pre_tokenizer = local_pre_tokenizer(name)
    if pre_tokenizer not in PRE_TOKENIZER_NEEDS:
        return {}
    needs = PRE_TOKENIZER_NEEDS[pre_tokenizer]
    installed = "installed" if importlib.util.find_spec(needs.package) else f"not installed: {needs.install}"
    return {
        "reads": f"{needs.units} (pre_tokenizer {pre_tokenizer}), through {needs.package} ({installed})",
        "embed needs": "--pretokenize (one vector per unit)",
    }


def head_rows(model: ElmoHeadModel) -> dict[str, str]:
    """What `info` says of a task head: its class, the settings it names (`head_settings`: labels, layer mix, word
    vectors, task BiLSTM and its own), and whether the biLM trains with it."""
    rows = {"head": type(model).__name__, **model.head_settings()}
    rows["biLM"] = "frozen (the mix and head train)" if model.config.freeze_bilm else "trained with the head"
    return rows


def pretrain_command(argv: list[str]) -> int:
    try:
        from .pretraining import keep_freed_memory
        from .pretraining import main as pretrain
    except ImportError as error:  # its module imports the Trainer
        raise CommandError(
            'pre-training needs the training extra: pip install -e ".[training]" in a checkout (a wheel: its path '
            "followed by [training])",
            code=2,
        ) from error

    keep_freed_memory()
    try:
        metrics = pretrain(argv)
    except (ValueError, ImportError) as error:
        raise CommandError(first_line(error), code=2) from error
    print(json.dumps(metrics, indent=2))
    return 0


def push_command(args) -> int:
    from .publishing import publish_folder

    transformers_logging.disable_progress_bar()  # bars for loading and writing the weights are noise
    commit = publish_folder(args.model, args.repo_id, private=args.private)
    print(f"uploaded {args.model} to {args.repo_id}: {commit}")
    return 0


def quickstart_command(args) -> int:
    from .quickstart import HOMONYMS, read_homonym, run

    try:  # the user's file, read before the model loads
        homonyms = HOMONYMS if args.word is None else [read_homonym(args.sentences, args.word)]
    except ValueError as error:
        raise CommandError(first_line(error)) from error
    run(args.plot, model=args.model, homonyms=homonyms)
    return 0


COMMANDS = {
    "embed": embed_command,
    "convert": convert_command,
    "export": export_command,
    "info": info_command,
    "pretrain": pretrain_command,
    "push": push_command,
    "quickstart": quickstart_command,
}


def run(command: str, args, prog: str = "hf-elmo") -> int:
    """
    Runs `command` on the arguments `hf_elmo.command_line.parse_command` parsed (for `pretrain`, the list its own
    parser reads); a failure is one line on stderr, `{prog}: error: ...`, and the exit status
    (`hf_elmo.errors.run_entry_point`, the handler of every entry point).
    """
    return run_entry_point(COMMANDS[command], args, prog=prog)


def main(argv=None, prog: str = "hf-elmo") -> int:
    """`hf-elmo ARGV` in this process: `python -m hf_elmo.cli`, the form `torchrun` and `accelerate launch` take."""
    return run_entry_point(parse_and_run, argv, prog, prog=prog)


def parse_and_run(argv, prog: str) -> int:
    """`main`'s work, inside its handler: the command line parsed (or answered) and the command run."""
    parsed = parse_command(argv, prog)
    return COMMANDS[parsed[0]](parsed[1]) if isinstance(parsed, tuple) else parsed


if __name__ == "__main__":
    sys.exit(main())
