"""A folder's own sentence vector in one call, from hf_elmo alone: [`ElmoSentenceEmbedder`].

    vectors = ElmoSentenceEmbedder.from_pretrained("ko-nsmc").encode(["배가 고프다", "배가 아프다"])

A biLM folder keeps the settings of its best sentence vector beside its weights (`folder_layout`): the layer
weights, SIF's `a` over the word counts of its pre-training text (`word_counts.json`), and the mean and principal
directions of a reference text's vectors to take out (`sentence_bert_config.json`). `ElmoModel.sentence_embedding`
alone takes none of them (its defaults are TF-Hub ELMo's plain mean); [`ElmoSentenceEmbedder`] reads them all, and
`SentenceTransformer(folder)` runs the same code (its module,
`sentence_transformers_elmo.ElmoSentenceTransformerModule`, is this class with sentence-transformers' interface), so
both give the same vectors.
"""

import os
from collections.abc import Iterable, Sequence

import torch
from transformers.utils import cached_file

from .errors import FileContentError, JsonFields, is_integer
from .folder_layout import ENCODER_CONFIG_FILE, SIF_A
from .loading import load_model_and_tokenizer
from .modeling_elmo import ElmoModel
from .sentence_weighting import WordCounts, weighted_encoding
from .tokenization_elmo import ElmoTokenizer


class ElmoSentenceEmbedder(torch.nn.Module):
    """
    One vector per text, `(batch, 2 * projection_dim)`: [`ElmoModel.sentence_embedding`] with a folder's settings.
    Each text is split into words as the tokenizer splits it (`<S>` and `</S>` around them); with word counts and
    `sif_a`, each word weighs `a / (a + p(w))` by the tokenizer's word labels (SIF); the vector is the weighted mean
    over the text's words of `sum_j w_j h_j` (the plain average of the `n_layers + 1` layers unless `layer_weights`
    gives `w`), less `reference_mean` and projected off `common_component` where given. A vector depends on its own
    text alone: the same text gives the same vector in any batch (up to float32 rounding).

    `from_pretrained(name)` reads all of it from a folder, a bundled model's name or a Hub id; the constructor takes
    the parts.

    Args:
        model (`ElmoModel`): the biLM.
        tokenizer (`ElmoTokenizer`): its tokenizer (the same characters per word and alphabet).
        layer_weights (`list[float]`, *optional*): one weight per layer, used as given.
        max_seq_length (`int`, *optional*): positions kept per text, `<S>` and `</S>` included; all when `None`.
        sif_a (`float`, *optional*): SIF's `a`, by default `folder_layout.SIF_A`; `None` weighs every word alike
            even with word counts.
        common_component (`list[float]` or `list[list[float]]`, *optional*): one direction (`2 * projection_dim`
            values) or `k` of them, projected out of every vector (estimated on a reference text with
            `sentence_weighting.common_component` or `reference_directions`).
        reference_mean (`list[float]`, *optional*): `2 * projection_dim` values subtracted from every vector first,
            the mean sentence vector of the reference text (`sentence_weighting.reference_directions`).
        word_counts (`WordCounts`, *optional*): the counts of the tokenizer's word vocabulary in the biLM's
            pre-training text. Without them every word weighs alike.
    """

    # The settings a folder's `sentence_bert_config.json` holds, in the constructor's order.
    settings_names = ("layer_weights", "max_seq_length", "sif_a", "common_component", "reference_mean")

    def __init__(
        self,
        model: ElmoModel,
        tokenizer: ElmoTokenizer,
        layer_weights: list[float] | None = None,
        max_seq_length: int | None = None,
        sif_a: float | None = SIF_A,
        common_component: list[float] | list[list[float]] | None = None,
        reference_mean: list[float] | None = None,
        word_counts: WordCounts | None = None,
    ):
        super().__init__()
        config = model.config
        tokenizer_rows = (tokenizer.max_characters_per_token, tokenizer.vocab_size)
        model_rows = (config.max_characters_per_token, config.alphabet.table_rows)
        if tokenizer_rows != model_rows:
            raise ValueError(
                f"the tokenizer writes rows of {tokenizer_rows[0]} characters from {tokenizer_rows[1]} ids, the model "
                f"reads {model_rows[0]} from {model_rows[1]}: save the model's own tokenizer in its folder"
            )
        if layer_weights is not None and len(layer_weights) != config.num_representation_layers:
            layers = config.num_representation_layers
            raise ValueError(f"layer_weights needs {layers} values, one per layer, got {len(layer_weights)}")
        if max_seq_length is not None and not (is_integer(max_seq_length) and max_seq_length >= 3):
            raise ValueError(f"max_seq_length must be a whole number >= 3 (<S>, a word, </S>), got {max_seq_length!r}")
        if sif_a is not None and not sif_a > 0:
            raise ValueError(f"sif_a must be a number > 0 (or None for equal weights), got {sif_a!r}")
        directions = [] if common_component is None else common_component
        directions = directions if directions and isinstance(directions[0], (list, tuple)) else [directions]
        if common_component is not None and any(len(direction) != config.hidden_size for direction in directions):
            raise ValueError(
                f"common_component needs {config.hidden_size} values (2 * projection_dim) per direction, got "
                f"{sorted({len(direction) for direction in directions})}"
            )
        if reference_mean is not None and len(reference_mean) != config.hidden_size:
            raise ValueError(
                f"reference_mean needs {config.hidden_size} values (2 * projection_dim), got {len(reference_mean)}"
            )
        if word_counts is not None and len(word_counts) != tokenizer.word_vocab_size:
            raise ValueError(
                f"the word counts are of {len(word_counts)} words, the tokenizer's word vocabulary holds "
                f"{tokenizer.word_vocab_size}: counts go with the vocabulary they were counted with"
            )
        self.model = model
        self.tokenizer = tokenizer
        self.layer_weights = None if layer_weights is None else [float(weight) for weight in layer_weights]
        self.max_seq_length = None if max_seq_length is None else int(max_seq_length)  # numpy's too; saved as JSON
        self.sif_a = sif_a
        self.common_component = (
            None if common_component is None else torch.tensor(common_component, dtype=torch.float64).tolist()
        )
        self.reference_mean = None if reference_mean is None else [float(value) for value in reference_mean]
        self.word_counts = word_counts

    @classmethod
    def from_pretrained(cls, name: str | os.PathLike, **from_pretrained_kwargs) -> "ElmoSentenceEmbedder":
        """
        The embedder of a biLM folder, a bundled model's name (`"ko-nsmc"`) or a Hub id: its `ElmoModel` and
        `ElmoTokenizer` (as `loading.load_model_and_tokenizer` loads them, one-line errors), its word counts
        (`word_counts.json`, where it has them) and its settings (`sentence_bert_config.json`; a folder without it
        takes the constructor's defaults). `from_pretrained_kwargs` go to `ElmoModel.from_pretrained`.
        """
        model, tokenizer = load_model_and_tokenizer(name, ElmoModel, **from_pretrained_kwargs)
        path = model.name_or_path  # the name as the loader resolved it: the settings and counts come from there too
        return cls(model, tokenizer, **read_settings(path), word_counts=WordCounts.from_pretrained(path))

    @property
    def settings(self) -> dict:
        """The settings `sentence_bert_config.json` holds, as the constructor takes them."""
        return {name: getattr(self, name) for name in self.settings_names}

    def features(self, texts: Sequence[str], max_length: int | None = None) -> dict[str, torch.Tensor]:
        """
        The padded `input_ids` `(batch, positions, characters)`, `attention_mask` `(batch, positions)` (and
        `word_input_ids` for a model with a word input) of `texts`, and with word counts and `sif_a` their
        `word_weights` `(batch, positions)`. `max_length` overrides `max_seq_length`.
        """
        texts = self.checked_texts(texts)
        max_length = max_length or self.max_seq_length
        truncation = max_length is not None
        return weighted_encoding(
            self.tokenizer, texts, self.word_counts, self.sif_a, truncation=truncation, max_length=max_length
        )

    @classmethod
    def checked_texts(cls, texts: Sequence[str]) -> list[str]:
        """`texts` as a list, each a `str`, else a one-line `ValueError`."""
        if isinstance(texts, str):
            raise ValueError(f"{cls.__name__} embeds a list of texts; for one text, pass [text]")
        if not isinstance(texts, Iterable):
            raise ValueError(f"{cls.__name__} embeds a list of texts, got {type(texts).__name__}")
        texts = list(texts)
        for text in texts:
            if not isinstance(text, str):
                raise ValueError(f"{cls.__name__} embeds texts (str), one per input, got {type(text).__name__}")
        return texts

    def forward(self, features: dict[str, torch.Tensor]) -> torch.Tensor:
        """The vectors `(batch, 2 * projection_dim)` of the features [`features`] gives."""
        return self.model.sentence_embedding(
            features["input_ids"],
            attention_mask=features["attention_mask"],
            layer_weights=self.layer_weights,
            word_input_ids=features.get("word_input_ids"),
            word_weights=features.get("word_weights"),
            common_component=self.common_component,
            reference_mean=self.reference_mean,
        )

    def encode(self, texts: Sequence[str], batch_size: int = 32) -> torch.Tensor:
        """
        The vectors of `texts`, `(len(texts), 2 * projection_dim)` float32 on the model's device, computed
        `batch_size` texts at a time without gradients. Compare them by cosine. The model's mode is left as it is
        (`from_pretrained` gives it in eval mode).
        """
        texts = self.checked_texts(texts)
        if not (is_integer(batch_size) and batch_size >= 1):
            raise ValueError(f"batch_size must be a whole number >= 1, got {batch_size!r}")
        if not texts:
            return torch.zeros(0, self.model.config.hidden_size, device=self.model.device)
        device = self.model.device
        vectors = []
        with torch.inference_mode():
            for start in range(0, len(texts), batch_size):
                batch = self.features(texts[start : start + batch_size])
                vectors.append(self({key: value.to(device) for key, value in batch.items()}))
        return torch.cat(vectors)


def read_settings(name_or_path: str | os.PathLike, **hub_kwargs) -> dict:
    """
    The sentence-vector settings of a folder or Hub repository (`sentence_bert_config.json`), those the constructor
    of [`ElmoSentenceEmbedder`] takes; `{}` where it has none. `hub_kwargs` go to transformers' `cached_file`.
    """
    path = cached_file(name_or_path, ENCODER_CONFIG_FILE, _raise_exceptions_for_missing_entries=False, **hub_kwargs)
    if path is None:
        return {}
    fix = "copy or download the model folder again"
    fields = JsonFields.of_file(path, fix)
    unknown = sorted(set(fields.data) - set(ElmoSentenceEmbedder.settings_names))
    if unknown:  # each named as a message names a key: one that is no plain name quoted, so that none breaks the line
        names = ", ".join(fields.name(key) for key in unknown)
        raise FileContentError(f"{path} names settings hf_elmo does not know: {names}; {fix}")
    return fields.data
