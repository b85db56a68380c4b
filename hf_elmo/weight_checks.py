"""
What `from_pretrained` checks of a checkpoint's biLM weights before transformers initialises what it did not load:
a biLM weight missing, of another size or unexpected is refused in one line naming the config fields the weights
disagree with and the setting that loads them ([`refuse_unloaded_bilm_weights`]).
"""

from transformers import PreTrainedModel

from .configuration_elmo import ElmoConfig

# The modules holding the biLM's weights, as `ElmoModel`'s state dict names them; a head holds them under `elmo.`.
BILM_WEIGHT_PREFIXES = ("char_encoder.", "bilm.")


def bilm_weight_name(key: str) -> str | None:
    """`key` (of a biLM's, a head's or a checkpoint's state dict) as `ElmoModel` names it, when it is a biLM weight."""
    key = key.removeprefix("elmo.")
    return key if key.startswith(BILM_WEIGHT_PREFIXES) else None


def named_with_count(keys) -> str:
    """The first three of `keys` in order, then how many more there are: `"a, b, c and 4 more"`."""
    names = sorted(keys)
    return ", ".join(names[:3]) + (f" and {len(names) - 3} more" if len(names) > 3 else "")


def fields_the_weights_disagree_with(
    config: ElmoConfig, held: dict[str, tuple[int, ...]], held_names: set[str], own_names: set[str]
) -> list[tuple[str, str, str | None]]:
    """
    The fields of `config` that a checkpoint's biLM weights were not made with, each as `(field, what the weights
    hold, the setting that loads them)` (None where the weights do not tell it). `held`: the shape in the checkpoint of
    each weight of the biLM built from `config` that the checkpoint holds; `held_names`: every biLM weight of the
    checkpoint (also those the biLM lacks); `own_names`: the biLM's weights; all named as in `ElmoModel`.
    """
    found = []

    def compare(field: str, value) -> None:
        if value != getattr(config, field):
            found.append((field, repr(value), f"{field}={value!r}"))

    def count(prefix: str) -> int:
        return len({name[len(prefix) :].split(".")[0] for name in held_names if name.startswith(prefix)})

    compare("n_layers", count("bilm.forward_layers."))
    compare("n_highway", count("char_encoder.highways."))
    convolutions = [
        held.get(f"char_encoder.convolutions.{i}.weight") for i in range(count("char_encoder.convolutions."))
    ]
    if all(convolutions):  # (n_filters, char_embedding_dim, width) each
        compare("filters", [[shape[2], shape[0]] for shape in convolutions])
    else:
        found.append(("filters", f"{len(convolutions)} convolutions", None))
    if (table := held.get("char_encoder.char_embedding.weight")) is not None:
        compare("char_embedding_dim", table[1])
        if table[0] != config.alphabet.table_rows:
            found.append(("char_vocab_size", f"a character table of {table[0]} rows", None))
    if (kernel := held.get("bilm.forward_layers.0.input_kernel")) is not None:  # (projection_dim, 4 * cell_dim)
        compare("projection_dim", kernel[0])
        compare("cell_dim", kernel[1] // 4)
    word_embedding = "char_encoder.word_embedding.weight"
    if word_embedding in held:
        compare("word_input_vocab_size", held[word_embedding][0])
        compare("word_input_dim", held[word_embedding][1])
    elif word_embedding in held_names:
        found.append(("word_input_vocab_size", "a word embedding", None))
    elif word_embedding in own_names:
        compare("word_input_vocab_size", None)
        compare("word_input_dim", None)
    # Whether the character encoder projects follows from the widths above, or else from always_project.
    projects = "char_encoder.projection.weight" in held_names
    if not found and projects != ("char_encoder.projection.weight" in own_names):
        compare("always_project", projects)
    return found


def refuse_unloaded_bilm_weights(model: PreTrainedModel, loading_info, source) -> None:
    """
    Raises a one-line `ValueError` when `model` would run a biLM weight it did not load from `source` (missing from
    the checkpoint, or of another size there) or the checkpoint holds biLM weights the model lacks: the weights
    (a few, then how many more) and the config fields they disagree with. `loading_info` is transformers'
    `LoadStateDictInfo`. The weights a head adds to a biLM, or a biLM leaves out of a pre-training folder (its
    softmax), are transformers' to report. An empty state dict given with a config (`source` None) is no checkpoint:
    every weight is initialised as `__init__` does, as transformers' models do.
    """
    missing = {key for key in loading_info.missing_keys if bilm_weight_name(key)}
    unexpected = {key for key in loading_info.unexpected_keys if bilm_weight_name(key)}
    mismatched = {key: tuple(shape) for key, shape, _ in loading_info.mismatched_keys if bilm_weight_name(key)}
    nothing_given = source is None and not (loading_info.unexpected_keys or loading_info.mismatched_keys)
    if not (missing or unexpected or mismatched) or (
        nothing_given and set(loading_info.missing_keys) >= set(model.state_dict())
    ):
        return
    own = {name: tuple(weight.shape) for name, weight in model.base_model.state_dict().items()}
    lacking = {bilm_weight_name(key) for key in missing}
    held = {name: shape for name, shape in own.items() if name not in lacking}
    held.update({bilm_weight_name(key): shape for key, shape in mismatched.items()})
    held_names = set(held) | {bilm_weight_name(key) for key in unexpected}
    found = fields_the_weights_disagree_with(model.config, held, held_names, set(own)) if held_names else []
    disagreements = "; ".join(
        f"{field} is {getattr(model.config, field)!r} but the weights hold {what}" for field, what, _ in found
    )
    listed = "; ".join(
        f"{label}: {named_with_count(keys)}"
        for label, keys in (("missing", missing), ("unexpected", unexpected), ("of another size", mismatched))
        if keys
    )
    settings = [setting for _, _, setting in found]
    fix = (
        f"set {', '.join(settings)} in the config"
        if found and all(settings)
        else "make the config describe these weights"
    )
    raise ValueError(
        f"{type(model).__name__} cannot load the biLM weights of {source or 'the given state_dict'}: "
        f"{disagreements or 'they are no ELMo biLM'} ({listed}); {fix}"
    )
