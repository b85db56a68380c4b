"""ELMo configuration: every option of the original `options.json`."""

from transformers import PretrainedConfig


ORIGINAL_FILTERS = [[1, 32], [2, 32], [3, 64], [4, 128], [5, 256], [6, 512], [7, 1024]]


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

    `ElmoForPreTraining` also reads:

        word_vocab_size (`int`, *optional*): words of the shared softmax (the tokenizer's word vocabulary).
        n_negative_samples (`int`, *optional*): sampled-softmax candidates per training batch.
    """

    model_type = "elmo"

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
        freeze_bilm=True,
        mix_layer_norm=False,
        mix_weights=None,
        mix_l2_coefficient=0.0,
        mix_dropout=0.5,
        concat_token_representation=False,
        task_lstm_dim=0,
        pooling="mean",
        pair_classification=False,
        word_vocab_size=None,
        n_negative_samples=None,
        **kwargs,
    ):
        filters = [list(f) for f in (ORIGINAL_FILTERS if filters is None else filters)]
        if activation not in ("relu", "tanh"):
            raise ValueError(f"activation must be 'relu' or 'tanh', got {activation!r}")
        if n_characters not in (261, 262):
            raise ValueError(f"n_characters must be 261 or 262, got {n_characters!r}")
        if max_characters_per_token < 3:
            raise ValueError(f"max_characters_per_token must be at least 3, got {max_characters_per_token}")
        if not filters or any(len(f) != 2 or f[0] < 1 or f[1] < 1 for f in filters):
            raise ValueError(f"filters must be a non-empty list of [width, n_filters] pairs, got {filters!r}")
        if max(width for width, _ in filters) > max_characters_per_token:
            raise ValueError("a filter is wider than max_characters_per_token")
        if projection_dim > cell_dim:
            raise ValueError(f"projection_dim ({projection_dim}) cannot exceed cell_dim ({cell_dim})")
        if n_layers < 1:
            raise ValueError(f"n_layers must be at least 1, got {n_layers}")
        if mix_weights is not None and len(mix_weights) != n_layers + 1:
            raise ValueError(f"mix_weights needs one value per layer ({n_layers + 1}), got {mix_weights!r}")
        if pooling not in ("mean", "max", "mean_max"):
            raise ValueError(f"pooling must be 'mean', 'max' or 'mean_max', got {pooling!r}")
        if task_lstm_dim < 0:
            raise ValueError(f"task_lstm_dim must be 0 (no task BiLSTM) or positive, got {task_lstm_dim}")
        self.char_embedding_dim = char_embedding_dim
        self.filters = filters
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
        self.freeze_bilm = freeze_bilm
        self.mix_layer_norm = mix_layer_norm
        self.mix_weights = None if mix_weights is None else [float(w) for w in mix_weights]
        self.mix_l2_coefficient = mix_l2_coefficient
        self.mix_dropout = mix_dropout
        self.concat_token_representation = concat_token_representation
        self.task_lstm_dim = task_lstm_dim
        self.pooling = pooling
        self.pair_classification = pair_classification
        self.word_vocab_size = word_vocab_size
        self.n_negative_samples = n_negative_samples
        super().__init__(**kwargs)

    @property
    def n_filters(self) -> int:
        """Width of the concatenated convolution outputs."""
        return sum(n for _, n in self.filters)

    @property
    def hidden_size(self) -> int:
        """Width of every representation layer: `[forward ; backward]`."""
        return 2 * self.projection_dim

    @property
    def num_hidden_layers(self) -> int:
        """Representation layers: the token layer plus one per LSTM layer."""
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
        lstm = {"dim": self.cell_dim, "n_layers": self.n_layers, "projection_dim": self.projection_dim,
                "use_skip_connections": self.use_skip_connections}
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


__all__ = ["ElmoConfig"]
