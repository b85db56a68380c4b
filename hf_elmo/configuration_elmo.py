"""ELMo configuration: every option of the original `options.json`, and of ELMoForManyLangs' models."""

import difflib
import functools
import inspect
import numbers
from collections.abc import Callable
from typing import Any, NamedTuple

from transformers import GenerationConfig, PretrainedConfig
from transformers.utils import logging

from .alphabet_elmo import CharacterAlphabet
from .crf_elmo import LABEL_SCHEMES

ORIGINAL_FILTERS = [[1, 32], [2, 32], [3, 64], [4, 128], [5, 256], [6, 512], [7, 1024]]
# "auto": the fast kernels of `kernels_elmo` where they apply; "reference": the reference code only.
RECURRENCE_IMPLEMENTATIONS = ("auto", "reference")
# The matrix products of the fast CPU recurrence (see `kernels_cpu_products.step_products`): "auto" measures which
# float32 library is fastest on this machine for each shape, once; "int8" is the opt-in reduced-precision mode.
CPU_MATMULS = ("auto", "int8")
# How this machine computes the model, not what the model is: never written to config.json (see `ElmoConfig`).
MACHINE_SETTINGS = ("recurrence_implementation", "cpu_matmul")

logger = logging.get_logger(__name__)


class ElmoConfig(PretrainedConfig):
    r"""
    Configuration of an ELMo biLM (Peters et al., 2018). The defaults are the shapes of the original
    "ELMo 2x4096_512_2048cnn_2xhighway" model.

    Args:
        char_embedding_dim (`int`): size of a character embedding (`char_cnn.embedding.dim`).
        filters (`list[list[int]]`): `(width, n_filters)` of each character convolution (`char_cnn.filters`).
        n_highway (`int`): number of highway layers after the convolutions (`char_cnn.n_highway`).
        activation (`str`): `"relu"` or `"tanh"`, applied after the max over positions (`char_cnn.activation`).
        n_characters (`int`): 261 (as trained) or 262 (as released for inference); both load the same
            261-row character table plus a zero padding row (`char_cnn.n_characters`).
        max_characters_per_token (`int`): length of a word's character row (`char_cnn.max_characters_per_token`).
        projection_dim (`int`): size of the token representation and of each LSTM's projected output
            (`lstm.projection_dim`).
        cell_dim (`int`): memory cells of each LSTM (`lstm.dim`).
        n_layers (`int`): LSTM layers per direction (`lstm.n_layers`).
        cell_clip (`float`, *optional*): memory clipped to `[-cell_clip, cell_clip]` (`lstm.cell_clip`).
        proj_clip (`float`, *optional*): projected output clipped likewise (`lstm.proj_clip`).
        use_skip_connections (`bool`): each LSTM layer after the first adds its input to its output
            (`lstm.use_skip_connections`).
        forget_bias (`float`): added to the forget gate at run time; 1.0 is TensorFlow's `LSTMCell` default, with
            which bilm-tf trained (the original weight files store the bias without it).
        lstm_dropout (`float`): dropout where bilm-tf's `dropout` applies when it trains: on the input of every LSTM
            layer (before the layer and its skip connection) while the biLM trains (training mode, its weights
            requiring gradients), and, in `ElmoForPreTraining` in training mode, on the top layer before the softmax.
            0 (the default) for none; eval mode never drops, and a frozen biLM's layers are never dropped.
        recurrence_implementation (`str`): `"auto"` runs the fast kernels of `kernels_elmo` where they apply (the
            in-place recurrence and the character convolutions as matrix products when nothing needs gradients,
            the hand-written backward when the biLM trains); `"reference"` always runs the reference code under
            autograd. Settable at `from_pretrained(..., recurrence_implementation="reference")`.
        cpu_matmul (`str`): the library of the fast recurrence's matrix products on CPU. `"auto"` times the float32
            candidates (`torch.mm` on the `(in, out)` kernels; oneDNN's linear on a prepacked copy, chosen only when
            5% faster, as its copies cost resident memory) for each product shape on first use, and keeps the
            fastest for this CPU, thread count and torch version in a cache file (`$HF_ELMO_CACHE`, default
            `~/.cache/hf_elmo`), so that the choice is made once per machine. `"int8"` is opt-in reduced precision
            for small batches, where each step
            streams its weights: the recurrent and projection kernels quantised per output channel, their products in
            int8 with dynamically quantised inputs, which changes the outputs slightly (their cosine with float32 is
            in `benchmarks/RESULTS.md`). Ignored off the CPU fast path.

    `recurrence_implementation` and `cpu_matmul` are machine settings: they choose how this machine computes the
    model, not what the model computes, so they are never written to `config.json` (as transformers leaves out
    `attn_implementation`) and a loaded model runs with "auto" unless told otherwise. Choose them when loading
    (`ElmoModel.from_pretrained(folder, cpu_matmul="int8")`) or on a loaded model's config
    (`model.config.cpu_matmul = "int8"`); both are checked against the allowed values.

    Models trained by other code (ELMoForManyLangs) also set:

        char_vocab_size (`int`, *optional*): size of a learned character vocabulary; `None` for bilm-tf's byte
            alphabet (then `n_characters` applies). See `alphabet_elmo.py`.
        char_markers (`dict[str, int]`, *optional*): with `char_vocab_size`, the id of each marker role
            (`begin_of_sentence`, `end_of_sentence`, `begin_of_word`, `end_of_word`, `padding`, `unknown`).
        word_input_vocab_size (`int`, *optional*): words of a word-embedding input (`word_input_ids`), whose vectors
            are concatenated before the character CNN's output, ahead of the projection; `None` for none.
        word_input_dim (`int`, *optional*): size of a word-input vector; set with `word_input_vocab_size`.
        highway_gate (`str`): which side of a highway layer its gate multiplies: `"transform"` (bilm-tf:
            `g * f(x) + (1 - g) * x`) or `"carry"` (AllenNLP's module, ELMoForManyLangs: `g * x + (1 - g) * f(x)`).
        always_project (`bool`): project the token representation even when it already has `projection_dim`
            values (ELMoForManyLangs always does; bilm-tf only when the widths differ).

    The task heads (`ElmoForSequenceClassification`, `ElmoForTokenClassification`) also read:

        freeze_bilm (`bool`): keep the biLM's weights fixed; only the layer mix and the head train (the paper's
            setting).
        mix_layer_norm (`bool`): normalise each layer over its valid positions before mixing.
        mix_weights (`list[float]`, *optional*): fixed, non-trainable mixing scalars `s` (one per layer, before the
            softmax); trainable and starting at zero when absent.
        mix_l2_coefficient (`float`): the paper's lambda: `lambda * ||s||^2` is added to the loss.
        mix_dropout (`float`): dropout on the mixed representation.
        concat_token_representation (`bool`): feed `[x_k ; ELMo_k]`, the context-independent token
            representation beside the mix, to the task layers.
        task_lstm_dim (`int`): units per direction of a task BiLSTM over the representation; 0 for none.
        pooling (`str`): how `ElmoForSequenceClassification` pools the words: `"mean"`, `"max"` or `"mean_max"`.
        pair_classification (`bool`): `ElmoForSequenceClassification` pools the two sentences marked by
            `token_type_ids` separately and classifies `[u ; v ; |u - v| ; u * v]`.
        use_crf (`bool`): `ElmoForTokenClassification` puts a linear-chain CRF over its per-word scores: the loss
            is the CRF's negative log-likelihood and the prediction the Viterbi path (see `crf_elmo.py`).
        crf_constraint (`str`, *optional*): with `use_crf`, the label scheme of `id2label` (`"BIO"` or `"BIOES"`)
            whose illegal transitions (such as `O` -> `I-PER`) decoding never takes; `None` for none.

    `ElmoForPreTraining` also reads:

        word_vocab_size (`int`, *optional*): words of the shared softmax (the tokenizer's word vocabulary).
        n_negative_samples (`int`, *optional*): sampled-softmax candidates per training batch.

    transformers' standard names: `num_hidden_layers` is `n_layers` (so a model returns `num_hidden_layers + 1`
    hidden states), `hidden_size` is `2 * projection_dim` (read-only; a value given by another model type's config
    is ignored).

    Every field is checked whenever it is set (here, by `from_pretrained(folder, n_layers=...)` or on a loaded config)
    against its type and range (`FIELD_RULES`), and the fields together against each other
    (`refuse_invalid_fields`), each refusal a one-line `ValueError` naming the field. A key that is neither a field nor
    one transformers writes or reads is kept as a plain attribute, unused, and named in one warning (with the field
    it is closest to, when one is).
    """

    model_type = "elmo"
    attribute_map = {"num_hidden_layers": "n_layers"}

    def __init__(
        self,
        char_embedding_dim=16,
        filters=None,
        n_highway=2,
        activation="relu",
        n_characters=262,
        max_characters_per_token=50,
        projection_dim=512,
        cell_dim=4096,
        n_layers=2,
        cell_clip=3.0,
        proj_clip=3.0,
        use_skip_connections=True,
        forget_bias=1.0,
        lstm_dropout=0.0,
        recurrence_implementation="auto",
        cpu_matmul="auto",
        freeze_bilm=True,
        mix_layer_norm=False,
        mix_weights=None,
        mix_l2_coefficient=0.0,
        mix_dropout=0.5,
        concat_token_representation=False,
        task_lstm_dim=0,
        pooling="mean",
        pair_classification=False,
        use_crf=False,
        crf_constraint=None,
        word_vocab_size=None,
        n_negative_samples=None,
        char_vocab_size=None,
        char_markers=None,
        word_input_vocab_size=None,
        word_input_dim=None,
        highway_gate="transform",
        always_project=False,
        **kwargs,
    ):
        n_layers = kwargs.pop("num_hidden_layers", n_layers)
        # Derived from projection_dim: a config.json saved by another model type may carry its own.
        kwargs.pop("hidden_size", None)
        warn_about_unknown_keys(kwargs)
        self.char_embedding_dim = char_embedding_dim
        self.filters = ORIGINAL_FILTERS if filters is None else filters
        self.n_highway = n_highway
        self.activation = activation
        self.n_characters = n_characters
        self.max_characters_per_token = max_characters_per_token
        self.projection_dim = projection_dim
        self.cell_dim = cell_dim
        self.n_layers = n_layers
        self.cell_clip = cell_clip
        self.proj_clip = proj_clip
        self.use_skip_connections = use_skip_connections
        self.forget_bias = forget_bias
        self.lstm_dropout = lstm_dropout
        self.recurrence_implementation = recurrence_implementation
        self.cpu_matmul = cpu_matmul
        self.freeze_bilm = freeze_bilm
        self.mix_layer_norm = mix_layer_norm
        self.mix_weights = mix_weights
        self.mix_l2_coefficient = mix_l2_coefficient
        self.mix_dropout = mix_dropout
        self.concat_token_representation = concat_token_representation
        self.task_lstm_dim = task_lstm_dim
        self.pooling = pooling
        self.pair_classification = pair_classification
        self.use_crf = use_crf
        self.crf_constraint = crf_constraint
        self.word_vocab_size = word_vocab_size
        self.n_negative_samples = n_negative_samples
        self.char_vocab_size = char_vocab_size
        self.char_markers = char_markers
        self.word_input_vocab_size = word_input_vocab_size
        self.word_input_dim = word_input_dim
        self.highway_gate = highway_gate
        self.always_project = always_project
        refuse_invalid_fields(self)
        super().__init__(**kwargs)

    def to_dict(self) -> dict:
        """As transformers' `to_dict` (which `save_pretrained` and `to_json_string` write), without the machine
        settings."""
        return {key: value for key, value in super().to_dict().items() if key not in MACHINE_SETTINGS}

    def __setattr__(self, key, value):
        # Checked on every assignment: `from_pretrained(..., n_layers=...)` sets fields after `__init__`.
        key = self.attribute_map.get(key, key)
        if key in FIELD_RULES:
            value = FIELD_RULES[key].checked(key, value)
        if key == "recurrence_implementation" and value not in RECURRENCE_IMPLEMENTATIONS:
            raise ValueError(f"recurrence_implementation must be one of {RECURRENCE_IMPLEMENTATIONS}, got {value!r}")
        if key == "cpu_matmul" and value not in CPU_MATMULS:
            raise ValueError(f"cpu_matmul must be one of {CPU_MATMULS}, got {value!r}")
        super().__setattr__(key, value)

    @property
    def n_filters(self) -> int:
        """Width of the concatenated convolution outputs."""
        return sum(n for _, n in self.filters)

    @property
    def alphabet(self) -> CharacterAlphabet:
        """
        The character alphabet (its size and markers) that the model's character table is for; built once per size and
        markers, and never saved.
        """
        return CharacterAlphabet.from_config(self)

    @property
    def hidden_size(self) -> int:
        """Width of every representation layer: `[forward ; backward]`."""
        return 2 * self.projection_dim

    @property
    def num_representation_layers(self) -> int:
        """Layers a model returns and the ELMo mix weighs: the token layer plus one per LSTM layer."""
        return self.n_layers + 1

    @classmethod
    def from_original_options(cls, options: dict) -> "ElmoConfig":
        """Builds a config from a parsed original `options.json`."""
        try:
            cnn, lstm = options["char_cnn"], options["lstm"]
            return cls(
                char_embedding_dim=cnn["embedding"]["dim"],
                filters=cnn["filters"],
                n_highway=cnn["n_highway"],
                activation=cnn["activation"],
                n_characters=cnn["n_characters"],
                max_characters_per_token=cnn["max_characters_per_token"],
                projection_dim=lstm["projection_dim"],
                cell_dim=lstm["dim"],
                n_layers=lstm["n_layers"],
                cell_clip=lstm.get("cell_clip"),
                proj_clip=lstm.get("proj_clip"),
                use_skip_connections=lstm.get("use_skip_connections", False),
            )
        except (KeyError, TypeError) as error:
            raise ValueError(f"options.json lacks a required entry: {error}") from error

    def to_original_options(self) -> dict:
        """The original `options.json` content for this config."""
        lstm = {
            "dim": self.cell_dim,
            "n_layers": self.n_layers,
            "projection_dim": self.projection_dim,
            "use_skip_connections": self.use_skip_connections,
        }
        if self.cell_clip is not None:
            lstm["cell_clip"] = self.cell_clip
        if self.proj_clip is not None:
            lstm["proj_clip"] = self.proj_clip
        return {
            "lstm": lstm,
            "char_cnn": {
                "embedding": {"dim": self.char_embedding_dim},
                "filters": self.filters,
                "n_highway": self.n_highway,
                "n_characters": self.n_characters,
                "max_characters_per_token": self.max_characters_per_token,
                "activation": self.activation,
            },
        }


class FieldRule(NamedTuple):
    """What a field accepts (`accepts`), what its refusal says it accepts (`allowed`), what is stored (`stored`)."""

    accepts: Callable[[Any], bool]
    allowed: str
    stored: Callable[[Any], Any] = lambda value: value

    def checked(self, name: str, value: Any) -> Any:
        """The value to store in field `name`; a `ValueError` naming the field, the value and what is allowed."""
        if not self.accepts(value):
            raise ValueError(f"{name} must be {self.allowed}, got {value!r}")
        return self.stored(value)


def is_integer(value: Any) -> bool:
    """An int (numpy's too), not a bool."""
    return isinstance(value, numbers.Integral) and not isinstance(value, bool)


def is_number(value: Any) -> bool:
    """An int or a float (numpy's too), not a bool."""
    return isinstance(value, numbers.Real) and not isinstance(value, bool)


def integer(minimum: int) -> FieldRule:
    """An integer from `minimum` up, stored as a Python int."""
    return FieldRule(lambda value: is_integer(value) and value >= minimum, f"an integer >= {minimum}", int)


def optional(rule: FieldRule) -> FieldRule:
    """`rule`, or None."""
    return FieldRule(
        lambda value: value is None or rule.accepts(value),
        f"None or {rule.allowed}",
        lambda value: None if value is None else rule.stored(value),
    )


def one_of(choices: tuple) -> FieldRule:
    """One of `choices`."""
    *others, last = map(repr, choices)
    return FieldRule(lambda value: value in choices, f"{', '.join(others)} or {last}")


def is_filter(pair: Any) -> bool:
    """A `[width, n_filters]` pair of `filters`."""
    return isinstance(pair, (list, tuple)) and len(pair) == 2 and all(is_integer(n) and n >= 1 for n in pair)


BOOLEAN = FieldRule(lambda value: isinstance(value, bool), "True or False")
FRACTION = FieldRule(lambda value: is_number(value) and 0 <= value < 1, "in [0, 1)", float)
POSITIVE = FieldRule(lambda value: is_number(value) and value > 0, "a number > 0")

FIELD_CHOICES = {
    "activation": ("relu", "tanh"),
    "n_characters": (261, 262),
    "pooling": ("mean", "max", "mean_max"),
    "highway_gate": ("transform", "carry"),
}

# What each field accepts, checked whenever it is set (`ElmoConfig.__setattr__`); the machine settings are checked
# there against their own lists, and how the fields fit together in `refuse_invalid_fields`.
FIELD_RULES = {
    **{name: one_of(choices) for name, choices in FIELD_CHOICES.items()},
    "char_embedding_dim": integer(1),
    "filters": FieldRule(
        lambda value: isinstance(value, (list, tuple)) and len(value) > 0 and all(map(is_filter, value)),
        "a non-empty list of [width, n_filters] pairs of integers >= 1",
        lambda value: [[int(width), int(n_filters)] for width, n_filters in value],
    ),
    "n_highway": integer(0),
    "max_characters_per_token": integer(3),
    "projection_dim": integer(1),
    "cell_dim": integer(1),
    "n_layers": integer(1),
    "cell_clip": optional(POSITIVE),
    "proj_clip": optional(POSITIVE),
    "use_skip_connections": BOOLEAN,
    "forget_bias": FieldRule(is_number, "a number", float),
    "lstm_dropout": FRACTION,
    "freeze_bilm": BOOLEAN,
    "mix_layer_norm": BOOLEAN,
    "mix_weights": optional(
        FieldRule(
            lambda value: isinstance(value, (list, tuple)) and all(map(is_number, value)),
            "a list of numbers, one per layer",
            lambda value: [float(weight) for weight in value],
        )
    ),
    "mix_l2_coefficient": FieldRule(lambda value: is_number(value) and value >= 0, "a number >= 0"),
    "mix_dropout": FRACTION,
    "concat_token_representation": BOOLEAN,
    "task_lstm_dim": integer(0),
    "pair_classification": BOOLEAN,
    "use_crf": BOOLEAN,
    "crf_constraint": FieldRule(
        lambda value: value is None or value in LABEL_SCHEMES, f"one of {tuple(LABEL_SCHEMES)} or None"
    ),
    "word_vocab_size": optional(integer(2)),
    "n_negative_samples": optional(integer(1)),
    "char_vocab_size": optional(integer(1)),
    "char_markers": optional(
        FieldRule(
            lambda value: (
                isinstance(value, dict) and all(isinstance(k, str) and is_integer(i) for k, i in value.items())
            ),
            "a dict of marker roles to ids",
            dict,
        )
    ),
    "word_input_vocab_size": optional(integer(1)),
    "word_input_dim": optional(integer(1)),
    "always_project": BOOLEAN,
}


def refuse_invalid_fields(config: ElmoConfig) -> None:
    """Raises a `ValueError` saying why, when the fields, each allowed alone, build no ELMo model together."""
    if max(width for width, _ in config.filters) > config.max_characters_per_token:
        raise ValueError("a filter is wider than max_characters_per_token")
    if config.projection_dim > config.cell_dim:
        raise ValueError(f"projection_dim ({config.projection_dim}) cannot exceed cell_dim ({config.cell_dim})")
    if config.mix_weights is not None and len(config.mix_weights) != config.n_layers + 1:
        raise ValueError(f"mix_weights needs one value per layer ({config.n_layers + 1}), got {config.mix_weights!r}")
    if (config.char_vocab_size is None) != (config.char_markers is None):
        raise ValueError("char_vocab_size and char_markers go together (a learned character vocabulary)")
    if (config.word_input_vocab_size is None) != (config.word_input_dim is None):
        raise ValueError("word_input_vocab_size and word_input_dim go together (a word-embedding input)")
    CharacterAlphabet.from_config(config)  # checks the markers against the size


# Keys of any model's config that transformers writes or reads beside the attributes of a bare `PretrainedConfig`
# and the generation parameters it drops: arguments of its `__init__`, `auto_map` (remote code), and the attributes
# of transformers 4's configs, which tools still write.
TRANSFORMERS_KEYS = (
    "num_labels",
    "torch_dtype",
    "name_or_path",
    "attn_implementation",
    "experts_implementation",
    "per_layer_config",
    "auto_map",
    "_commit_hash",
    "_attn_implementation_autoset",
    "task_specific_params",
    "finetuning_task",
    "tokenizer_class",
    "prefix",
    "sep_token_id",
    "tie_word_embeddings",
    "tie_encoder_decoder",
    "is_decoder",
    "add_cross_attention",
    "cross_attention_hidden_size",
    "pruned_heads",
    "torchscript",
    "use_bfloat16",
    "tf_legacy_loss",
    "quantization_config",
)


@functools.cache
def known_config_keys() -> tuple[str, ...]:
    """The fields of `ElmoConfig` and the keys transformers knows in any config, sorted."""
    fields = set(inspect.signature(ElmoConfig.__init__).parameters) - {"self", "kwargs"}
    standard = {*PretrainedConfig().to_dict(), *GenerationConfig().to_dict(), *TRANSFORMERS_KEYS}
    return tuple(sorted(fields | standard))


def warn_about_unknown_keys(kwargs: dict) -> None:
    """One warning naming the keys of `kwargs` that neither ElmoConfig nor transformers knows, each with the known key
    it is closest to, when one is close (a misspelt field)."""
    unknown = [key for key in kwargs if key not in known_config_keys()]
    if not unknown:
        return
    named = []
    for key in unknown:
        close = difflib.get_close_matches(key, known_config_keys(), n=1)
        named.append(f"{key!r} (did you mean {close[0]!r}?)" if close else repr(key))
    logger.warning(f"ElmoConfig does not know {', '.join(named)}: kept as plain attributes, unused")


__all__ = ["ElmoConfig"]
