"""Converting ELMoForManyLangs models (HIT-SCIR's 44 languages, Korean among them) into hf_elmo model folders.

A release folder holds `config.json` (the training arguments; its `config_path` names the model settings file),
`char.dic` and `word.dic` (the vocabularies; `word.dic` only for a model with a word input) and `token_embedder.pkl` /
`encoder.pkl` (PyTorch state dicts). What
their models do differently from bilm-tf, and how the converted folder reproduces it:

- Characters come from a learned vocabulary (`char.dic`), cut to `max_characters_per_token - 2` code points, unknown
  ones mapped to `<oov>`. Their batching code puts the id of the symbol *named* `<eow>` at the start of every row and
  `<bow>`'s at the end: the trained models saw that order, so the converted alphabet gives `<eow>`'s id the
  begin-of-word role and `<bow>`'s the end-of-word role.
- A word embedding (`word.dic`), looked up exactly (case kept) by the word as its row holds it (cut), comes before
  the character CNN's output in the token representation, which is always projected.
- Highway gates multiply the carried input (`highway_gate="carry"`), and the LSTMs add no forget bias at run time
  (`forget_bias=0.0`).

The `.dic` files are read as their reader reads them: lines split where `codecs` splits them (`str.splitlines`),
each stripped of surrounding whitespace and split at tabs; a line left with one field (its symbol was whitespace)
is the full-width space U+3000; a symbol seen twice keeps its last id. The weights are loaded with
`torch.load(..., weights_only=True)`: no code in the files is run.
"""

import json
import os
import shutil
import tempfile
import zipfile
from pathlib import Path

import torch

from .alphabet_elmo import MARKER_ROLES, CharacterAlphabet
from .configuration_elmo import ElmoConfig
from .errors import ElmoConversionError, FileContentError, JsonFields, first_line
from .folders import atomic_directory, write_error
from .model_card import packaged_template, write_model_card
from .modeling_elmo import ElmoModel
from .tokenization_elmo import CHAR_VOCAB_FILE, WORD_INPUT_VOCAB_FILE, ElmoTokenizer

# `word.dic` is not among them: their `Embedder` reads it only when the settings give a word input (`word_dim` > 0).
RELEASE_FILES = ("config.json", "char.dic", "token_embedder.pkl", "encoder.pkl")
# The settings file every release's `config.json` names (`configs/cnn_50_100_512_4096_sample.json` of their
# package), for releases that do not ship it; used when `config_path` resolves to nothing.
STANDARD_SETTINGS_NAME = "cnn_50_100_512_4096_sample.json"
STANDARD_SETTINGS = {
    "encoder": {"name": "elmo", "projection_dim": 512, "cell_clip": 3, "proj_clip": 3, "dim": 4096, "n_layers": 2},
    "token_embedder": {
        "name": "cnn",
        "activation": "relu",
        "filters": [[1, 32], [2, 32], [3, 64], [4, 128], [5, 256], [6, 512], [7, 1024]],
        "n_highway": 2,
        "word_dim": 100,
        "char_dim": 50,
        "max_characters_per_token": 50,
    },
    "classifier": {"name": "sampled_softmax", "n_samples": 8192},
    "dropout": 0.1,
}
# Role -> the `char.dic` symbol whose id plays it in their rows (begin and end of word swapped, as trained).
MARKER_SYMBOLS_AS_TRAINED = dict(zip(MARKER_ROLES, ("<bos>", "<eos>", "<eow>", "<bow>", "<pad>", "<oov>")))


# -- reading a release ------------------------------------------------------------------------------------------------


def read_dic(path: Path) -> dict[str, int]:
    """A `char.dic` or `word.dic` as ELMoForManyLangs' reader builds it (quirks in the module docstring)."""
    try:
        text = path.read_bytes().decode("utf-8")
    except (OSError, UnicodeDecodeError) as error:
        raise ElmoConversionError(f"{path} is not a readable UTF-8 vocabulary: {error}") from error
    lexicon = {}
    for number, line in enumerate(text.splitlines(), start=1):
        fields = line.strip().split("\t")
        if len(fields) == 1:
            fields.insert(0, "\u3000")
        try:
            symbol, index = fields
            lexicon[symbol] = int(index)
        except ValueError as error:
            raise ElmoConversionError(f"{path} line {number} is not 'symbol<TAB>id': {line!r}") from error
    return lexicon


def resolve_settings(model_dir: Path, training_arguments: dict) -> tuple[dict, str]:
    """
    The model settings named by `config_path`: the path as given (relative to the folder), else its file name inside
    the folder, else the standard settings built in here. Returns them and where they came from.
    """
    named = training_arguments.get("config_path")
    if not isinstance(named, str) or not named:
        raise ElmoConversionError(f"{model_dir / 'config.json'} has no config_path naming the model settings")
    for candidate in (model_dir / named, model_dir / os.path.basename(named)):
        if candidate.is_file():
            return read_release_json(candidate), str(candidate)
    return STANDARD_SETTINGS, f"the built-in {STANDARD_SETTINGS_NAME} settings"


def read_release_json(path: Path) -> dict:
    """A JSON object of a release (its `config.json`, its model settings), read by `errors.read_json_file` (a
    regular file of bounded size); anything else is a one-line `ElmoConversionError`."""
    fix = "unpack the ELMoForManyLangs release again"
    try:
        return JsonFields.of_file(path, fix).data
    except FileContentError as error:
        raise ElmoConversionError(str(error)) from error


def config_from_settings(settings: dict, char_lexicon: dict, word_lexicon: dict | None) -> ElmoConfig:
    """The `ElmoConfig` of a model with these settings and vocabularies (`word_lexicon` `None` without `word.dic`);
    one-line errors for what cannot convert."""
    try:
        embedder, encoder = settings["token_embedder"], settings["encoder"]
        if str(embedder["name"]).lower() != "cnn":
            raise ElmoConversionError(
                f"the token embedder is {embedder['name']!r}: only the character CNN ('cnn') "
                f"converts (their own code cannot run a char-LSTM embedder either)"
            )
        if str(encoder["name"]).lower() != "elmo":
            raise ElmoConversionError(f"the encoder is {encoder['name']!r}: only the ELMo biLM ('elmo') converts")
        if embedder["char_dim"] <= 0:
            raise ElmoConversionError("the model reads no characters (char_dim 0): word-only models do not convert")
        if encoder["dim"] <= encoder["projection_dim"]:
            raise ElmoConversionError(
                "the LSTM memory is not wider than its projection: hf_elmo projects (and "
                "clips) LSTM outputs only when the memory is wider"
            )
        alphabet = CharacterAlphabet.from_symbols(char_lexicon, MARKER_SYMBOLS_AS_TRAINED)
        word_dim = embedder["word_dim"]
        if word_dim > 0 and word_lexicon is None:
            raise ElmoConversionError(f"the model reads words (word_dim {word_dim}) but the folder lacks word.dic")
        return ElmoConfig(
            char_embedding_dim=embedder["char_dim"],
            filters=embedder["filters"],
            n_highway=embedder["n_highway"],
            activation=embedder["activation"],
            max_characters_per_token=embedder["max_characters_per_token"],
            projection_dim=encoder["projection_dim"],
            cell_dim=encoder["dim"],
            n_layers=encoder["n_layers"],
            # Their LSTM clips only when the value is truthy.
            cell_clip=encoder["cell_clip"] or None,
            proj_clip=encoder["proj_clip"] or None,
            use_skip_connections=True,
            word_input_vocab_size=len(word_lexicon) if word_dim > 0 else None,
            word_input_dim=word_dim if word_dim > 0 else None,
            highway_gate="carry",
            always_project=True,
            forget_bias=0.0,
            **alphabet.config_fields(),
        )
    except (KeyError, TypeError) as error:
        raise ElmoConversionError(f"the model settings lack a required entry: {error!r}") from error
    except ValueError as error:  # ElmoConversionError is not a ValueError: those above pass through
        raise ElmoConversionError(f"the model settings cannot be converted: {error}") from error


def load_state_dict(path: Path) -> dict[str, torch.Tensor]:
    """A legacy PyTorch state dict, loaded without running code from the file."""
    try:
        state = torch.load(path, map_location="cpu", weights_only=True)
    except Exception as error:  # torch raises several types (UnpicklingError, RuntimeError, EOFError...)
        raise ElmoConversionError(f"{path} is not a loadable PyTorch state dict: {first_line(error)}") from error
    if not isinstance(state, dict) or not all(isinstance(v, torch.Tensor) for v in state.values()):
        raise ElmoConversionError(f"{path} does not hold a state dict of tensors")
    return dict(state)


# -- the weight mapping -----------------------------------------------------------------------------------------------


def state_dict_from_release(token_embedder: dict, encoder: dict, config: ElmoConfig) -> dict[str, torch.Tensor]:
    """
    `ElmoModel`'s state dict from theirs: the character table gains the zero row 0, each highway's `(2n, n)` layer
    splits into its nonlinear half and its gate half, their `(out, in)` LSTM weights are transposed to the
    `(in, out)` kernels (the gate order i, f, g, o is the same) and `state_linearity`'s bias is the LSTM bias.
    """
    source = {
        **{f"token_embedder.{k}": v for k, v in token_embedder.items()},
        **{f"encoder.{k}": v for k, v in encoder.items()},
    }
    used = set()

    def take(name: str) -> torch.Tensor:
        if name not in source:
            raise ElmoConversionError(f"the weights have no {name}, which the model settings imply")
        used.add(name)
        return source[name].float()

    n = config.n_filters
    char_table = take("token_embedder.char_emb_layer.embedding.weight")
    state = {
        "char_encoder.char_embedding.weight": torch.cat([char_table.new_zeros(1, char_table.shape[1]), char_table])
    }
    for i in range(len(config.filters)):
        for part in ("weight", "bias"):
            state[f"char_encoder.convolutions.{i}.{part}"] = take(f"token_embedder.convolutions.{i}.{part}")
    for k in range(config.n_highway):
        layer = f"token_embedder.highways._layers.{k}."
        weight, bias = take(layer + "weight"), take(layer + "bias")
        prefix = f"char_encoder.highways.{k}."
        state.update(
            {
                prefix + "nonlinear_weight": weight[:n],
                prefix + "nonlinear_bias": bias[:n],
                prefix + "gate_weight": weight[n:],
                prefix + "gate_bias": bias[n:],
            }
        )
    state["char_encoder.projection.weight"] = take("token_embedder.projection.weight")
    state["char_encoder.projection.bias"] = take("token_embedder.projection.bias")
    if config.word_input_vocab_size is not None:
        state["char_encoder.word_embedding.weight"] = take("token_embedder.word_emb_layer.embedding.weight")
    for direction, stack in (("forward", "forward_layers"), ("backward", "backward_layers")):
        for layer in range(config.n_layers):
            theirs, ours = f"encoder.{direction}_layer_{layer}.", f"bilm.{stack}.{layer}."
            state[ours + "input_kernel"] = take(theirs + "input_linearity.weight").t()
            state[ours + "recurrent_kernel"] = take(theirs + "state_linearity.weight").t()
            state[ours + "bias"] = take(theirs + "state_linearity.bias")
            state[ours + "projection_kernel"] = take(theirs + "state_projection.weight").t()
    unused = sorted(set(source) - used)
    if unused:
        raise ElmoConversionError(f"the weights hold tensors the model settings do not account for: {unused}")
    return {key: value.contiguous() for key, value in state.items()}


def check_vocabulary_sizes(token_embedder: dict, char_lexicon: dict, word_lexicon: dict | None):
    """Each `.dic` must have as many entries as its weight table has rows (their reader sizes the table from it); an
    absent `word.dic` (`None`) is left to the settings' check."""
    for name, lexicon, key in (
        ("char.dic", char_lexicon, "char_emb_layer"),
        ("word.dic", word_lexicon, "word_emb_layer"),
    ):
        table = token_embedder.get(f"{key}.embedding.weight")
        if table is None or lexicon is None:  # no such input, or no such file: the settings decide if that is right
            continue
        if table is not None and table.shape[0] != len(lexicon):
            raise ElmoConversionError(
                f"{name} reads as {len(lexicon)} entries but token_embedder.pkl's {key} has "
                f"{table.shape[0]} rows: the vocabulary does not belong to these weights"
            )
        if sorted(lexicon.values()) != list(range(len(lexicon))):
            raise ElmoConversionError(f"{name}'s ids are not 0..{len(lexicon) - 1}, each once")


def load_release(model_dir: Path) -> tuple[ElmoModel, ElmoTokenizer, str]:
    """The model (eval mode) and tokenizer of an unpacked release folder, and where its settings came from."""
    missing = [name for name in RELEASE_FILES if not (model_dir / name).is_file()]
    if missing:
        raise ElmoConversionError(
            f"{model_dir} is not an ELMoForManyLangs model folder: it lacks {', '.join(missing)}"
        )
    training_arguments = read_release_json(model_dir / "config.json")
    settings, settings_source = resolve_settings(model_dir, training_arguments)
    char_lexicon = read_dic(model_dir / "char.dic")
    word_lexicon = read_dic(model_dir / "word.dic") if (model_dir / "word.dic").is_file() else None
    token_embedder = load_state_dict(model_dir / "token_embedder.pkl")
    encoder = load_state_dict(model_dir / "encoder.pkl")
    try:
        check_vocabulary_sizes(token_embedder, char_lexicon, word_lexicon)
        config = config_from_settings(settings, char_lexicon, word_lexicon)
        state_dict = state_dict_from_release(token_embedder, encoder, config)
        model = ElmoModel(config)
        expected = model.state_dict()
        for key, value in state_dict.items():
            if value.shape != expected[key].shape:
                raise ElmoConversionError(
                    f"{key} has shape {tuple(value.shape)} in the weights, but the model "
                    f"settings imply {tuple(expected[key].shape)}"
                )
    except ElmoConversionError as error:
        raise ElmoConversionError(f"{error} (model settings: {settings_source})") from error
    model.load_state_dict(state_dict, strict=True)
    with tempfile.TemporaryDirectory() as vocabularies:
        char_file, word_file = Path(vocabularies) / CHAR_VOCAB_FILE, Path(vocabularies) / WORD_INPUT_VOCAB_FILE
        CharacterAlphabet.from_symbols(char_lexicon, MARKER_SYMBOLS_AS_TRAINED).save(char_file)
        if config.word_input_vocab_size is not None:
            word_file.write_text(json.dumps(word_lexicon, ensure_ascii=False), encoding="utf-8")
        tokenizer = ElmoTokenizer(
            max_characters_per_token=config.max_characters_per_token,
            char_vocab_file=str(char_file),
            word_input_vocab_file=str(word_file) if config.word_input_vocab_size is not None else None,
        )
    return model.eval(), tokenizer, settings_source


def _unpacked(model_path: Path, scratch: Path) -> Path:
    """The release folder: `model_path` itself, or the folder holding `config.json` inside a release `.zip`."""
    if model_path.is_dir():
        return model_path
    if not model_path.is_file():
        raise ElmoConversionError(f"no such model folder or .zip: {model_path}")
    try:
        with zipfile.ZipFile(model_path) as archive:
            configs = [name for name in archive.namelist() if os.path.basename(name) == "config.json"]
            if len(configs) != 1:
                raise ElmoConversionError(f"{model_path} holds {len(configs)} config.json files; a release has one")
            folder = os.path.dirname(configs[0])
            for name in archive.namelist():
                # Only the files of the release folder, written under their base names (no path from the archive).
                if os.path.dirname(name) == folder and not name.endswith("/"):
                    try:
                        with archive.open(name) as source, open(scratch / os.path.basename(name), "wb") as target:
                            shutil.copyfileobj(source, target)
                    except OSError as error:  # the temporary folder's disk is full
                        raise write_error(scratch, error) from error
    except zipfile.BadZipFile as error:
        raise ElmoConversionError(f"{model_path} is neither a folder nor a readable .zip: {error}") from error
    return scratch


def convert_elmoformanylangs(model_dir, output_dir, overwrite: bool = False) -> Path:
    """
    Converts an ELMoForManyLangs release (an unpacked folder or its `.zip`) into a `from_pretrained`-ready folder:
    `config.json`, `model.safetensors`, the tokenizer files (with `char_vocab.json` and `word_input_vocab.json`) and a
    model card. The folder appears complete or not at all.
    """
    with tempfile.TemporaryDirectory() as scratch:
        folder = _unpacked(Path(model_dir), Path(scratch))
        model, tokenizer, settings_source = load_release(folder)
        with atomic_directory(output_dir, overwrite) as staging:
            model.save_pretrained(staging)
            tokenizer.save_pretrained(staging)
            config = model.config
            write_model_card(
                staging,
                packaged_template("elmoformanylangs_elmo.md"),
                source=Path(model_dir).name,
                settings_file=os.path.basename(settings_source),
                n_parameters=f"{model.num_parameters():,}",
                char_vocab_size=config.char_vocab_size,
                word_input_vocab_size=config.word_input_vocab_size or 0,
                n_layers=config.n_layers,
                cell_dim=config.cell_dim,
                projection_dim=config.projection_dim,
            )
    return Path(output_dir)


__all__ = ["convert_elmoformanylangs", "load_release", "read_dic"]
