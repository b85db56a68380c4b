"""The mapping between the original ELMo weight layout (bilm-tf's `weights.hdf5`) and `ElmoModel`'s state dict.

Each parameter group is a pair of pure functions, `from_original` and `to_original`, that are each other's exact
inverse: they only transpose, slice, concatenate and permute, so original -> state dict -> original is bit-exact.
The TensorFlow conventions undone here:
- `W_cnn_i` is `(1, width, char_dim, n_filters)`; PyTorch's Conv1d wants `(n_filters, char_dim, width)`.
- Dense kernels are `(in, out)`; `nn.Linear` wants `(out, in)`.
- `CNN_high_k/W_carry` computes the highway's *gate* and `W_transform` its nonlinear branch.
- `LSTMCell/W_0` packs the input and recurrent kernels (rows `[input ; hidden]`) and orders gates i, j, f, o;
  `ElmoLstmLayer` keeps them apart, in TensorFlow's `(in, out)` layout, and orders gates i, f, j, o. The forget bias
  of 1.0 that TensorFlow adds at run time is not folded into `B` (that would not be invertible in floating point):
  `ElmoLstmLayer` adds it.
- `char_embed` has 261 rows; the PyTorch table puts an all-zero row 0 ("no character") in front.
"""

from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass

import numpy as np
import torch

from .alphabet_elmo import BYTE_ALPHABET_SIZE
from .configuration_elmo import ElmoConfig


@dataclass(frozen=True)
class ParameterGroup:
    """Original datasets and state-dict keys that map onto each other, with the two directions of the mapping."""

    original_names: tuple[str, ...]
    state_keys: tuple[str, ...]
    original_shapes: tuple[tuple[int, ...], ...]
    from_original: Callable[..., tuple[np.ndarray, ...]]
    to_original: Callable[..., tuple[np.ndarray, ...]]


# -- the pairs of inverse functions -----------------------------------------------------------------------------------


def identity(*arrays):
    return arrays


def char_embedding_from_original(table):
    return (np.concatenate([np.zeros_like(table[:1]), table]),)


def char_embedding_to_original(table):
    if np.any(table[0] != 0):
        raise ValueError("row 0 of the character table (padding) is not zero; the original layout cannot hold it")
    return (table[1:],)


def conv_from_original(kernel, bias):
    return kernel[0].transpose(2, 1, 0), bias


def conv_to_original(weight, bias):
    return weight.transpose(2, 1, 0)[None], bias


def dense_from_original(kernel, bias=None):
    return (kernel.T,) if bias is None else (kernel.T, bias)


dense_to_original = dense_from_original  # a transpose is its own inverse


def swap_middle_gates(gates: np.ndarray) -> np.ndarray:
    """i, j, f, o <-> i, f, j, o along the last axis; its own inverse."""
    i, j, f, o = np.split(gates, 4, axis=-1)
    return np.concatenate([i, f, j, o], axis=-1)


def lstm_from_original(kernel, bias, projection=None):
    """`W_0` `(in + rec, 4H)`, `B`, `W_P_0` -> input kernel `(in, 4H)`, recurrent kernel `(rec, 4H)`, bias, `W_P_0`."""
    recurrent_dim = kernel.shape[1] // 4 if projection is None else projection.shape[1]
    input_dim = kernel.shape[0] - recurrent_dim
    kernel = swap_middle_gates(kernel)
    arrays = (kernel[:input_dim], kernel[input_dim:], swap_middle_gates(bias))
    return arrays if projection is None else (*arrays, projection)


def lstm_to_original(input_kernel, recurrent_kernel, bias, projection=None):
    kernel = swap_middle_gates(np.concatenate([input_kernel, recurrent_kernel], axis=0))
    arrays = (kernel, swap_middle_gates(bias))
    return arrays if projection is None else (*arrays, projection)


# -- the layout of one configuration ----------------------------------------------------------------------------------


def check_original_layout(config: ElmoConfig) -> None:
    """Raises a `ValueError` saying why, when bilm-tf's layout cannot hold a model with this config."""
    reasons = []
    if config.alphabet.learned:
        reasons.append("a learned character vocabulary (bilm-tf reads UTF-8 bytes)")
    if config.word_input_vocab_size is not None:
        reasons.append("a word-embedding input")
    if config.highway_gate != "transform":
        reasons.append("highway gates on the carry side")
    if config.always_project and config.n_filters == config.projection_dim:
        reasons.append("a projection of a token representation that already has projection_dim values")
    if getattr(config, "forget_bias", 1.0) != 1.0:
        reasons.append(f"a forget-gate bias of {config.forget_bias} at run time (bilm-tf adds 1.0)")
    if reasons:
        raise ValueError(f"bilm-tf's format cannot hold this model: it has {', '.join(reasons)}")


def parameter_groups(config: ElmoConfig) -> Iterator[ParameterGroup]:
    """Every parameter group of a model with this config, in file order."""
    check_original_layout(config)
    char_dim, n_filters = config.char_embedding_dim, config.n_filters
    projection_dim, cell_dim = config.projection_dim, config.cell_dim
    yield ParameterGroup(
        ("char_embed",),
        ("char_encoder.char_embedding.weight",),
        ((BYTE_ALPHABET_SIZE, char_dim),),
        char_embedding_from_original,
        char_embedding_to_original,
    )
    for i, (width, n) in enumerate(config.filters):
        yield ParameterGroup(
            (f"CNN/W_cnn_{i}", f"CNN/b_cnn_{i}"),
            (f"char_encoder.convolutions.{i}.weight", f"char_encoder.convolutions.{i}.bias"),
            ((1, width, char_dim, n), (n,)),
            conv_from_original,
            conv_to_original,
        )
    for k in range(config.n_highway):
        for original, ours in (("carry", "gate"), ("transform", "nonlinear")):
            yield ParameterGroup(
                (f"CNN_high_{k}/W_{original}", f"CNN_high_{k}/b_{original}"),
                (f"char_encoder.highways.{k}.{ours}_weight", f"char_encoder.highways.{k}.{ours}_bias"),
                ((n_filters, n_filters), (n_filters,)),
                dense_from_original,
                dense_to_original,
            )
    if n_filters != projection_dim:
        yield ParameterGroup(
            ("CNN_proj/W_proj", "CNN_proj/b_proj"),
            ("char_encoder.projection.weight", "char_encoder.projection.bias"),
            ((n_filters, projection_dim), (projection_dim,)),
            dense_from_original,
            dense_to_original,
        )
    projected = projection_dim < cell_dim
    recurrent_dim = projection_dim if projected else cell_dim
    for direction, stack in ((0, "forward_layers"), (1, "backward_layers")):
        for layer in range(config.n_layers):
            prefix = f"RNN_{direction}/RNN/MultiRNNCell/Cell{layer}/LSTMCell/"
            key = f"bilm.{stack}.{layer}."
            names = (prefix + "W_0", prefix + "B")
            keys = (key + "input_kernel", key + "recurrent_kernel", key + "bias")
            shapes = ((projection_dim + recurrent_dim, 4 * cell_dim), (4 * cell_dim,))
            if projected:
                names += (prefix + "W_P_0",)
                keys += (key + "projection_kernel",)
                shapes += ((cell_dim, projection_dim),)
            yield ParameterGroup(names, keys, shapes, lstm_from_original, lstm_to_original)


def original_to_state_dict(arrays: Mapping[str, np.ndarray], config: ElmoConfig) -> dict[str, torch.Tensor]:
    """
    Maps original datasets (name -> array) to a state dict. Every dataset must be used and have the shape that
    `config` implies; otherwise a `ValueError` names the first offending dataset.
    """
    state_dict, used = {}, set()
    for group in parameter_groups(config):
        originals = []
        for name, shape in zip(group.original_names, group.original_shapes):
            if name not in arrays:
                raise ValueError(f"the weight file has no dataset {name!r}, which the options imply")
            array = np.asarray(arrays[name])
            if array.shape != shape:
                raise ValueError(f"dataset {name!r} has shape {array.shape}, but the options imply {shape}")
            if array.dtype != np.float32:
                raise ValueError(f"dataset {name!r} has dtype {array.dtype}; the original layout is float32")
            originals.append(array)
            used.add(name)
        for key, value in zip(group.state_keys, group.from_original(*originals)):
            state_dict[key] = torch.from_numpy(np.ascontiguousarray(value))
    unused = sorted(set(arrays) - used)
    if unused:
        raise ValueError(f"the weight file has datasets the options do not account for: {unused}")
    return state_dict


def state_dict_to_original(state_dict: Mapping[str, torch.Tensor], config: ElmoConfig) -> dict[str, np.ndarray]:
    """Maps a state dict of `ElmoModel` (float32) back to the original datasets, in file order."""
    arrays = {}
    for group in parameter_groups(config):
        values = []
        for key in group.state_keys:
            tensor = state_dict[key]
            if tensor.dtype != torch.float32:
                raise ValueError(f"{key} is {tensor.dtype}; the original layout is float32")
            values.append(tensor.detach().cpu().numpy())
        for name, value in zip(group.original_names, group.to_original(*values)):
            arrays[name] = np.ascontiguousarray(value)
    return arrays


__all__ = ["original_to_state_dict", "state_dict_to_original", "parameter_groups", "check_original_layout"]
