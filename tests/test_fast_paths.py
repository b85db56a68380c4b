"""
Every fast path of `modeling_elmo` against the exact reference paths (`nn.Conv1d` for the character CNN,
`ElmoLstmLayer.forward` for the recurrence), fp32 within 1e-5.
"""

import pytest
import torch

import hf_elmo.modeling_elmo as modeling_elmo
from hf_elmo import ElmoModel
from hf_elmo.modeling_elmo import ElmoBiLm, ElmoCharacterEncoder

from conftest import tiny_config

TOLERANCE = 1e-5


def random_batch(config, lengths, seed=0):
    """Random character ids `(batch, max(lengths), chars)`, right-padded with all-zero rows, and its mask."""
    generator = torch.Generator().manual_seed(seed)
    positions = max(lengths)
    input_ids = torch.randint(1, 262, (len(lengths), positions, config.max_characters_per_token), generator=generator)
    mask = torch.arange(positions) < torch.tensor(lengths)[:, None]
    return input_ids * mask[..., None], mask.long()


def random_state(config, batch_size, seed=1):
    generator = torch.Generator().manual_seed(seed)
    hidden = torch.randn(config.n_layers, 2, batch_size, config.projection_dim, generator=generator)
    memory = torch.randn(config.n_layers, 2, batch_size, config.cell_dim, generator=generator)
    return hidden, memory


def run_model(model, input_ids, mask, fast, monkeypatch, initial_state=None):
    monkeypatch.setattr(modeling_elmo, "_FAST_PATHS", fast)
    with torch.inference_mode():
        return model(input_ids, attention_mask=mask, initial_state=initial_state, return_final_state=True,
                     output_hidden_states=True)


def assert_close(fast, exact):
    assert fast.shape == exact.shape
    assert (fast - exact).abs().max().item() <= TOLERANCE


def assert_outputs_match(fast, exact):
    for fast_layer, exact_layer in zip(fast.hidden_states, exact.hidden_states, strict=True):
        assert_close(fast_layer, exact_layer)
    for fast_state, exact_state in zip(fast.final_state, exact.final_state, strict=True):
        assert_close(fast_state, exact_state)


@pytest.mark.parametrize(
    "config_overrides",
    [{}, {"cell_clip": None, "proj_clip": None}, {"projection_dim": 16, "use_skip_connections": False}],
    ids=["projected-clipped", "unclipped", "unprojected"],
)
@pytest.mark.parametrize("lengths", [[7], [9, 4, 1, 9, 2]], ids=["batch1", "padded"])
def test_fast_recurrence_matches_reference(config_overrides, lengths, monkeypatch):
    torch.manual_seed(0)
    config = tiny_config(**config_overrides)
    model = ElmoModel(config).eval()
    input_ids, mask = random_batch(config, lengths)
    initial_state = random_state(config, len(lengths))
    for state in (None, initial_state):
        exact = run_model(model, input_ids, mask, False, monkeypatch, state)
        fast = run_model(model, input_ids, mask, True, monkeypatch, state)
        assert_outputs_match(fast, exact)
        assert torch.all(fast.last_hidden_state[~mask.bool()] == 0)


def test_fast_recurrence_with_repeated_words(monkeypatch):
    """The first layer projects each distinct word once; positions sharing a word must still get their own gates."""
    torch.manual_seed(0)
    config = tiny_config()
    model = ElmoModel(config).eval()
    words, _ = random_batch(config, [3], seed=2)  # three distinct words
    choices = torch.tensor([[0, 1, 0, 2, 1, 0], [2, 2, 0, 1, 0, 0], [1, 0, 2, 0, 0, 0]])
    mask = torch.tensor([[1, 1, 1, 1, 1, 1], [1, 1, 1, 1, 0, 0], [1, 1, 1, 0, 0, 0]])
    input_ids = words[0][choices] * mask[..., None]
    fast = run_model(model, input_ids, mask, True, monkeypatch)
    exact = run_model(model, input_ids, mask, False, monkeypatch)
    assert_outputs_match(fast, exact)
    assert not torch.equal(fast.last_hidden_state[0, 0], fast.last_hidden_state[0, 2])  # same word, new context


def test_fast_recurrence_on_a_long_sentence_with_state_carried_across_windows(monkeypatch):
    torch.manual_seed(0)
    config = tiny_config(projection_dim=32, cell_dim=64)
    model = ElmoModel(config).eval()
    input_ids, mask = random_batch(config, [300, 120])
    state = {True: None, False: None}
    for window in range(0, 300, 100):
        window_ids, window_mask = input_ids[:, window : window + 100], mask[:, window : window + 100]
        outputs = {fast: run_model(model, window_ids, window_mask, fast, monkeypatch, state[fast])
                   for fast in (True, False)}
        assert_outputs_match(outputs[True], outputs[False])
        state = {fast: output.final_state for fast, output in outputs.items()}
    whole = {fast: run_model(model, input_ids, mask, fast, monkeypatch) for fast in (True, False)}
    assert_outputs_match(whole[True], whole[False])


def test_fast_recurrence_rows_without_valid_positions_keep_their_initial_state(monkeypatch):
    torch.manual_seed(0)
    config = tiny_config()
    model = ElmoModel(config).eval()
    input_ids, mask = random_batch(config, [5, 5])
    input_ids[1], mask[1] = 0, 0
    hidden, memory = random_state(config, 2)
    fast = run_model(model, input_ids, mask, True, monkeypatch, (hidden, memory))
    assert torch.equal(fast.final_state[0][:, :, 1], hidden[:, :, 1])
    assert torch.equal(fast.final_state[1][:, :, 1], memory[:, :, 1])
    assert fast.last_hidden_state[1].abs().max() == 0


def test_fast_recurrence_leaves_its_arguments_untouched(monkeypatch):
    torch.manual_seed(0)
    config = tiny_config()
    model = ElmoModel(config).eval()
    input_ids, mask = random_batch(config, [6, 3, 5])
    hidden, memory = random_state(config, 3)
    copies = hidden.clone(), memory.clone()
    run_model(model, input_ids, mask, True, monkeypatch, (hidden, memory))
    assert torch.equal(hidden, copies[0]) and torch.equal(memory, copies[1])


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
        monkeypatch.setattr(modeling_elmo, "_FAST_PATHS", fast)
        with torch.inference_mode():
            outputs[fast] = encoder(char_ids)
    assert_close(outputs[True], outputs[False])


def test_path_selection_follows_autograd(monkeypatch):
    """Training the biLM takes the differentiable reference paths; a frozen biLM or inference takes the fast ones."""
    calls = []
    spied = {(ElmoBiLm, "_run_layer_in_place"), (ElmoCharacterEncoder, "_max_pooled_by_matmul")}
    for owner, name in spied:
        original = getattr(owner, name)

        def spy(self, *args, _original=original, _name=name):
            calls.append(_name)
            return _original(self, *args)

        monkeypatch.setattr(owner, name, spy)
    torch.manual_seed(0)
    config = tiny_config()
    model = ElmoModel(config)
    input_ids, mask = random_batch(config, [4, 2])
    fast_calls = ["_max_pooled_by_matmul"] + ["_run_layer_in_place"] * config.n_layers

    model(input_ids, attention_mask=mask).last_hidden_state.sum().backward()
    assert calls == []
    assert model.bilm.forward_layers[0].recurrent_kernel.grad is not None

    model.requires_grad_(False)
    output = model(input_ids, attention_mask=mask)
    assert calls == fast_calls and not output.last_hidden_state.requires_grad

    calls.clear()
    model.requires_grad_(True)
    with torch.no_grad():
        model(input_ids, attention_mask=mask)
    assert calls == fast_calls


def test_fast_recurrence_on_fixture_checkpoint(fixture_model, fixture_sentences, monkeypatch):
    """The released-format test checkpoint, real sentences, batch of 10 with padding."""
    from hf_elmo import ElmoTokenizer

    tokenizer = ElmoTokenizer(max_characters_per_token=fixture_model.config.max_characters_per_token)
    encoded = tokenizer([s.split() for s in fixture_sentences[0]], is_split_into_words=True, padding=True,
                        return_tensors="pt")
    exact = run_model(fixture_model, encoded["input_ids"], encoded["attention_mask"], False, monkeypatch)
    fast = run_model(fixture_model, encoded["input_ids"], encoded["attention_mask"], True, monkeypatch)
    assert_outputs_match(fast, exact)


@pytest.mark.parametrize("return_tensors", ["pt", "np"])
def test_tokenizer_tensors_equal_its_lists(return_tensors):
    """The direct numpy conversion of padded batches gives what transformers' generic conversion gives."""
    import numpy as np
    from transformers import BatchEncoding

    from hf_elmo import ElmoTokenizer

    tokenizer = ElmoTokenizer(max_characters_per_token=20)
    words = [["a", "longer", "sentence", "é"], ["short"], ["x"] * 7]
    pairs = [["b"], ["c", "d"], ["e"]]
    for kwargs in ({}, {"text_pair": pairs, "return_length": True}, {"padding": "max_length", "max_length": 12}):
        kwargs = {"padding": True, **kwargs}
        lists = tokenizer(words, is_split_into_words=True, **kwargs)
        tensors = tokenizer(words, is_split_into_words=True, return_tensors=return_tensors, **kwargs)
        generic = BatchEncoding(dict(lists), tensor_type=return_tensors)
        assert sorted(tensors.keys()) == sorted(generic.keys())
        for key in generic:
            assert type(tensors[key]) is type(generic[key])
            assert tensors[key].dtype == generic[key].dtype
            assert np.array_equal(np.asarray(tensors[key]), np.asarray(generic[key]))
        assert tensors.word_ids(1) == lists.word_ids(1)
