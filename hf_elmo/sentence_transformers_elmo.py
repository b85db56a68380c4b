"""ELMo in sentence-transformers: `SentenceTransformer(folder)` returns hf_elmo's own sentence vector.

Needs the `sentence-transformers` extra. A folder saved by a biLM's `save_pretrained` names
[`ElmoSentenceTransformerModule`] in its `modules.json` (see `folder_layout`); sentence-transformers imports a
module class from outside its own package only with `trust_remote_code=True`, which here allows importing this
installed module: the folder's own code files are not run.
"""

from collections.abc import Sequence
from typing import Any

import torch
from sentence_transformers.base.modules import InputModule

from .folder_layout import ENCODER_CONFIG_FILE
from .modeling_elmo import ElmoModel
from .sentence_encoder import ElmoSentenceEmbedder
from .sentence_weighting import WordCounts
from .tokenization_elmo import ElmoTokenizer, check_tokenizer


class ElmoSentenceTransformerModule(ElmoSentenceEmbedder, InputModule):
    """
    The one module of an ELMo `SentenceTransformer`: [`~sentence_encoder.ElmoSentenceEmbedder`] (the same arguments,
    the same vectors) with sentence-transformers' interface. `preprocess` gives the embedder's `features` of the texts
    (a prompt put before each), `forward` sets `features["sentence_embedding"]` to their vectors, `(batch,
    2 * projection_dim)`. A folder without `word_counts.json` (or `sif_a=None`) gives the plain mean, TF-Hub ELMo's
    "default" output.
    """

    config_file_name = ENCODER_CONFIG_FILE
    config_keys = list(ElmoSentenceEmbedder.settings_names)

    def preprocess(self, inputs: Sequence[str], prompt: str | None = None, **kwargs) -> dict[str, torch.Tensor]:
        """
        The embedder's `features` of `inputs`, `prompt` put before each text. `max_length` (sentence-transformers'
        trainer passes it) overrides `max_seq_length`; the other keywords sentence-transformers passes (such as
        `task`) do not apply to ELMo.
        """
        texts = self.checked_texts(inputs)
        return self.features(self._prepend_prompt(texts, prompt) if prompt else texts, kwargs.get("max_length"))

    def forward(self, features: dict[str, Any], **kwargs) -> dict[str, Any]:
        """Adds `sentence_embedding` `(batch, 2 * projection_dim)` to the features of `preprocess`."""
        features["sentence_embedding"] = super().forward(features)
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
    ) -> "ElmoSentenceTransformerModule":
        """
        The module of a folder or Hub repository: `ElmoModel`, `ElmoTokenizer` and the word counts (where the folder
        has `word_counts.json`) of this installed hf_elmo, never code files from the folder (`trust_remote_code`,
        among the other keywords sentence-transformers passes, is not used). `model_kwargs` and `config_kwargs` go to
        `ElmoModel.from_pretrained`, `processor_kwargs` to `ElmoTokenizer.from_pretrained`. A tokenizer that gives the
        model other rows than its config reads is refused in one line, as `tokenization_elmo.check_tokenizer` refuses
        it for every command.
        """
        if backend != "torch":
            raise ValueError(f"{cls.__name__} runs in PyTorch, not backend={backend!r}: use backend='torch'")
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
        check_tokenizer(tokenizer, model.config, model_name_or_path)
        word_counts = WordCounts.from_pretrained(model_name_or_path, **hub_kwargs)
        return cls(model, tokenizer, **config, word_counts=word_counts)
