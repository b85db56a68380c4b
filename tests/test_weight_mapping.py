import numpy as np
import pytest
import torch
from utils import FLOAT32_TOLERANCE, random_original_arrays, tiny_config

from hf_elmo import ElmoModel
from hf_elmo.weight_mapping import (
    conv_from_original,
    conv_to_original,
    lstm_from_original,
    lstm_to_original,
    original_to_state_dict,
    state_dict_to_original,
    swap_middle_gates,
)

CONFIGS = {
    "tiny": tiny_config(),
    "no skip, tanh, no highway": tiny_config(use_skip_connections=False, activation="tanh", n_highway=0),
    "no cnn projection": tiny_config(filters=[[1, 4], [2, 4]], projection_dim=8),
    "no lstm projection": tiny_config(projection_dim=16, cell_dim=16),
    "261 characters, 30 per token": tiny_config(n_characters=261, max_characters_per_token=30),
    "one layer": tiny_config(n_layers=1),
}


def bits(array: np.ndarray) -> np.ndarray:
    return np.ascontiguousarray(array).view(np.uint32)


@pytest.mark.parametrize("name", list(CONFIGS))
def test_original_to_state_dict_to_original_is_bit_exact(name):
    config = CONFIGS[name]
    arrays = random_original_arrays(config, seed=3)
    state_dict = original_to_state_dict(arrays, config)
    model = ElmoModel(config)
    assert model.load_state_dict(state_dict, strict=True)  # every parameter present, with its shape
    back = state_dict_to_original(model.state_dict(), config)
    assert list(back) == list(arrays)
    for key in arrays:
        np.testing.assert_array_equal(bits(back[key]), bits(arrays[key]), err_msg=key)


def test_optional_datasets_follow_the_shapes():
    no_cnn_projection = random_original_arrays(CONFIGS["no cnn projection"])
    assert not any(name.startswith("CNN_proj") for name in no_cnn_projection)
    no_lstm_projection = random_original_arrays(CONFIGS["no lstm projection"])
    assert not any(name.endswith("W_P_0") for name in no_lstm_projection)


def test_gate_reordering_moves_the_forget_gate():
    gates = np.arange(8, dtype=np.float32)  # i, j, f, o with 2 cells each
    np.testing.assert_array_equal(swap_middle_gates(gates), [0, 1, 4, 5, 2, 3, 6, 7])
    np.testing.assert_array_equal(swap_middle_gates(swap_middle_gates(gates)), gates)


def test_lstm_kernel_split_and_layout():
    rng = np.random.default_rng(0)
    kernel, bias, projection = (rng.normal(size=s).astype(np.float32) for s in [(5 + 3, 16), (16,), (4, 3)])
    input_kernel, recurrent_kernel, torch_bias, torch_projection = lstm_from_original(kernel, bias, projection)
    assert input_kernel.shape == (5, 16) and recurrent_kernel.shape == (3, 16) and torch_projection.shape == (4, 3)
    # TensorFlow computes [x, h] @ W_0 with gates i, j, f, o; the split weights must give the same pre-activations.
    x, h = rng.normal(size=5).astype(np.float32), rng.normal(size=3).astype(np.float32)
    tf_gates = np.concatenate([x, h]) @ kernel + bias
    ours = x @ input_kernel + h @ recurrent_kernel + torch_bias
    np.testing.assert_allclose(swap_middle_gates(ours), tf_gates, rtol=0, atol=FLOAT32_TOLERANCE)
    for original, restored in zip(
        (kernel, bias, projection), lstm_to_original(*lstm_from_original(kernel, bias, projection))
    ):
        np.testing.assert_array_equal(bits(original), bits(restored))


def test_conv_kernel_layout_matches_tensorflow_correlation():
    rng = np.random.default_rng(1)
    kernel = rng.normal(size=(1, 3, 4, 6)).astype(np.float32)  # (1, width, char_dim, n_filters)
    bias = rng.normal(size=6).astype(np.float32)
    weight, torch_bias = conv_from_original(kernel, bias)
    chars = rng.normal(size=(10, 4)).astype(np.float32)  # (positions, char_dim)
    expected = np.stack([np.einsum("wc,wcf->f", chars[t : t + 3], kernel[0]) for t in range(8)]) + bias
    got = torch.nn.functional.conv1d(
        torch.from_numpy(chars.T[None]), torch.from_numpy(weight), torch.from_numpy(torch_bias)
    )[0].T.numpy()
    np.testing.assert_allclose(got, expected, rtol=0, atol=FLOAT32_TOLERANCE)
    np.testing.assert_array_equal(bits(conv_to_original(weight, torch_bias)[0]), bits(kernel))


def test_fixture_weights_round_trip_bit_exact(fixture_dir, fixture_model):
    import h5py

    back = state_dict_to_original(fixture_model.state_dict(), fixture_model.config)
    with h5py.File(fixture_dir / "lm_weights.hdf5", "r") as handle:
        names = []
        handle.visititems(lambda name, item: names.append(name) if isinstance(item, h5py.Dataset) else None)
        assert sorted(names) == sorted(back)
        for name in names:
            np.testing.assert_array_equal(bits(back[name]), bits(handle[name][()]), err_msg=name)


def test_missing_extra_and_misshapen_datasets_are_named():
    config = CONFIGS["tiny"]
    arrays = random_original_arrays(config)
    missing = dict(arrays)
    del missing["CNN/W_cnn_1"]
    with pytest.raises(ValueError, match="no dataset 'CNN/W_cnn_1'"):
        original_to_state_dict(missing, config)
    extra = dict(arrays, **{"CNN_high_7/W_carry": np.zeros((16, 16), np.float32)})
    with pytest.raises(ValueError, match="CNN_high_7/W_carry"):
        original_to_state_dict(extra, config)
    wrong = dict(arrays)
    wrong["RNN_1/RNN/MultiRNNCell/Cell1/LSTMCell/B"] = np.zeros(60, np.float32)
    with pytest.raises(ValueError, match=r"'RNN_1/RNN/MultiRNNCell/Cell1/LSTMCell/B' has shape \(60,\)"):
        original_to_state_dict(wrong, config)
    wrong_dtype = dict(arrays, char_embed=arrays["char_embed"].astype(np.float64))
    with pytest.raises(ValueError, match="char_embed.*dtype float64"):
        original_to_state_dict(wrong_dtype, config)


def test_nonzero_padding_character_cannot_be_exported():
    config = CONFIGS["tiny"]
    model = ElmoModel(config)
    state_dict = dict(model.state_dict())
    state_dict["char_encoder.char_embedding.weight"] = state_dict["char_encoder.char_embedding.weight"].clone()
    state_dict["char_encoder.char_embedding.weight"][0] = 1.0
    with pytest.raises(ValueError, match="row 0"):
        state_dict_to_original(state_dict, config)
