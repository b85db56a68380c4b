"""ELMo in sentence-transformers: `SentenceTransformer(folder)` returns hf_elmo's own sentence vector.

Needs the `sentence-transformers` extra. A folder saved by a biLM's `save_pretrained` names
[`ElmoSentenceEncoder`] in its `modules.json` (see `folder_layout`); sentence-transformers imports a
module class from outside its own package only with `trust_remote_code=True`, which here allows importing this
installed module: the folder's own code files are not run.
"""

from collections.abc import Sequence
from typing import Any

import torch
from sentence_transformers.base.modules import InputModule

from .folder_layout import ENCODER_CONFIG_FILE, SIF_A
from .modeling_elmo import ElmoModel
from .sentence_weighting import WordCounts, weighted_encoding
from .tokenization_elmo import ElmoTokenizer


class ElmoSentenceEncoder(InputModule):
    """
    The one module of an ELMo `SentenceTransformer`. `preprocess` tokenizes texts with the folder's [`ElmoTokenizer`]
    (a raw string split into words as hf_elmo splits it, `<S>` and `</S>` around them) and, with word counts, gives
    each word its SIF weight `a / (a + p(w))` (`sentence_weighting.WordCounts.sif_weights`); `forward` sets
    `features["sentence_embedding"]` to [`ElmoModel.sentence_embedding`] of those, `(batch, 2 * projection_dim)`: the
    weighted mean over each text's words (not `<S>`, `</S>` or padding) of `sum_j w_j h_j`, the plain average of the
    `n_layers + 1` layers unless `layer_weights` gives `w`, less `reference_mean` and `common_component` where given.
    A folder without `word_counts.json` (or `sif_a=None`) gives the plain mean, TF-Hub ELMo's "default" output.

    Args:
        model (`ElmoModel`): the biLM.
        tokenizer (`ElmoTokenizer`): its tokenizer (the same characters per word and alphabet).
        layer_weights (`list[float]`, *optional*): one weight per layer, used as given.
        max_seq_length (`int`, *optional*): positions kept per text, `<S>` and `</S>` included (the tokenizer's
            `max_length`); all when `None`.
        sif_a (`float`, *optional*): SIF's `a`, by default `folder_layout.SIF_A`; `None` weighs every
            word alike even with word counts.
        common_component (`list[float]` or `list[list[float]]`, *optional*): one direction (`2 * projection_dim`
            values) or `k` of them, projected out of every vector (estimated on a reference text with
            `sentence_weighting.common_component` or `reference_directions`).
        reference_mean (`list[float]`, *optional*): `2 * projection_dim` values subtracted from every vector first,
            the mean sentence vector of the reference text (`sentence_weighting.reference_directions`).
        word_counts (`WordCounts`, *optional*): the counts of the tokenizer's word vocabulary in the biLM's
            pre-training text (`WordCounts.from_pretrained(folder)`; `load` reads them from the folder). Without
            them every word weighs alike.
    """

    config_file_name = ENCODER_CONFIG_FILE
    config_keys = ["layer_weights", "max_seq_length", "sif_a", "common_component", "reference_mean"]

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
        self.max_seq_length = max_seq_length
        self.sif_a = sif_a
        self.common_component = (
            None if common_component is None else torch.tensor(common_component, dtype=torch.float64).tolist()
        )
        self.reference_mean = None if reference_mean is None else [float(value) for value in reference_mean]
        self.word_counts = word_counts

    def preprocess(self, inputs: Sequence[str], prompt: str | None = None, **kwargs) -> dict[str, torch.Tensor]:
        """
        The padded `input_ids`, `attention_mask` (and `word_input_ids` for a model with a word input) of `inputs`,
        `prompt` put before each text, and with word counts and `sif_a` the `word_weights` of their positions.
        `max_length` (sentence-transformers' trainer passes it) overrides `max_seq_length`; the other keywords
        sentence-transformers passes (such as `task`) do not apply to ELMo.
        """
        for text in inputs:
            if not isinstance(text, str):
                raise ValueError(f"ElmoSentenceEncoder embeds texts (str), one per input, got {type(text).__name__}")
        texts = self._prepend_prompt(list(inputs), prompt) if prompt else list(inputs)
        max_length = kwargs.get("max_length") or self.max_seq_length
        return weighted_encoding(
            self.tokenizer,
            texts,
            self.word_counts,
            self.sif_a,
            truncation=max_length is not None,
            max_length=max_length,
        )

    def forward(self, features: dict[str, Any], **kwargs) -> dict[str, Any]:
        """Adds `sentence_embedding` `(batch, 2 * projection_dim)` to the features of `preprocess`."""
        features["sentence_embedding"] = self.model.sentence_embedding(
            features["input_ids"],
            attention_mask=features["attention_mask"],
            layer_weights=self.layer_weights,
            word_input_ids=features.get("word_input_ids"),
            word_weights=features.get("word_weights"),
            common_component=self.common_component,
            reference_mean=self.reference_mean,
        )
        return features

    def get_embedding_dimension(self) -> int:
        """`2 * projection_dim`: a layer holds the forward and backward LSTMs' outputs side by side."""
        return self.model.config.hidden_size

    def save(self, output_path: str, *args, safe_serialization: bool = True, **kwargs) -> None:
        """The model, tokenizer, word counts and this module's config in `output_path` (weights in safetensors, as
        transformers 5 always writes them)."""
        self.model.save_pretrained(output_path)
        self.tokenizer.save_pretrained(output_path)
        if self.word_counts is not None:
            self.word_counts.save_pretrained(output_path)
        self.save_config(output_path)

    @classmethod
    def load(
        cls,
        model_name_or_path: str,
        subfolder: str = "",
        token: bool | str | None = None,
        cache_folder: str | None = None,
        revision: str | None = None,
        local_files_only: bool = False,
        model_kwargs: dict[str, Any] | None = None,
        processor_kwargs: dict[str, Any] | None = None,
        config_kwargs: dict[str, Any] | None = None,
        backend: str = "torch",
        **kwargs,
    ) -> "ElmoSentenceEncoder":
        """
        The module of a folder or Hub repository: `ElmoModel`, `ElmoTokenizer` and the word counts (where the folder
        has `word_counts.json`) of this installed hf_elmo, never code files from the folder (`trust_remote_code`,
        among the other keywords sentence-transformers passes, is not used). `model_kwargs` and `config_kwargs` go to
        `ElmoModel.from_pretrained`, `processor_kwargs` to `ElmoTokenizer.from_pretrained`.
        """
        if backend != "torch":
            raise ValueError(f"ElmoSentenceEncoder runs in PyTorch, not backend={backend!r}: use backend='torch'")
        config = cls.load_config(
            model_name_or_path,
            subfolder=subfolder,
            token=token,
            cache_folder=cache_folder,
            revision=revision,
            local_files_only=local_files_only,
        )
        hub_kwargs = {
            "subfolder": subfolder,
            "token": token,
            "cache_dir": cache_folder,
            "revision": revision,
            "local_files_only": local_files_only,
        }
        model_kwargs = {**(config_kwargs or {}), **(model_kwargs or {})}
        model = ElmoModel.from_pretrained(model_name_or_path, **hub_kwargs, **model_kwargs)
        tokenizer = ElmoTokenizer.from_pretrained(model_name_or_path, **hub_kwargs, **(processor_kwargs or {}))
        word_counts = WordCounts.from_pretrained(model_name_or_path, **hub_kwargs)
        return cls(model, tokenizer, **config, word_counts=word_counts)
