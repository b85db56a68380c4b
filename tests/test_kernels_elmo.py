"""
`dispatch`, which picks the reference code or a fast kernel for each module call, and the character CNN's kernels
(`max_pooled_by_matmul`, `distinct_rows`) against the reference code of `modeling_elmo` (`conv_max_pooled`), fp32
within `FLOAT32_TOLERANCE`.
"""

import json

import pytest
import torch
from conftest import (
    assert_close,
    bilm_leaves,
    bilm_with_weights_of_scale,
    random_batch,
    tiny_config,
    use_kernels,
)

from hf_elmo import ElmoModel, kernels_elmo, kernels_lstm_training


@pytest.mark.parametrize(
    "shape, high",
    [((200, 20), 5), ((200, 50), 262), ((300, 21), 4000), ((1, 7), 3), ((0, 20), 1)],
    ids=["few-ids", "bytes", "learned-vocabulary", "one-row", "empty"],
)
def test_distinct_rows_equals_torch_unique(shape, high):
    """Exactly `torch.unique(dim=0, return_inverse=True)`: the same rows in the same order, the same inverse."""
    generator = torch.Generator().manual_seed(0)
    rows = torch.randint(0, high, shape, generator=generator)
    if len(rows) > 10:
        rows[::3] = rows[1::3][: len(rows[::3])]  # many repeated rows
    distinct, inverse = kernels_elmo.distinct_rows(rows)
    expected_distinct, expected_inverse = torch.unique(rows, dim=0, return_inverse=True)
    assert torch.equal(distinct, expected_distinct) and torch.equal(inverse, expected_inverse)


@pytest.mark.parametrize(
    "config_overrides, words",
    [({}, 1), ({}, 150), ({"activation": "tanh", "filters": [[1, 3], [4, 5], [7, 6]]}, 70)],
    ids=["one-word", "several-chunks", "tanh-wide-filters"],
)
def test_fast_character_cnn_matches_conv1d(config_overrides, words, monkeypatch):
    """Windows times flattened filters, a chunk of words at a time, against `nn.Conv1d`."""
    torch.manual_seed(0)
    config = tiny_config(**config_overrides)
    encoder = ElmoModel(config).eval().char_encoder
    with torch.no_grad():
        for conv in encoder.convolutions:
            conv.bias.normal_()  # initialised to zero; the fast path adds it after the max
    char_ids = torch.randint(1, 262, (words, config.max_characters_per_token))
    char_ids[0, 5:] = 0  # a short word: the padding character fills the rest
    outputs = {}
    for fast in (True, False):
        use_kernels(config, fast, monkeypatch)
        with torch.inference_mode():
            outputs[fast] = encoder(char_ids)
    assert_close(outputs[True], outputs[False])


def test_dispatch_follows_the_config_autograd_and_autocast(monkeypatch):
    """
    Training the biLM takes the hand-written backward, both directions of a layer in one call (autograd through the
    reference loop when the config asks for the reference) and `nn.Conv1d`; a frozen biLM or inference takes the
    in-place kernels; autocast the same kernels (their products in autocast's dtype).
    """
    calls = []
    dispatch, train_together = kernels_elmo.dispatch, kernels_lstm_training.lstm_layers_with_handwritten_backward

    def spy(*args):
        chosen = dispatch(*args)
        calls.append(chosen.__name__)
        return chosen

    def spy_together(*args):
        calls.append("lstm_layers_with_handwritten_backward")
        return train_together(*args)

    monkeypatch.setattr("hf_elmo.modeling_elmo.dispatch", spy)
    monkeypatch.setattr("hf_elmo.modeling_elmo.lstm_layers_with_handwritten_backward", spy_together)
    torch.manual_seed(0)
    config = tiny_config()
    model = ElmoModel(config)
    input_ids, mask = random_batch(config, [4, 2])
    convolutions, lstm_layers = len(config.filters), 2 * config.n_layers
    inference = ["max_pooled_by_matmul"] * convolutions + ["lstm_layer_in_place"] * lstm_layers

    model(input_ids, attention_mask=mask).last_hidden_state.sum().backward()
    assert calls == ["conv_max_pooled"] * convolutions + ["lstm_layers_with_handwritten_backward"] * config.n_layers
    assert model.bilm.forward_layers[0].recurrent_kernel.grad is not None

    calls.clear()
    monkeypatch.setattr(config, "recurrence_implementation", "reference")
    model(input_ids, attention_mask=mask).last_hidden_state.sum().backward()
    assert calls == ["conv_max_pooled"] * convolutions + ["lstm_layer_reference"] * lstm_layers
    with torch.no_grad():
        model(input_ids, attention_mask=mask)
    assert calls[-lstm_layers - convolutions :] == ["conv_max_pooled"] * convolutions + (
        ["lstm_layer_reference"] * lstm_layers
    )
    monkeypatch.setattr(config, "recurrence_implementation", "auto")

    calls.clear()
    model.requires_grad_(False)
    output = model(input_ids, attention_mask=mask)
    assert calls == inference and not output.last_hidden_state.requires_grad

    calls.clear()
    model.requires_grad_(True)
    with torch.no_grad():
        model(input_ids, attention_mask=mask)
    assert calls == inference

    # Under autocast the same kernels run, their products in autocast's dtype (the reference only when asked for).
    trained = ["conv_max_pooled"] * convolutions + ["lstm_layers_with_handwritten_backward"] * config.n_layers
    for grad_enabled, expected in ((False, inference), (True, trained)):
        calls.clear()
        with torch.set_grad_enabled(grad_enabled), torch.autocast("cpu", dtype=torch.bfloat16):
            model(input_ids, attention_mask=mask)
        assert calls == expected


def test_a_layer_with_a_forward_hook_trains_through_its_own_call(monkeypatch):
    """Hooks on a layer (and accelerate's, which wrap `forward`) see its call: such a layer is not trained together."""
    config = tiny_config()
    bilm = bilm_with_weights_of_scale(config, 0.5)
    leaves = bilm_leaves(config, [5, 3], "zeros")
    seen = []
    bilm.backward_layers[1].register_forward_hook(lambda module, args, output: seen.append(output[0].shape))
    layers, _, _ = bilm(*leaves[1:2], leaves[0], *leaves[2:])
    layers[-1].sum().backward()
    assert seen == [(2, 5, config.projection_dim)]
    assert kernels_elmo.trains_directions_together(bilm_layers(bilm, 0), leaves[1])
    assert not kernels_elmo.trains_directions_together(bilm_layers(bilm, 1), leaves[1])


def bilm_layers(bilm, index):
    return bilm.forward_layers[index], bilm.backward_layers[index]


def test_recurrence_implementation_is_chosen_at_from_pretrained(tmp_path, tiny_model):
    tiny_model.save_pretrained(tmp_path)
    loaded = ElmoModel.from_pretrained(tmp_path, recurrence_implementation="reference")
    assert loaded.config.recurrence_implementation == "reference"
    assert loaded.bilm.forward_layers[0].config is loaded.config
    with pytest.raises(ValueError, match="recurrence_implementation"):
        ElmoModel.from_pretrained(tmp_path, recurrence_implementation="fast")


def test_machine_settings_are_chosen_at_from_pretrained_and_not_saved(tmp_path):
    """The model's saved folder carries neither setting; `from_pretrained` chooses them for the config that `dispatch`
    and `step_products` read."""
    ElmoModel(tiny_config(recurrence_implementation="reference", cpu_matmul="int8")).save_pretrained(tmp_path)
    saved = json.loads((tmp_path / "config.json").read_text())
    assert "recurrence_implementation" not in saved and "cpu_matmul" not in saved
    default = ElmoModel.from_pretrained(tmp_path).config
    assert (default.recurrence_implementation, default.cpu_matmul) == ("auto", "auto")
    loaded = ElmoModel.from_pretrained(tmp_path, cpu_matmul="int8")
    assert loaded.config.cpu_matmul == "int8" and loaded.bilm.forward_layers[0].config is loaded.config
    with pytest.raises(ValueError, match="cpu_matmul must be one of"):
        ElmoModel.from_pretrained(tmp_path, cpu_matmul="mkl")
