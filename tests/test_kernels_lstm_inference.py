"""
The inference recurrence (`lstm_layer_in_place`) against the reference recurrence of `modeling_elmo`
(`lstm_layers_reference`), fp32 within `FLOAT32_TOLERANCE`: padded batches, initial state, chunks of steps, repeated
words, long sentences in windows, and the fixture checkpoint; on weights whose memories and outputs reach the clips
(`model_reaching_the_clips`), so that a clip the kernel dropped shows.
"""

import pytest
import torch
from utils import (
    FLOAT32_TOLERANCE,
    assert_clips_reached,
    assert_close_in_bfloat16,
    assert_outputs_match,
    model_reaching_the_clips,
    random_batch,
    random_state,
    run_model,
    spy_on_kernels,
    tiny_config,
)

from hf_elmo import ElmoModel, kernels_lstm_inference
from hf_elmo.kernels_lstm_inference import gate_chunks

# Weights redrawn with std 0.3 (`model_reaching_the_clips`) against clips of 1.0 and 0.5: a seventh of the memories and
# an eighth of the outputs are clipped, where the default initialisation reaches neither clip of `tiny_config`.
CLIPPED_CONFIGS = pytest.mark.parametrize(
    "config_overrides",
    [
        {"cell_clip": 1.0, "proj_clip": 0.5},
        {"cell_clip": None, "proj_clip": None},
        {"projection_dim": 16, "use_skip_connections": False, "cell_clip": 1.0},  # no projection, no proj_clip
    ],
    ids=["projected-clipped", "unclipped", "unprojected"],
)


@CLIPPED_CONFIGS
@pytest.mark.parametrize(
    "lengths", [[7], [9, 4, 1, 9, 2], [3, 1, 2, 3, 3, 2, 1, 3]], ids=["batch1", "padded", "more-rows-than-steps"]
)
def test_fast_recurrence_matches_reference(config_overrides, lengths, monkeypatch):
    config = tiny_config(**config_overrides)
    model = model_reaching_the_clips(config)
    input_ids, mask = random_batch(config, lengths)
    initial_state = random_state(config, len(lengths))
    for state in (None, initial_state):
        exact = run_model(model, input_ids, mask, False, monkeypatch, state)
        fast = run_model(model, input_ids, mask, True, monkeypatch, state)
        assert_outputs_match(fast, exact)
        assert torch.all(fast.last_hidden_state[~mask.bool()] == 0)
        assert_clips_reached(model.bilm.forward_layers[0], exact.final_state[1], exact.hidden_states[1])


def test_fast_recurrence_of_one_step(monkeypatch):
    """Inputs of one position (no boundary words): one chunk of gates, of one step."""
    config = tiny_config(cell_clip=1.0, proj_clip=0.5)
    model = model_reaching_the_clips(config)
    input_ids, mask = random_batch(config, [1, 1])
    for state in (None, random_state(config, 2)):
        exact = run_model(model, input_ids, mask, False, monkeypatch, state)
        assert_outputs_match(run_model(model, input_ids, mask, True, monkeypatch, state), exact)
        assert exact.last_hidden_state.abs().max() > 0


@pytest.mark.parametrize("chunk_rows", [1, 3, 7])
def test_fast_recurrence_in_chunks_of_steps(chunk_rows, monkeypatch):
    """Input gates computed a few steps at a time, including steps with more rows than a chunk holds."""
    monkeypatch.setattr(kernels_lstm_inference, "GATE_CHUNK_ROWS", chunk_rows)
    config = tiny_config(cell_clip=1.0, proj_clip=0.5)
    model = model_reaching_the_clips(config)
    input_ids, mask = random_batch(config, [9, 4, 1, 9, 2])
    initial_state = random_state(config, 5)
    exact = run_model(model, input_ids, mask, False, monkeypatch, initial_state)
    fast = run_model(model, input_ids, mask, True, monkeypatch, initial_state)
    assert_outputs_match(fast, exact)
    assert_clips_reached(model.bilm.forward_layers[0], exact.final_state[1], exact.hidden_states[1])


@pytest.mark.parametrize(
    "step_starts, max_rows, chunks",
    [
        ([0, 5, 9, 12, 14, 15], 7, [(0, 1), (1, 3), (3, 5)]),
        ([0, 5, 9, 12, 14, 15], 100, [(0, 5)]),
        ([0, 5, 9, 12, 14, 15], 1, [(0, 1), (1, 2), (2, 3), (3, 4), (4, 5)]),
        ([0, 2, 4, 6], 4, [(0, 2), (2, 3)]),
        ([0, 3], 4, [(0, 1)]),  # one step
        ([0, 9], 4, [(0, 1)]),  # one step of more rows than a chunk holds
        ([0], 4, []),
    ],
)
def test_gate_chunks(step_starts, max_rows, chunks):
    assert gate_chunks(step_starts, max_rows) == chunks


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
    config = tiny_config(projection_dim=32, cell_dim=64, cell_clip=1.0, proj_clip=0.5)
    model = model_reaching_the_clips(config, scale=0.2)
    input_ids, mask = random_batch(config, [300, 120])
    state = {True: None, False: None}
    for window in range(0, 300, 100):
        window_ids, window_mask = input_ids[:, window : window + 100], mask[:, window : window + 100]
        outputs = {
            fast: run_model(model, window_ids, window_mask, fast, monkeypatch, state[fast]) for fast in (True, False)
        }
        assert_outputs_match(outputs[True], outputs[False])
        exact = outputs[False]
        assert_clips_reached(model.bilm.forward_layers[0], exact.final_state[1], exact.hidden_states[1])
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


def test_fast_recurrence_on_fixture_checkpoint(fixture_model, fixture_sentences, monkeypatch):
    """The released-format test checkpoint, real sentences, batch of 10 with padding."""
    from hf_elmo import ElmoTokenizer

    tokenizer = ElmoTokenizer(max_characters_per_token=fixture_model.config.max_characters_per_token)
    encoded = tokenizer(
        [s.split() for s in fixture_sentences[0]], is_split_into_words=True, padding=True, return_tensors="pt"
    )
    exact = run_model(fixture_model, encoded["input_ids"], encoded["attention_mask"], False, monkeypatch)
    fast = run_model(fixture_model, encoded["input_ids"], encoded["attention_mask"], True, monkeypatch)
    assert_outputs_match(fast, exact)


@CLIPPED_CONFIGS
@pytest.mark.parametrize("lengths", [[7], [9, 4, 1, 9, 2]], ids=["batch1", "padded"])
def test_fast_recurrence_under_autocast_matches_reference_under_autocast(config_overrides, lengths, monkeypatch):
    """Mixed precision: the products in bfloat16 as autocast takes the reference's, the state in float32."""
    config = tiny_config(**config_overrides)
    model = model_reaching_the_clips(config)
    input_ids, mask = random_batch(config, lengths)
    state = random_state(config, len(lengths))
    with torch.autocast("cpu", dtype=torch.bfloat16):
        exact = run_model(model, input_ids, mask, False, monkeypatch, state)
        fast = run_model(model, input_ids, mask, True, monkeypatch, state)
    for index, (fast_layer, exact_layer) in enumerate(zip(fast.hidden_states, exact.hidden_states, strict=True)):
        assert_close_in_bfloat16(fast_layer, exact_layer, f"layer {index}")
    for fast_state, exact_state in zip(fast.final_state, exact.final_state, strict=True):
        assert fast_state.dtype == torch.float32
        assert_close_in_bfloat16(fast_state, exact_state)
    assert_clips_reached(model.bilm.forward_layers[0], exact.final_state[1], exact.hidden_states[1])
    float32 = run_model(model, input_ids, mask, True, monkeypatch, state)
    assert (fast.last_hidden_state - float32.last_hidden_state).abs().max() > FLOAT32_TOLERANCE  # bfloat16 products


def test_bfloat16_weights_take_the_fast_recurrence(monkeypatch):
    """A model loaded in bfloat16 runs the in-place kernels, in bfloat16, as the reference does in bfloat16."""
    torch.manual_seed(0)
    config = tiny_config()
    model = ElmoModel(config).eval().to(torch.bfloat16)
    input_ids, mask = random_batch(config, [9, 4, 1, 9, 2])
    calls = spy_on_kernels(monkeypatch)
    exact = run_model(model, input_ids, mask, False, monkeypatch)
    fast = run_model(model, input_ids, mask, True, monkeypatch)
    lstm_calls = [call for call in calls if "lstm" in call]
    assert lstm_calls == ["lstm_layers_reference"] * 2 + ["lstm_layers_in_place"] * 2
    assert fast.last_hidden_state.dtype == torch.bfloat16
    for index, (fast_layer, exact_layer) in enumerate(zip(fast.hidden_states, exact.hidden_states, strict=True)):
        assert_close_in_bfloat16(fast_layer, exact_layer, f"layer {index}")
