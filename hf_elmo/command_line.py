"""The `hf-elmo` command line: its parser, and the answers that need no model (`parse_command`); `hf_elmo.cli.main`,
the console script, runs the parsed command. What a model name stands for is `hf_elmo.model_names`', as
`hf_elmo.loading` reads it.

`--help`, a subcommand's `--help`, an argument error, a path that does not exist (an input, a model folder,
`pretrain`'s text files), an output that exists (`embed`'s) or that holds the inputs `--overwrite` would delete
(`convert`'s, `export`'s) are answered here, before a command's own module (the quickstart's, pre-training's) is
imported and before anything is read or written, as are the options of `embed` that cannot apply (`usage_error`: a
count below 1, `--mix` weights that are not numbers, or not one per layer of a local model's `config.json`). They
wait for `import hf_elmo`, which registers ELMo with the Auto classes (seconds: benchmarks/RESULTS.md, "Command
start-up"); this module imports nothing from the package but `hf_elmo.model_names` and `hf_elmo.text_files` (why an
input cannot be read, as `embed` says it). `hf-elmo` and `python -m
hf_elmo.cli` (the form `torchrun` and `accelerate launch` take) are the same `hf_elmo.cli.main`. `hf-elmo pretrain`
is parsed by transformers' `HfArgumentParser` over `TrainingArguments`; only its text files are checked here.
"""

import argparse
import errno
import importlib.util
import math
import os
import sys
from pathlib import Path
from typing import NamedTuple

from .errors import is_integer, json_object_or_none
from .folders import replacing_problem
from .model_names import is_path_only, local_model_folder, original_checkpoint
from .text_files import unreadable_reason

# The compute dtypes of `embed` (torch's names).
DTYPE_NAMES = ("bfloat16", "float16", "float32")
# `pretrain`'s text files, under both spellings `HfArgumentParser` accepts.
PRETRAIN_TEXT_FLAGS = {
    "--train-file": "--train-file",
    "--train_file": "--train-file",
    "--validation-file": "--validation-file",
    "--validation_file": "--validation-file",
}

EMBED_DESCRIPTION = """\
`hf-elmo embed MODEL INPUT OUTPUT` writes, for each line `i` of INPUT (one sentence per line, words separated by
whitespace), the ELMo representation of its words; the `<S>`/`</S>` boundary positions are left out, as in
AllenNLP's `allennlp elmo` command. Shapes per line, for `n` words and `dim = 2 * projection_dim`:

    --all (n_layers + 1, n, dim)    --top, --average, --mix (n, dim)
    with --pooled, the mean over the words: (n_layers + 1, dim) or (dim,); zeros for an empty line

`--format hdf5` (default): one float32 dataset per line named `str(i)`, plus a `sentence_to_index` dataset of shape
`(1,)` holding a JSON string `{stripped line text: str(i)}` (the layout of `allennlp elmo`, so its readers work).
`--format npy`: OUTPUT is a folder with one `{i}.npy` per line and `sentence_to_index.json` holding the same JSON.
Empty lines, and undecodable ones skipped with `--errors skip`, are kept as entries with 0 words. INPUT may be
gzip-compressed if its name ends in `.gz`. An INPUT with a line longer than `--max-line-length` characters is refused
before anything is written, naming the line. Lines are written as the run goes, into `OUTPUT.parts/`, which becomes
OUTPUT at the end, so that OUTPUT is complete or absent; a run that was stopped or killed continues with
`--resume`, skipping the lines already written, if it has the same input file, model and output options.

Under `torchrun` or `accelerate launch` (WORLD_SIZE > 1), each process embeds its share of the lines into the same
`OUTPUT.parts/` (on a filesystem every node sees) and rank 0 assembles OUTPUT once all have finished; `--device cuda`
runs each process on the GPU of its LOCAL_RANK. A resume may use any number of processes.
"""


class CommandParser(argparse.ArgumentParser):
    """
    argparse without prefix matching (`--al` is not `--all`), naming an option it does not know before it says
    what is missing: argparse checks required arguments first, so that `embed M IN OUT --alll` would say "one of the
    arguments --all --top --average --mix is required" and never name the typo. Its subparsers are of this class too.
    """

    def __init__(self, *args, **kwargs):
        super().__init__(*args, allow_abbrev=False, **kwargs)

    def parse_known_args(self, args=None, namespace=None):
        args = sys.argv[1:] if args is None else list(args)
        # Up to the first positional that names a subparser, the rest being that subparser's to judge; after "--",
        # every argument is positional. All options here are long, or -h.
        subcommands = {name for action in self._actions if action.nargs == argparse.PARSER for name in action.choices}
        own = []
        for argument in args:
            if argument == "--" or argument in subcommands:
                break
            own.append(argument)
        # `_option_string_actions` is argparse's table of every option string the parser takes.
        unknown = [a for a in own if a.startswith("--") and a.split("=", 1)[0] not in self._option_string_actions]
        if unknown:
            self.error(f"unrecognized arguments: {' '.join(unknown)}")
        return super().parse_known_args(args, namespace)


def build_parser(progs: dict[str, str] | None = None) -> argparse.ArgumentParser:
    """The `hf-elmo` parser; `progs` renames subcommands run as standalone scripts (`{"convert": "convert.py"}`)."""
    parser = CommandParser(prog="hf-elmo", description="ELMo models for Hugging Face transformers.")
    commands = parser.add_subparsers(dest="command", required=True)
    progs = progs or {}

    embed = commands.add_parser(
        "embed",
        prog=progs.get("embed"),
        help="embed a text file, one sentence per line, to HDF5 or .npy files",
        description=EMBED_DESCRIPTION,
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
    embed.add_argument(
        "--max-line-length",
        type=int,
        default=100_000,
        help="refuse an input holding a line of more characters, before anything is written (default 100000)",
    )
    embed.add_argument("--device", default="cpu", help="torch device, e.g. cpu, cuda, cuda:1 (default cpu)")
    embed.add_argument(
        "--dtype",
        choices=DTYPE_NAMES,
        default="float32",
        help="compute dtype (default float32); outputs are stored as float32",
    )
    # No `choices`: the names are `ElmoConfig`'s (CPU_MATMULS), which this module cannot import without torch; `embed`
    # checks the value against them before loading the model.
    embed.add_argument(
        "--cpu-matmul",
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

    export = folder_writer(
        "export",
        "export a model folder to the original layout (options.json + weights.hdf5) or to ONNX",
        ["original", "onnx"],
        "bilm-tf/AllenNLP files (default) or model.onnx for ONNX Runtime, any batch size and sentence length, "
        "beside the config and tokenizer files (needs the onnx extra)",
    )
    export.add_argument("--model-dir", required=True, help="an hf_elmo model folder or a bundled model (ko-nsmc)")

    push = commands.add_parser(
        "push",
        prog=progs.get("push"),
        help="upload a model folder or a bundled model to the Hub, complete: with the code files and auto_map that "
        "load it by id where hf_elmo is not installed",
    )
    push.add_argument("model", help="model folder or bundled model (ko-nsmc, ko-nsmc-sentiment)")
    push.add_argument(
        "repo_id", metavar="REPO_ID", help="the Hub repository (NAMESPACE/NAME); made if it does not exist"
    )
    push.add_argument("--private", action="store_true", help="create the Hub repository as private")

    info = commands.add_parser(
        "info", prog=progs.get("info"), help="print a model's sizes, layers, parameter count and dtype"
    )
    info.add_argument("model", help="model folder, bundled model (ko-nsmc) or Hub id")

    quickstart = commands.add_parser(
        "quickstart",
        prog=progs.get("quickstart"),
        help="the Korean models shipped inside the package, offline: a homonym's senses by layer, then sentiment "
        "(needs the korean extra)",
        description="The unit 배 (belly, boat or pear) in six sentences: its cosine similarities at each layer of "
        "the bundled biLM ko-nsmc and whether the best layer tells the senses apart; then reviews labelled by "
        "ko-nsmc-sentiment. Offline; needs kiwipiepy (the korean extra). With matplotlib (the plot extra) it also "
        "draws the similarities, a heatmap per layer, into a PNG.",
    )
    # The working directory by default, never the installed package, which may be read-only.
    pictures = quickstart.add_mutually_exclusive_group()
    pictures.add_argument(
        "--plot",
        metavar="PNG",
        default="quickstart-bae.png",
        help="where the picture goes (default quickstart-bae.png, in the working directory)",
    )
    pictures.add_argument("--no-plot", dest="plot", action="store_const", const=None, help="draw no picture")
    quickstart.add_argument(
        "--model",
        help="run the comparison alone on this biLM (a folder, bundled model or Hub id) instead of ko-nsmc, on the "
        "bundled homonyms unless --word and --sentences name another",
    )
    quickstart.add_argument("--word", help="the homonym to compare, a unit of the biLM's tokenizer (with --sentences)")
    quickstart.add_argument(
        "--sentences",
        metavar="FILE",
        help="the senses of --word: a UTF-8 text file of SENSE<TAB>SENTENCE lines, two senses or more, each in two "
        "sentences or more",
    )

    # Parsed by hf_elmo.pretraining's own parser (see parse_command); listed here for `hf-elmo --help`.
    commands.add_parser(
        "pretrain", help="pre-train an ELMo biLM from scratch (hf-elmo pretrain --help)", add_help=False
    )
    return parser


def missing_path(args: argparse.Namespace) -> str | None:
    """The one-line error for an input file, model path or package on the command line that does not exist, or
    None."""
    if args.command == "quickstart" and args.sentences is not None and not Path(args.sentences).is_file():
        return f"no such file for --sentences: {args.sentences}"
    if args.command == "quickstart" and args.model is None and importlib.util.find_spec("kiwipiepy") is None:
        return 'the quickstart needs the korean extra (kiwipiepy, Korean morphemes): pip install "kiwipiepy>=0.21"'
    if args.command == "quickstart" and args.plot is not None and not Path(args.plot).parent.is_dir():
        return f"no such folder for --plot: {Path(args.plot).parent}"
    if args.command == "embed" and Path(args.input).is_dir():
        return f"{args.input} is a folder; embed reads a text file"
    if args.command == "embed" and not Path(args.input).exists():
        return f"no such input file: {args.input}"
    if args.command == "embed" and (reason := unreadable_reason(args.input)):  # a named pipe, no read permission
        return f"cannot read {args.input}: {reason}"
    if args.command == "embed" and Path(args.output).exists():  # the command says the same after its lock
        return (
            f"{Path(args.output)} exists"
            + (" and is complete" if args.resume else "")
            + "; remove it to write it again"
        )
    if args.command == "convert":
        for path in local_inputs(args):
            if not path.exists():
                return (
                    f"no such model folder or .zip: {path}"
                    if args.format == "elmoformanylangs"
                    else f"no such file: {path}"
                )
    model = args.model_dir if args.command == "export" else getattr(args, "model", None)
    if model is not None and is_path_only(model) and not Path(model).expanduser().exists():
        return f"no such model folder: {model}"
    if args.command in ("embed", "info") and (checkpoint := original_checkpoint(args.model)):
        return checkpoint
    if args.command == "embed":
        return missing_for_embed(args)
    return None


def local_pre_tokenizer(model: str) -> str | None:
    """The pre-tokenizer a local folder's or bundled model's `tokenizer_config.json` names (`korean_morphemes`), or
    None (none named, a Hub id, a file that cannot be read: the tokenizer's reader says why once it loads)."""
    folder = local_model_folder(model)
    if folder is None:
        return None
    settings = json_object_or_none(folder / "tokenizer_config.json") or {}
    name = settings.get("pre_tokenizer")
    return name if isinstance(name, str) else None


class PreTokenizerNeeds(NamedTuple):
    """What a pre-tokenizer splits a line into, the package that does it and its install line."""

    units: str
    unit: str
    package: str
    install: str


PRE_TOKENIZER_NEEDS = {
    "korean_morphemes": PreTokenizerNeeds("Korean morphemes", "morpheme", "kiwipiepy", 'pip install "kiwipiepy>=0.21"')
}


def whitespace_words_error(model: str, pre_tokenizer: str | None, pretokenize: bool) -> str | None:
    """
    The one-line error of `embed` without `--pretokenize` on a model whose tokenizer splits lines into other units
    (`PRE_TOKENIZER_NEEDS`), or None: split on whitespace, a line's words would reach the biLM as units it never read
    in pre-training (배를, not 배 and 를). Asked before the model loads (a local folder's `tokenizer_config.json`)
    and again once its tokenizer has (a Hub model's).
    """
    if pretokenize or pre_tokenizer not in PRE_TOKENIZER_NEEDS:
        return None
    needs = PRE_TOKENIZER_NEEDS[pre_tokenizer]
    return (
        f"{model} reads {needs.units} (pre_tokenizer {pre_tokenizer}), not whitespace words: pass --pretokenize (one "
        f"vector per {needs.unit})"
    )


def missing_for_embed(args: argparse.Namespace) -> str | None:
    """The one-line error for what `embed` would find missing once the model had loaded, decided from the folder's
    JSON files and the installed packages: `--pretokenize` for a folder reading morphemes, the pre-tokenizer's package,
    h5py for HDF5 output. None otherwise."""
    pre_tokenizer = local_pre_tokenizer(args.model)
    if error := whitespace_words_error(args.model, pre_tokenizer, args.pretokenize):
        return error
    if pre_tokenizer in PRE_TOKENIZER_NEEDS:
        needs = PRE_TOKENIZER_NEEDS[pre_tokenizer]
        if importlib.util.find_spec(needs.package) is None:
            return f"{args.model} reads {needs.units}, which needs {needs.package}: {needs.install}"
    if args.format == "hdf5" and importlib.util.find_spec("h5py") is None:
        return "HDF5 output needs h5py: pip install h5py (or use --format npy)"
    return None


def usage_error(args: argparse.Namespace) -> str | None:
    """
    The one-line error for an `embed` option that cannot apply, or None; `args.mix` becomes its list of weights. The
    number of `--mix` weights is checked against the config of a local folder or bundled model here, before anything
    loads (against a Hub model's, by the command once it has the config).
    """
    if args.command == "quickstart" and (args.word is None) != (args.sentences is None):
        return "--word and --sentences go together: the homonym and the file of its senses"
    if args.command != "embed":
        return None
    for flag in ("--batch-size", "--max-words", "--max-line-length"):
        if (value := getattr(args, flag[2:].replace("-", "_"))) < 1:
            return f"{flag} must be at least 1, got {value}"
    if args.mix is None:
        return None
    try:
        args.mix = [float(weight) for weight in args.mix.split(",")]
    except ValueError:
        return f"--mix takes comma-separated numbers, got {args.mix!r}"
    if not all(map(math.isfinite, args.mix)):
        return f"--mix takes finite numbers, got {','.join(map(str, args.mix))}"
    layers = local_representation_layers(args.model)
    if layers is not None and len(args.mix) != layers:
        return f"--mix needs {layers} weights (one per layer), got {len(args.mix)}"
    return None


def local_representation_layers(model: str) -> int | None:
    """
    The layers a model returns (`ElmoConfig.num_representation_layers`: the token layer and one per LSTM layer), read
    from `config.json` where the name is a local folder or a bundled model; None for a Hub id and for a config that
    cannot be read (the command's loader says why).
    """
    folder = local_model_folder(model)
    if folder is None:
        return None
    n_layers = (json_object_or_none(folder / "config.json") or {}).get("n_layers")
    return n_layers + 1 if is_integer(n_layers) else None  # `"n_layers": true` is no count: the loader refuses it


def local_inputs(args: argparse.Namespace) -> list[Path]:
    """The local files and folders `convert` or `export` reads (URLs, Hub ids and options not given left out)."""
    if args.command == "export":
        folder = local_model_folder(args.model_dir)
        return [] if folder is None else [folder]
    names = [args.model_dir] if args.format == "elmoformanylangs" else [args.options_file, args.weight_file]
    return [
        Path(name).expanduser() for name in names if name is not None and not name.startswith(("http://", "https://"))
    ]


def overwritten_input(args: argparse.Namespace) -> str | None:
    """The one-line error for `convert` or `export` whose `--output-dir` is, or holds, one of its inputs or the
    working folder: `--overwrite` would delete them (`folders.replacing_problem`). None otherwise."""
    if args.command not in ("convert", "export") or not args.overwrite:  # without it, a non-empty folder is refused
        return None
    return replacing_problem(args.output_dir, local_inputs(args), "--overwrite")


def empty_argument(argv: list[str]) -> str | None:
    """
    The one-line error for an argument that is empty (`""`, `--flag=`), or None. An empty path is the current
    folder, never meant: it is a shell variable that was not set, and `--output-dir "$OUT" --overwrite` would
    replace the folder the command runs in. Checked on every command, a value of any kind.
    """
    for position, argument in enumerate(argv):
        name, is_joined, value = argument.partition("=")
        if argument.startswith("--") and is_joined and not value.strip():
            return f"{name} is given an empty value (a variable that is not set?); give one"
        if not argument.strip():
            after = f"after {argv[position - 1]}" if position else "first"
            return f"an empty argument ({after}; a variable that is not set?); give a value"
    return None


def missing_text_file(argv: list[str]) -> str | None:
    """The one-line error for a `pretrain` text file (`--train-file`, `--validation-file`) that does not exist, as
    `hf_elmo.pretraining` words it; None otherwise. Its parser, transformers', takes seconds to import."""
    flag = None
    for argument in argv:
        name, is_joined, value = argument.partition("=")
        if argument.startswith("-"):
            flag = PRETRAIN_TEXT_FLAGS.get(name)
            if flag is None or not is_joined:
                continue
            argument = value
        if flag is not None and not Path(argument).exists():
            return f"cannot read {flag} {argument}: {os.strerror(errno.ENOENT)}"
    return None


def parse_command(argv=None, prog: str = "hf-elmo") -> tuple[str, argparse.Namespace | list[str]] | int:
    """
    `hf-elmo ARGV` parsed: the command and its arguments (for `pretrain`, the list its own parser reads), or the exit
    status of an error answered here (argparse exits by itself on `--help` and on usage errors). A standalone script
    running one subcommand passes its own name as `prog`. The caller runs the command (`hf_elmo.cli.run`).
    """
    argv = sys.argv[1:] if argv is None else list(argv)
    if error := empty_argument(argv):
        print(f"{prog}: error: {error}", file=sys.stderr)
        return 2
    if argv[:1] == ["pretrain"]:
        if error := missing_text_file(argv[1:]):
            print(f"{prog}: error: {error}", file=sys.stderr)
            return 2  # as the command says it, once transformers is imported
        return "pretrain", argv[1:]
    args = build_parser({argv[0]: prog} if argv and prog != "hf-elmo" else None).parse_args(argv)
    if error := missing_path(args):
        print(f"{prog}: error: {error}", file=sys.stderr)
        return 1
    if error := usage_error(args) or overwritten_input(args):
        print(f"{prog}: error: {error}", file=sys.stderr)
        return 2
    return args.command, args
