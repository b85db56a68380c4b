"""ELMo configuration: every option of the original `options.json`, and of ELMoForManyLangs' models.

Nothing here imports torch (transformers does, where installed): the label schemes of the CRF live here, not in
`crf_elmo`. A saved folder carries this file for `trust_remote_code` loading, which copies only the flat sibling
modules it imports (`from .x import y`).
"""

import copy
import dataclasses
import difflib
import functools
import inspect
from collections.abc import Callable
from typing import Any, NamedTuple

from transformers import GenerationConfig, PreTrainedConfig
from transformers.utils import is_torch_available, logging

from .alphabet_elmo import CharacterAlphabet
from .errors import JsonFields, is_integer, is_number

ORIGINAL_FILTERS = [[1, 32], [2, 32], [3, 64], [4, 128], [5, 256], [6, 512], [7, 1024]]
# "auto": the fast kernels of `kernels_elmo` where they apply; "reference": the reference code only.
RECURRENCE_IMPLEMENTATIONS = ("auto", "reference")
# The matrix products of the fast CPU recurrence (see `kernels_cpu_products.step_products`): "auto" measures which
# float32 library is fastest on this machine for each shape, once; "int8" is the opt-in reduced-precision mode.
CPU_MATMULS = ("auto", "int8")
# The label schemes that `crf_constraint` may name (see `crf_elmo.allowed_transitions`), and the prefixes of their
# labels besides "O".
LABEL_SCHEMES = {"BIO": ("B", "I"), "BIOES": ("B", "I", "E", "S")}
# A word's row of character ids (its UTF-8 bytes, cut to the row), for the config and the tokenizer alike: 20 times
# the released models' 50, where 10^9 made a tokenizer's rows fill the memory.
MAX_CHARACTERS_PER_TOKEN = 1000
# What a config may make a model allocate, refused before it is (a damaged or mistyped config.json, not a model):
# 2**32 parameters (16 GiB in float32; the original ELMo holds 93.6 million), and a word's character-CNN activations
# (`max_characters_per_token` times `n_filters` values, before the max over positions) of 2**24 values (64 MiB, 160
# times the original's 102,400).
MAX_PARAMETERS = 2**32
MAX_WORD_ACTIVATIONS = 2**24

logger = logging.get_logger(__name__)


class Rule(NamedTuple):
    """What a field accepts (`accepts`), what its refusal says it accepts (`allowed`), what is stored (`stored`)."""

    accepts: Callable[[Any], bool]
    allowed: str
    stored: Callable[[Any], Any] = lambda value: value

    def checked(self, name: str, value: Any) -> Any:
        """The value to store in field `name`; a `ValueError` naming the field, the value and what is allowed."""
        if not self.accepts(value):
            raise ValueError(f"{name} must be {self.allowed}, got {value!r}")
        return self.stored(value)


def integer(minimum: int, maximum: int | None = None) -> Rule:
    """An integer from `minimum` up (to `maximum`, where given), stored as a Python int."""
    if maximum is None:
        return Rule(lambda value: is_integer(value) and value >= minimum, f"an integer >= {minimum}", int)
    return Rule(
        lambda value: is_integer(value) and minimum <= value <= maximum, f"an integer from {minimum} to {maximum}", int
    )


def optional(rule: Rule) -> Rule:
    """`rule`, or None."""
    return Rule(
        lambda value: value is None or rule.accepts(value),
        f"None or {rule.allowed}",
        lambda value: None if value is None else rule.stored(value),
    )


def one_of(*choices: Any) -> Rule:
    """One of `choices`."""
    *others, last = map(repr, choices)
    return Rule(lambda value: value in choices, f"{', '.join(others)} or {last}")


def is_filter(pair: Any) -> bool:
    """A `[width, n_filters]` pair of `filters`."""
    return isinstance(pair, (list, tuple)) and len(pair) == 2 and all(is_integer(n) and n >= 1 for n in pair)


BOOLEAN = Rule(lambda value: isinstance(value, bool), "True or False")
FRACTION = Rule(lambda value: is_number(value) and 0 <= value < 1, "in [0, 1)", float)
POSITIVE = Rule(lambda value: is_number(value) and value > 0, "a number > 0")
FILTERS = Rule(
    lambda value: isinstance(value, (list, tuple)) and len(value) > 0 and all(map(is_filter, value)),
    "a non-empty list of [width, n_filters] pairs of integers >= 1",
    lambda value: [[int(width), int(n_filters)] for width, n_filters in value],
)
MIX_WEIGHTS = Rule(
    lambda value: isinstance(value, (list, tuple)) and all(map(is_number, value)),
    "a list of numbers, one per layer",
    lambda value: [float(weight) for weight in value],
)
CHAR_MARKERS = Rule(
    lambda value: isinstance(value, dict) and all(isinstance(k, str) and is_integer(i) for k, i in value.items()),
    "a dict of marker roles to ids",
    dict,
)


def is_label_id(value: Any) -> bool:
    """A label's id as a config holds it: an integer >= 0, or its digits (JSON's keys are strings)."""
    if isinstance(value, str):
        return value.isascii() and value.isdigit()
    return is_integer(value) and value >= 0


def is_torch_dtype(value: Any) -> bool:
    """A torch dtype, or the name of one in torch (`"float32"`); where torch is not installed, any name."""
    if not is_torch_available():
        return isinstance(value, str) and value.isidentifier()
    import torch

    return isinstance(value, torch.dtype) or (
        isinstance(value, str) and isinstance(getattr(torch, value, None), torch.dtype)
    )


# transformers' own fields that it reads as it loads a config (`PreTrainedConfig.__post_init__` converts `dtype` and
# `id2label`, `validate_architecture` reads `architectures`), each checked whenever it is set, as a declared field is,
# so that a damaged value is refused in one line instead of failing inside transformers.
TRANSFORMERS_FIELD_RULES = {
    "architectures": optional(
        Rule(lambda value: isinstance(value, list) and all(isinstance(name, str) for name in value), "a list of names")
    ),
    "dtype": optional(Rule(is_torch_dtype, "the name of a torch dtype, such as 'float32'")),
    "id2label": optional(
        Rule(
            lambda value: (
                isinstance(value, dict)
                and all(is_label_id(i) and (isinstance(label, str) or is_integer(label)) for i, label in value.items())
            ),
            "a dict of label ids (integers >= 0) to labels",
        )
    ),
    "label2id": optional(
        Rule(
            lambda value: (
                isinstance(value, dict)
                and all((isinstance(label, str) or is_integer(label)) and is_label_id(i) for label, i in value.items())
            ),
            "a dict of labels to label ids (integers >= 0)",
        )
    ),
}


def checked(rule: Rule, default: Any, saved: bool = True) -> Any:
    """
    A field of `ElmoConfig` (a dataclass field, as transformers 5 declares a config's fields) holding `default` until
    set, with the `rule` that `ElmoConfig.__setattr__` checks whenever it is set; written to config.json unless not
    `saved` (see `ElmoConfig.to_dict`).
    """
    metadata = {"rule": rule, "saved": saved}
    if isinstance(default, (list, dict)):
        return dataclasses.field(default_factory=lambda: copy.deepcopy(default), metadata=metadata)
    return dataclasses.field(default=default, metadata=metadata)


def machine_setting(choices: tuple, default: str) -> Any:
    """A field that chooses how this machine computes the model, not what the model is: one of `choices`, never saved
    (as transformers leaves out `attn_implementation`)."""
    return checked(Rule(lambda value: value in choices, f"one of {choices}"), default, saved=False)


def field_rule(field: dataclasses.Field) -> Rule | None:
    """The rule a field of `ElmoConfig` was declared with (`checked`); None for the fields of transformers."""
    return field.metadata.get("rule")


class ElmoConfig(PreTrainedConfig):
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

    The task heads (`ElmoForSequenceClassification`, `ElmoForTokenClassification`, `ElmoForQuestionAnswering`) also
    read:

        freeze_bilm (`bool`): keep the biLM's weights fixed; only the layer mix and the head train (the paper's
            setting).
        mix_layer_norm (`bool`): normalise each layer over its valid positions before mixing.
        mix_weights (`list[float]`, *optional*): fixed, non-trainable mixing scalars `s` (one per layer, before the
            softmax); trainable and starting at zero when absent.
        mix_l2_coefficient (`float`): the paper's lambda: `lambda * ||s||^2` is added to the loss.
        mix_dropout (`float`): dropout on the mixed representation.
        concat_token_representation (`bool`): feed `[x_k ; ELMo_k]`, the context-independent token
            representation beside the mix, to the task layers.
        word_vector_dim (`int`): size of a learned, context-independent word vector over the tokenizer's word
            vocabulary (GloVe's place in the paper's `[x_k ; ELMo_k]`), put first beside the mix; 0 for none. The
            heads then read `word_vector_ids` (`ElmoTokenizer(..., word_vector_ids=True)`); the vectors train even
            with `freeze_bilm`, and can start from a pre-training softmax (`modeling_elmo.word_vectors_from_softmax`).
        word_vector_vocab_size (`int`, *optional*): words of that vector's table (the tokenizer's
            `word_vocab_size`); set exactly when `word_vector_dim` is above 0.
        task_lstm_dim (`int`): units per direction of a task BiLSTM over the representation; 0 for none.
        pooling (`str`): how `ElmoForSequenceClassification` pools the words: `"mean"`, `"max"` or `"mean_max"`.
        pair_classification (`bool`): `ElmoForSequenceClassification` pools the two sentences marked by
            `token_type_ids` separately and classifies `[u ; v ; |u - v| ; u * v]`.
        use_crf (`bool`): `ElmoForTokenClassification` puts a linear-chain CRF over its per-word scores: the loss
            is the CRF's negative log-likelihood and the prediction the Viterbi path (see `crf_elmo.py`).
        crf_constraint (`str`, *optional*): with `use_crf`, the label scheme of `id2label` (`"BIO"` or `"BIOES"`)
            whose illegal transitions (such as `O` -> `I-PER`) decoding never takes; `None` for none.
        question_attention (`bool`): `ElmoForQuestionAnswering` lets each position attend over the question's words
            before scoring the starts and ends of answers (with `task_lstm_dim`, through a second BiLSTM).
        question_match_feature (`bool`): `ElmoForQuestionAnswering` also gives each position whether its word is
            one of the question's (DrQA's exact-match feature).

    `ElmoForPreTraining` also reads:

        word_vocab_size (`int`, *optional*): words of the shared softmax (the tokenizer's word vocabulary).
        n_negative_samples (`int`, *optional*): sampled-softmax candidates per training batch.

    transformers' standard names: `num_hidden_layers` is `n_layers` (so a model returns `num_hidden_layers + 1`
    hidden states), `hidden_size` is `2 * projection_dim` (read-only; a value given by another model type's config
    is ignored).

    Each field below is declared with its type, its default and its rule (`checked(rule, default)`), which is checked
    whenever the field is set: in `__init__`, by `from_pretrained(folder, n_layers=...)` (which sets it afterwards) and
    on a loaded config. `validate_architecture` checks the fields against each other, after `__init__` and before
    `save_pretrained` writes them (through transformers' `validate`). Each refusal is a one-line `ValueError` naming
    the field. A key that is no field is kept as a plain attribute, unused, as transformers keeps it; one that looks
    like a misspelt field is named in one warning, with the field.

    Not transformers' `@strict`: its refusals are two-line errors that are not `ValueError`s, and it cannot store a
    converted value (a numpy int as an int, a tuple of filters as lists).
    """

    model_type = "elmo"
    attribute_map = {"num_hidden_layers": "n_layers"}

    char_embedding_dim: int = checked(integer(1), 16)
    filters: list[list[int]] = checked(FILTERS, ORIGINAL_FILTERS)
    n_highway: int = checked(integer(0), 2)
    activation: str = checked(one_of("relu", "tanh"), "relu")
    n_characters: int = checked(one_of(261, 262), 262)
    max_characters_per_token: int = checked(integer(3, MAX_CHARACTERS_PER_TOKEN), 50)
    projection_dim: int = checked(integer(1), 512)
    cell_dim: int = checked(integer(1), 4096)
    n_layers: int = checked(integer(1), 2)
    cell_clip: float | None = checked(optional(POSITIVE), 3.0)
    proj_clip: float | None = checked(optional(POSITIVE), 3.0)
    use_skip_connections: bool = checked(BOOLEAN, True)
    forget_bias: float = checked(Rule(is_number, "a number", float), 1.0)
    lstm_dropout: float = checked(FRACTION, 0.0)
    recurrence_implementation: str = machine_setting(RECURRENCE_IMPLEMENTATIONS, "auto")
    cpu_matmul: str = machine_setting(CPU_MATMULS, "auto")
    freeze_bilm: bool = checked(BOOLEAN, True)
    mix_layer_norm: bool = checked(BOOLEAN, False)
    mix_weights: list[float] | None = checked(optional(MIX_WEIGHTS), None)
    mix_l2_coefficient: float = checked(Rule(lambda value: is_number(value) and value >= 0, "a number >= 0"), 0.0)
    mix_dropout: float = checked(FRACTION, 0.5)
    concat_token_representation: bool = checked(BOOLEAN, False)
    word_vector_dim: int = checked(integer(0), 0)
    word_vector_vocab_size: int | None = checked(optional(integer(1)), None)
    task_lstm_dim: int = checked(integer(0), 0)
    pooling: str = checked(one_of("mean", "max", "mean_max"), "mean")
    pair_classification: bool = checked(BOOLEAN, False)
    use_crf: bool = checked(BOOLEAN, False)
    question_attention: bool = checked(BOOLEAN, True)
    question_match_feature: bool = checked(BOOLEAN, True)
    crf_constraint: str | None = checked(
        Rule(
            lambda value: value is None or (isinstance(value, str) and value in LABEL_SCHEMES),
            f"one of {tuple(LABEL_SCHEMES)} or None",
        ),
        None,
    )
    word_vocab_size: int | None = checked(optional(integer(2)), None)
    n_negative_samples: int | None = checked(optional(integer(1)), None)
    char_vocab_size: int | None = checked(optional(integer(1)), None)
    char_markers: dict[str, int] | None = checked(optional(CHAR_MARKERS), None)
    word_input_vocab_size: int | None = checked(optional(integer(1)), None)
    word_input_dim: int | None = checked(optional(integer(1)), None)
    highway_gate: str = checked(one_of("transform", "carry"), "transform")
    always_project: bool = checked(BOOLEAN, False)

    def __post_init__(self, **kwargs):
        """
        After `__init__` has set every field (each checked by its rule): the keys that are no field go to transformers
        (its own; another is kept as a plain attribute, and named in one warning where it looks like a misspelt field),
        then `validate` checks the fields together.
        """
        # Derived from projection_dim: a config.json saved by another model type may carry its own.
        kwargs.pop("hidden_size", None)
        warn_about_misspelt_fields(kwargs)
        super().__post_init__(**kwargs)  # `num_hidden_layers` too, as `n_layers`
        self.validate()

    def __setattr__(self, key, value):
        # Every field's rule, whenever it is set: `from_pretrained(..., n_layers=...)` sets fields after `__init__`.
        key, rule = self.rule_of(key)
        if rule is not None:
            value = rule.checked(key, value)
        super().__setattr__(key, value)

    @classmethod
    def rule_of(cls, key: str) -> tuple[str, Rule | None]:
        """The field `key` names (`num_hidden_layers`: `n_layers`) and its rule; None for a key without one."""
        key = cls.attribute_map.get(key, key)
        field = cls.__dataclass_fields__.get(key)
        return key, TRANSFORMERS_FIELD_RULES.get(key) or (field_rule(field) if field is not None else None)

    def validate_architecture(self):
        """Raises a `ValueError` saying why, when the fields, each allowed alone, build no ELMo model together."""
        super().validate_architecture()
        if max(width for width, _ in self.filters) > self.max_characters_per_token:
            raise ValueError("a filter is wider than max_characters_per_token")
        if self.projection_dim > self.cell_dim:
            raise ValueError(f"projection_dim ({self.projection_dim}) cannot exceed cell_dim ({self.cell_dim})")
        if self.mix_weights is not None and len(self.mix_weights) != self.n_layers + 1:
            raise ValueError(f"mix_weights needs one value per layer ({self.n_layers + 1}), got {self.mix_weights!r}")
        if (self.char_vocab_size is None) != (self.char_markers is None):
            raise ValueError("char_vocab_size and char_markers go together (a learned character vocabulary)")
        if (self.word_input_vocab_size is None) != (self.word_input_dim is None):
            raise ValueError("word_input_vocab_size and word_input_dim go together (a word-embedding input)")
        if (self.word_vector_dim > 0) != (self.word_vector_vocab_size is not None):
            raise ValueError(
                "word_vector_dim (above 0) and word_vector_vocab_size go together (a head's word vectors)"
            )
        if self.crf_constraint is not None and not self.use_crf:
            raise ValueError(f"crf_constraint={self.crf_constraint!r} constrains the CRF: set use_crf=True too")
        if "ElmoForPreTraining" in (self.architectures or []) and self.word_vocab_size is None:
            raise ValueError("ElmoForPreTraining needs word_vocab_size (the words of its softmax)")
        CharacterAlphabet.from_config(self)  # checks the markers against the size
        parts = self.parameters_by_field()
        if (total := sum(parts.values())) > MAX_PARAMETERS:
            most = max(parts, key=parts.get)
            raise ValueError(
                f"the sizes make a model of {total:,} parameters ({total * 4 / 2**30:,.0f} GiB in float32), "
                f"{parts[most]:,} of them from {most}, over the {MAX_PARAMETERS:,} allowed"
            )
        if (activations := self.max_characters_per_token * self.n_filters) > MAX_WORD_ACTIVATIONS:
            raise ValueError(
                f"max_characters_per_token x the filters' outputs is {activations:,} values per word "
                f"({activations * 4 / 2**20:,.0f} MiB in float32), over the {MAX_WORD_ACTIVATIONS:,} allowed"
            )

    def validate(self):
        """transformers' checks of any config, then `validate_architecture` (transformers' own `validate`, which
        `save_pretrained` runs, calls only the validators of its class)."""
        super().validate()
        self.validate_architecture()

    @classmethod
    def from_dict(cls, config_dict: dict, **kwargs):
        """
        As transformers' `from_dict`, which sets its keyword arguments after `__init__` checked the fields together:
        checked together again, so that `from_pretrained(folder, word_vector_dim=8)` fails where the config is read.
        """
        loaded = super().from_dict(config_dict, **kwargs)
        (loaded[0] if isinstance(loaded, tuple) else loaded).validate_architecture()
        return loaded

    @classmethod
    def _dict_from_json_file(cls, json_file) -> dict:
        """
        The object a `config.json` holds (what `from_json_file` and `from_pretrained` read), read by
        `errors.read_json_file`: a file that is no JSON object, or a field its rule refuses, is one line naming the
        file. (transformers' `AutoConfig` reads the file itself: there the field's refusal comes from `__init__`.)
        """
        fix = "copy or download the model folder again"
        fields = JsonFields.of_file(json_file, fix)
        config_dict = cls._decode_special_floats(fields.data)
        for key, value in config_dict.items():
            name, rule = cls.rule_of(key)
            if rule is None:
                continue
            try:
                rule.checked(name, value)
            except ValueError as error:
                raise fields.error(str(error)) from None
        return config_dict

    def to_dict(self) -> dict:
        """As transformers' `to_dict` (which `save_pretrained` and `to_json_string` write), without the machine
        settings."""
        return {key: value for key, value in super().to_dict().items() if key not in MACHINE_SETTINGS}

    def parameters_by_field(self) -> dict[str, int]:
        """
        The parameters these fields make a model hold, computed before any is allocated, by the fields that size them:
        the biLM's (character table and convolutions, highways, word inputs, projection, LSTM layers), and, where the
        fields are set, a pre-training softmax, a head's word vectors and task BiLSTM. Left aside: a head's mix and
        last layers, and the question-answering head's attention and second BiLSTM (sized by the same `task_lstm_dim`).
        Their sum is `ElmoModel`'s and `ElmoForPreTraining`'s count.
        """
        char_dim, cell, projection = self.char_embedding_dim, self.cell_dim, self.projection_dim
        width = self.n_filters + (self.word_input_dim or 0)
        # Per layer and direction: input, recurrent and bias; the projection where it is narrower than the memory.
        lstm_layer = 4 * cell * (2 * projection + 1) + cell * projection * (projection < cell)
        task_width = self.word_vector_dim + projection * self.concat_token_representation + self.hidden_size
        return {
            "filters": self.alphabet.table_rows * char_dim + sum(n * (w * char_dim + 1) for w, n in self.filters),
            "n_highway": self.n_highway * 2 * (self.n_filters**2 + self.n_filters),
            "word_input_vocab_size": (self.word_input_vocab_size or 0) * (self.word_input_dim or 0),
            "projection_dim": (width + 1) * projection if self.always_project or width != projection else 0,
            "n_layers": 2 * self.n_layers * lstm_layer,
            "word_vocab_size": (self.word_vocab_size or 0) * (projection + 1),
            "word_vector_vocab_size": (self.word_vector_vocab_size or 0) * self.word_vector_dim,
            "task_lstm_dim": 2 * 4 * self.task_lstm_dim * (task_width + self.task_lstm_dim + 2),
        }

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


# How this machine computes the model, not what the model is: never written to config.json (see `machine_setting`).
MACHINE_SETTINGS = tuple(
    field.name for field in dataclasses.fields(ElmoConfig) if not field.metadata.get("saved", True)
)


@functools.cache
def transformers_config_keys() -> frozenset[str]:
    """
    The keys transformers itself gives a config, read from its classes: the fields of `PreTrainedConfig`, its settable
    properties (its argument `attn_implementation` sets the property `_attn_implementation`), what a default config
    writes, and the generation parameters (which older configs carry).
    """
    settable = {
        name.lstrip("_")
        for name in dir(PreTrainedConfig)
        if isinstance(member := inspect.getattr_static(PreTrainedConfig, name), property) and member.fset is not None
    }
    fields = {field.name for field in dataclasses.fields(PreTrainedConfig)}
    return frozenset(fields | settable | set(PreTrainedConfig().to_dict()) | set(GenerationConfig().to_dict()))


def warn_about_misspelt_fields(kwargs: dict) -> None:
    """
    One warning naming the keys of `kwargs` that look like a misspelt field of ElmoConfig: close to a field's name
    and neither a field, transformers' (`transformers_config_keys`) nor bookkeeping (`_commit_hash`, ...). Other keys
    are another tool's (`auto_map`, transformers 4's `tie_word_embeddings`): kept unused, as transformers keeps them.
    """
    fields = [field.name for field in dataclasses.fields(ElmoConfig) if field_rule(field) is not None]
    known = {*fields, *ElmoConfig.attribute_map, *transformers_config_keys()}
    named = [
        f"{key!r} (did you mean {close[0]!r}?)"
        for key in kwargs
        if key not in known and not key.startswith("_") and (close := difflib.get_close_matches(key, fields, n=1))
    ]
    if named:
        logger.warning(f"ElmoConfig does not know {', '.join(named)}: kept as plain attributes, unused")


__all__ = ["ElmoConfig"]
