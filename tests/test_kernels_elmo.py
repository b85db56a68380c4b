"""
Every kernel of `kernels_elmo` against the reference code of `modeling_elmo` (`conv_max_pooled` for the character
CNN, `lstm_layer_reference` for the recurrence), fp32 within `FLOAT32_TOLERANCE`; the hand-written backward of the
recurrence (`ElmoLstmLayerFunction`) against autograd through the reference loop; `dispatch`, which picks them; and
the libraries of the fast recurrence's products (`config.cpu_matmul`), with the measured choice between them.
"""

import json
import threading
import time

import pytest
import torch
from conftest import (
    FLOAT32_TOLERANCE,
    GRADIENT_TOLERANCE,
    assert_gradients_match,
    min_cosine,
    tiny_config,
    torch_threads,
)

from hf_elmo import ElmoModel, kernels_elmo
from hf_elmo.kernels_elmo import (
    ElmoLstmLayerFunction,
    blas_product,
    gate_chunks,
    lstm_layer_with_handwritten_backward,
)
from hf_elmo.modeling_elmo import ElmoBiLm, ElmoLstmLayer, lstm_layer_reference


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


def use_kernels(config, fast, monkeypatch):
    """Sets `config.recurrence_implementation` for the rest of the test: "auto" when `fast`, else "reference"."""
    monkeypatch.setattr(config, "recurrence_implementation", "auto" if fast else "reference")


def run_model(model, input_ids, mask, fast, monkeypatch, initial_state=None):
    use_kernels(model.config, fast, monkeypatch)
    with torch.inference_mode():
        return model(
            input_ids,
            attention_mask=mask,
            initial_state=initial_state,
            return_final_state=True,
            output_hidden_states=True,
        )


def assert_close(fast, exact):
    assert fast.shape == exact.shape
    assert (fast - exact).abs().max().item() <= FLOAT32_TOLERANCE


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


@pytest.mark.parametrize("chunk_rows", [1, 3, 7])
def test_fast_recurrence_in_chunks_of_steps(chunk_rows, monkeypatch):
    """Input gates computed a few steps at a time, including steps with more rows than a chunk holds."""
    monkeypatch.setattr(kernels_elmo, "GATE_CHUNK_ROWS", chunk_rows)
    torch.manual_seed(0)
    config = tiny_config()
    model = ElmoModel(config).eval()
    input_ids, mask = random_batch(config, [9, 4, 1, 9, 2])
    initial_state = random_state(config, 5)
    exact = run_model(model, input_ids, mask, False, monkeypatch, initial_state)
    fast = run_model(model, input_ids, mask, True, monkeypatch, initial_state)
    assert_outputs_match(fast, exact)


@pytest.mark.parametrize(
    "step_starts, max_rows, chunks",
    [
        ([0, 5, 9, 12, 14, 15], 7, [(0, 1), (1, 3), (3, 5)]),
        ([0, 5, 9, 12, 14, 15], 100, [(0, 5)]),
        ([0, 5, 9, 12, 14, 15], 1, [(0, 1), (1, 2), (2, 3), (3, 4), (4, 5)]),
        ([0, 2, 4, 6], 4, [(0, 2), (2, 3)]),
        ([0], 4, []),
    ],
)
def test_gate_chunks(step_starts, max_rows, chunks):
    assert gate_chunks(step_starts, max_rows) == chunks


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
        outputs = {
            fast: run_model(model, window_ids, window_mask, fast, monkeypatch, state[fast]) for fast in (True, False)
        }
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
        use_kernels(config, fast, monkeypatch)
        with torch.inference_mode():
            outputs[fast] = encoder(char_ids)
    assert_close(outputs[True], outputs[False])


# Gradients of the hand-written backward (`ElmoLstmLayerFunction`) against autograd through the reference loop.


def bilm_with_weights_of_scale(config, scale, dtype=torch.float32, seed=0):
    """An `ElmoBiLm` whose parameters are normal with std `scale`: large enough for memories and outputs to reach the
    clips (at 1.0 the gates saturate, and float32 rounding grows too much for tight gradient comparisons)."""
    torch.manual_seed(seed)
    bilm = ElmoBiLm(config).to(dtype)
    with torch.no_grad():
        for parameter in bilm.parameters():
            parameter.normal_(std=scale)
    return bilm


def bilm_leaves(config, lengths, initial_state, dtype=torch.float32, seed=1):
    """Random tokens (padded positions too), the mask, and a zero or random initial state, all requiring grad."""
    generator = torch.Generator().manual_seed(seed)
    batch_size, steps = len(lengths), max(lengths)
    mask = torch.arange(steps) < torch.tensor(lengths)[:, None]
    tokens = torch.randn(batch_size, steps, config.projection_dim, generator=generator, dtype=dtype)
    state_shape = (config.n_layers, 2, batch_size)
    hidden = torch.zeros(*state_shape, config.projection_dim, dtype=dtype)
    memory = torch.zeros(*state_shape, config.cell_dim, dtype=dtype)
    if initial_state == "random":
        hidden, memory = torch.randn_like(hidden), 3 * torch.randn_like(memory)
    return mask, *(leaf.requires_grad_() for leaf in (tokens, hidden, memory))


def bilm_results_and_gradients(bilm, mask, tokens, hidden, memory, fast, monkeypatch):
    """
    Every layer's output and the final state under autograd, and the gradients of a fixed random linear function of
    all of them with respect to the tokens, the initial state and every parameter, by name.
    """
    use_kernels(bilm.forward_layers[0].config, fast, monkeypatch)
    layer_outputs, final_hidden, final_memory = bilm(tokens, mask, hidden, memory)
    results = [*layer_outputs, final_hidden, final_memory]
    generator = torch.Generator().manual_seed(2)
    loss = sum((result * torch.randn(result.shape, generator=generator).to(result.dtype)).sum() for result in results)
    leaves = {"tokens": tokens, "hidden": hidden, "memory": memory, **dict(bilm.named_parameters())}
    gradients = torch.autograd.grad(loss, list(leaves.values()))
    return [result.detach() for result in results], dict(zip(leaves, gradients))


@pytest.mark.parametrize(
    "config_overrides, scale",
    [
        ({"cell_clip": 1.0, "proj_clip": 0.5}, 0.5),  # a tenth to a third of the memories and outputs are clipped
        ({"cell_clip": None, "proj_clip": None}, 0.5),
        ({"projection_dim": 16, "use_skip_connections": False, "cell_clip": 1.0}, 0.5),  # no projection, no proj_clip
        ({"cell_clip": 1.0, "proj_clip": 0.5, "forget_bias": 0.0}, 0.5),
    ],
    ids=["projected-clipped", "unclipped", "unprojected", "no-forget-bias"],
)
@pytest.mark.parametrize("lengths", [[7], [9, 4, 1, 9, 2], [6, 0, 3]], ids=["batch1", "padded", "empty-row"])
@pytest.mark.parametrize("initial_state", ["zeros", "random"])
def test_handwritten_backward_matches_autograd_through_reference(
    config_overrides, scale, lengths, initial_state, monkeypatch
):
    config = tiny_config(**config_overrides)
    bilm = bilm_with_weights_of_scale(config, scale)
    leaves = bilm_leaves(config, lengths, initial_state)
    exact, exact_gradients = bilm_results_and_gradients(bilm, *leaves, False, monkeypatch)
    fast, fast_gradients = bilm_results_and_gradients(bilm, *leaves, True, monkeypatch)
    for fast_result, exact_result in zip(fast, exact, strict=True):
        assert_close(fast_result, exact_result)
    assert_gradients_match(fast_gradients, exact_gradients, **GRADIENT_TOLERANCE)
    # The clips were hit, so their gradients were tested.
    if config.cell_clip is not None:
        assert (exact[-1].abs() == config.cell_clip).any()  # the final memory
    if bilm.forward_layers[0].proj_clip is not None:
        assert (exact[1].abs() == config.proj_clip).any()  # the first LSTM layer's outputs


def test_handwritten_backward_matches_autograd_through_reference_in_float64(monkeypatch):
    """Saturated gates and the clips hit often, where float32 rounding would hide small errors."""
    config = tiny_config()
    bilm = bilm_with_weights_of_scale(config, 1.0, torch.float64)
    leaves = bilm_leaves(config, [9, 4, 1, 9, 2], "random", torch.float64)
    exact, exact_gradients = bilm_results_and_gradients(bilm, *leaves, False, monkeypatch)
    fast, fast_gradients = bilm_results_and_gradients(bilm, *leaves, True, monkeypatch)
    for fast_result, exact_result in zip(fast, exact, strict=True):
        torch.testing.assert_close(fast_result, exact_result, atol=1e-12, rtol=0)
    assert_gradients_match(fast_gradients, exact_gradients, atol=1e-10, rtol=0)
    assert (exact[-1].abs() == config.cell_clip).any() and (exact[1].abs() == config.proj_clip).any()


@pytest.mark.parametrize("projected", [True, False], ids=["projected-clipped", "unprojected"])
def test_handwritten_backward_passes_gradcheck(projected):
    """Finite differences in float64 with both clips active (the seed leaves no value within `eps` of a clip)."""
    config = tiny_config(projection_dim=3 if projected else 4, cell_dim=4, cell_clip=1.0, proj_clip=0.5)
    layer = ElmoLstmLayer(config).double()
    generator = torch.Generator().manual_seed(0)
    parameters = [
        torch.randn(p.shape, generator=generator, dtype=torch.float64).requires_grad_()
        for p in (layer.input_kernel, layer.recurrent_kernel, layer.bias, layer.projection_kernel)
        if p is not None
    ]
    input_dim, recurrent_dim = layer.input_kernel.shape[0], layer.recurrent_kernel.shape[0]
    inputs = torch.randn(3, 5, input_dim, generator=generator, dtype=torch.float64).requires_grad_()
    hidden = torch.randn(3, recurrent_dim, generator=generator, dtype=torch.float64).requires_grad_()
    memory = torch.randn(3, config.cell_dim, generator=generator, dtype=torch.float64).requires_grad_()
    mask = torch.arange(5) < torch.tensor([5, 1, 3])[:, None]

    def layer_function(inputs, hidden, memory, *parameters):
        projection_kernel = parameters[3] if projected else None
        return ElmoLstmLayerFunction.apply(
            [lambda kernel, row_counts: dict.fromkeys(row_counts, blas_product(kernel))],
            [(layer.cell_clip, layer.proj_clip, config.forget_bias)],
            mask,
            inputs,
            hidden,
            memory,
            *parameters[:3],
            projection_kernel,
        )

    outputs, _, final_memory = layer_function(inputs, hidden, memory, *parameters)
    assert (final_memory.abs() == config.cell_clip).any()
    assert (outputs.abs() == config.proj_clip).any() == projected  # an unprojected layer is not clipped
    assert torch.autograd.gradcheck(layer_function, (inputs, hidden, memory, *parameters))


def test_both_directions_at_once_pass_gradcheck():
    """The two directions of one call, in float64 on two threads: each on its own worker thread, in both passes."""
    config = tiny_config(projection_dim=3, cell_dim=4, cell_clip=1.0, proj_clip=0.5)
    layers = [ElmoLstmLayer(config).double() for _ in range(2)]
    generator = torch.Generator().manual_seed(0)
    mask = torch.arange(5) < torch.tensor([5, 1, 3])[:, None]
    leaves = []
    for layer in layers:
        leaves += [torch.randn(3, 5, 3, generator=generator, dtype=torch.float64)]
        leaves += [torch.randn(3, 3, generator=generator, dtype=torch.float64)]
        leaves += [torch.randn(3, 4, generator=generator, dtype=torch.float64)]
        leaves += [torch.randn(p.shape, generator=generator, dtype=torch.float64) for p in layer.parameters()]
    leaves = [leaf.requires_grad_() for leaf in leaves]
    workers = []

    def two_directions(*leaves):
        return ElmoLstmLayerFunction.apply(
            [lambda kernel, row_counts: dict.fromkeys(row_counts, blas_product(kernel))] * 2,
            [(config.cell_clip, config.proj_clip, config.forget_bias)] * 2,
            mask,
            *leaves,
        )

    def spy(task, threads):
        workers.append(threading.current_thread().name)
        return run_on_threads(task, threads)

    run_on_threads = kernels_elmo._run_on_threads
    with pytest.MonkeyPatch.context() as patch, torch_threads(2):
        patch.setattr(kernels_elmo, "_run_on_threads", spy)
        assert torch.autograd.gradcheck(two_directions, tuple(leaves))
        assert torch.get_num_threads() == 2
    assert workers and all(name.startswith("hf_elmo-direction") for name in workers)


@pytest.mark.parametrize("threads", [1, 2])
def test_directions_trained_together_match_each_layer_trained_alone(threads, monkeypatch):
    """
    `ElmoBiLm` trains each layer's two directions through one call (at once on two threads); the results and
    gradients are those of each layer's own call, and torch's thread count is what it was.
    """
    config = tiny_config(cell_clip=1.0, proj_clip=0.5)
    bilm = bilm_with_weights_of_scale(config, 0.5)
    leaves = bilm_leaves(config, [9, 4, 1, 9, 2], "random")
    results = {}
    with torch_threads(threads):
        for together in (True, False):
            if not together:
                monkeypatch.setattr("hf_elmo.modeling_elmo.trains_directions_together", lambda *args: False)
            results[together] = bilm_results_and_gradients(bilm, *leaves, True, monkeypatch)
            assert torch.get_num_threads() == threads
    (together, together_gradients), (alone, alone_gradients) = results[True], results[False]
    for result, expected in zip(together, alone, strict=True):
        assert_close(result, expected)
    assert_gradients_match(together_gradients, alone_gradients, **GRADIENT_TOLERANCE)


def test_run_directions_finishes_both_before_it_raises():
    """A direction that fails does not leave the other running behind the caller's back."""
    finished = threading.Event()

    def fails():
        raise ValueError("direction failed")

    def slow():
        time.sleep(0.2)
        finished.set()
        return "done"

    with torch_threads(2), pytest.raises(ValueError, match="direction failed"):
        kernels_elmo.run_directions([fails, slow], torch.device("cpu"))
    assert finished.is_set()
    with torch_threads(2):
        assert kernels_elmo.run_directions([lambda: 1, lambda: 2], torch.device("cpu")) == [1, 2]


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


@pytest.mark.parametrize("clip", ["cell_clip", "proj_clip"])
def test_handwritten_backward_passes_the_gradient_at_a_clip_boundary(clip):
    """
    `torch.clamp` passes the gradient where its input equals a bound. Each path gets the clip set to one of the values
    it computes at the first step without the clip (the paths can differ in the last bit: a slice's sigmoid is not
    always rounded as the same values' sigmoid in a wider slice), so a gradient stopped at the bound would show.
    """
    config = tiny_config(cell_clip=None, proj_clip=None)
    layer = ElmoLstmLayer(config)
    torch.manual_seed(0)
    with torch.no_grad():
        for parameter in layer.parameters():
            parameter.normal_()
        layer.input_kernel.zero_()
    inputs = torch.randn(2, 3, config.projection_dim)
    mask = torch.ones(2, 3, dtype=torch.bool)
    hidden, memory = torch.zeros(2, config.projection_dim), torch.zeros(2, config.cell_dim)

    def first_step_value(run):
        outputs, _, memory_after = run(layer, inputs[:, :1], mask[:, :1], hidden, memory)
        return (memory_after if clip == "cell_clip" else outputs[:, 0])[0, 0].abs().item()

    gradients = {}
    for run in (lstm_layer_reference, lstm_layer_with_handwritten_backward):
        setattr(layer, clip, None)
        boundary = first_step_value(run)
        setattr(layer, clip, boundary)
        assert first_step_value(run) == boundary
        outputs, _, final_memory = run(layer, inputs, mask, hidden, memory)
        parameters = dict(layer.named_parameters())
        loss = outputs.sum() + final_memory.sum()
        gradients[run.__name__] = dict(zip(parameters, torch.autograd.grad(loss, list(parameters.values()))))
    assert_gradients_match(
        gradients["lstm_layer_with_handwritten_backward"], gradients["lstm_layer_reference"], **GRADIENT_TOLERANCE
    )


@pytest.mark.parametrize("frozen", [None, "char_encoder", "bilm"])
def test_handwritten_backward_through_the_whole_model(frozen, monkeypatch):
    """
    `ElmoModel` from character ids: the character CNN's parameters get their gradients through the biLM's inputs.
    With one part frozen, the backward computes only the gradients that are needed.
    """
    torch.manual_seed(0)
    config = tiny_config()
    model = ElmoModel(config).train()
    if frozen is not None:
        getattr(model, frozen).requires_grad_(False)
    input_ids, mask = random_batch(config, [9, 4, 1, 9, 2])
    hidden, memory = (state.requires_grad_() for state in random_state(config, 5))
    generator = torch.Generator().manual_seed(2)
    weights = torch.randn(5, 9, 2 * config.projection_dim, generator=generator)
    results = {}
    for fast in (False, True):
        use_kernels(config, fast, monkeypatch)
        output = model(input_ids, attention_mask=mask, initial_state=(hidden, memory), return_final_state=True)
        loss = (output.last_hidden_state * weights).sum() + output.final_state[1].sum()
        trained = {name: parameter for name, parameter in model.named_parameters() if parameter.requires_grad}
        leaves = {"hidden": hidden, "memory": memory, **trained}
        results[fast] = output, dict(zip(leaves, torch.autograd.grad(loss, list(leaves.values()))))
    (fast, fast_gradients), (exact, exact_gradients) = results[True], results[False]
    for fast_result, exact_result in zip(
        (fast.last_hidden_state, *fast.final_state), (exact.last_hidden_state, *exact.final_state)
    ):
        assert_close(fast_result.detach(), exact_result.detach())
    assert_gradients_match(fast_gradients, exact_gradients, **GRADIENT_TOLERANCE)


def test_dispatch_follows_the_config_autograd_and_autocast(monkeypatch):
    """
    Training the biLM takes the hand-written backward, both directions of a layer in one call (autograd through the
    reference loop when the config asks for the reference) and `nn.Conv1d`; a frozen biLM or inference takes the
    in-place kernels; autocast the reference.
    """
    calls = []
    dispatch, train_together = kernels_elmo.dispatch, kernels_elmo.lstm_layers_with_handwritten_backward

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

    # Under autocast every path is the reference one, which lets autocast pick each operation's dtype.
    for grad_enabled in (False, True):
        calls.clear()
        with torch.set_grad_enabled(grad_enabled), torch.autocast("cpu", dtype=torch.bfloat16):
            model(input_ids, attention_mask=mask)
        assert calls == ["conv_max_pooled"] * convolutions + ["lstm_layer_reference"] * lstm_layers


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


@pytest.mark.parametrize("library", ["blas", "onednn"])
@pytest.mark.parametrize("lengths", [[7], [9, 4, 1, 9, 2]], ids=["batch1", "padded"])
def test_each_float32_library_matches_reference(library, lengths, monkeypatch):
    torch.manual_seed(0)
    config = tiny_config()
    model = ElmoModel(config).eval()
    input_ids, mask = random_batch(config, lengths)
    exact = run_model(model, input_ids, mask, False, monkeypatch, random_state(config, len(lengths)))
    monkeypatch.setattr(config, "cpu_matmul", library)
    fast = run_model(model, input_ids, mask, True, monkeypatch, random_state(config, len(lengths)))
    assert_outputs_match(fast, exact)


def test_int8_products_stay_within_the_offered_cosine(fixture_model, fixture_sentences, monkeypatch):
    """The opt-in int8 mode on a trained checkpoint: the top layer's cosine with float32 at least 0.999, not equal."""
    from hf_elmo import ElmoTokenizer

    tokenizer = ElmoTokenizer(max_characters_per_token=fixture_model.config.max_characters_per_token)
    encoded = tokenizer(
        [s.split() for s in fixture_sentences[0]], is_split_into_words=True, padding=True, return_tensors="pt"
    )
    exact = run_model(fixture_model, encoded["input_ids"], encoded["attention_mask"], False, monkeypatch)
    monkeypatch.setattr(fixture_model.config, "cpu_matmul", "int8")
    quantized = run_model(fixture_model, encoded["input_ids"], encoded["attention_mask"], True, monkeypatch)
    cosine = min_cosine(quantized.last_hidden_state, exact.last_hidden_state, encoded["attention_mask"])
    assert 0.999 <= cosine < 1.0
    # Only the products repeated at every step are quantised; the input products stay float32.
    for layer in (*fixture_model.bilm.forward_layers, *fixture_model.bilm.backward_layers):
        assert "int8" in kernels_elmo._prepared[id(layer.recurrent_kernel)][1]
        assert "int8" not in kernels_elmo._prepared.get(id(layer.input_kernel), (None, {}))[1]


def halve_in_place(kernels):
    with torch.no_grad():
        for kernel in kernels:
            kernel.mul_(0.5)


def halve_through_data(kernels):
    for kernel in kernels:
        kernel.data.mul_(0.5)


def fused_adamw_step(kernels):
    """The Trainer's default optimizer: its fused kernel writes the weights without bumping their version counter."""
    for kernel in kernels:
        kernel.grad = torch.ones_like(kernel)
    torch.optim.AdamW(kernels, lr=0.1, fused=True).step()


@pytest.mark.parametrize("write", [halve_in_place, halve_through_data, fused_adamw_step])
@pytest.mark.parametrize("library", ["onednn", "int8"])
def test_prepared_kernels_follow_the_weights(write, library, monkeypatch):
    """A copy prepared for a library (prepacked, quantised) is remade when the weights change, never served stale."""
    torch.manual_seed(0)
    config = tiny_config()
    model = ElmoModel(config).eval()
    input_ids, mask = random_batch(config, [5, 3])
    monkeypatch.setattr(config, "cpu_matmul", library)
    before = run_model(model, input_ids, mask, True, monkeypatch)
    write([layer.recurrent_kernel for layer in model.bilm.forward_layers])
    after = run_model(model, input_ids, mask, True, monkeypatch)
    # int8 is not exact by design: its reference is a copy prepared afresh from the new weights.
    kernels_elmo._prepared.clear()
    exact = run_model(model, input_ids, mask, library == "int8", monkeypatch)
    assert_outputs_match(after, exact)
    assert not torch.allclose(before.last_hidden_state, after.last_hidden_state)


def test_auto_measures_each_shape_once_and_keeps_the_choice(tmp_path, monkeypatch):
    """
    "auto" times the float32 libraries for each product shape the first time it meets it, writes the choices to
    `$HF_ELMO_CACHE`, and later reads them from there (a new process starts from the file): no second measurement.
    """
    monkeypatch.setenv("HF_ELMO_CACHE", str(tmp_path))
    monkeypatch.setattr(kernels_elmo, "_choices", None)
    timed = []
    time_product = kernels_elmo.time_product
    monkeypatch.setattr(kernels_elmo, "time_product", lambda *args: timed.append(1) or time_product(*args))
    torch.manual_seed(0)
    config = tiny_config()
    model = ElmoModel(config).eval()
    input_ids, mask = random_batch(config, [9, 4, 1, 9, 2])
    first = run_model(model, input_ids, mask, True, monkeypatch)
    choices = json.loads((tmp_path / "cpu_matmul_choices.json").read_text())
    assert timed and len(timed) == 2 * len(choices)  # two libraries timed per shape
    assert set(choices.values()) <= {"blas", "onednn"}
    assert all(kernels_elmo.cpu_model() in key and f"{torch.get_num_threads()} threads" in key for key in choices)

    timed.clear()
    monkeypatch.setattr(kernels_elmo, "_choices", None)  # as a new process: only the file remains
    second = run_model(model, input_ids, mask, True, monkeypatch)
    assert timed == []
    assert torch.equal(first.last_hidden_state, second.last_hidden_state)  # same choices, same rounding


def test_auto_without_a_writable_cache_still_runs(tmp_path, monkeypatch):
    blocked = tmp_path / "a-file"
    blocked.write_text("not a folder")
    monkeypatch.setenv("HF_ELMO_CACHE", str(blocked))
    monkeypatch.setattr(kernels_elmo, "_choices", None)
    torch.manual_seed(0)
    config = tiny_config()
    model = ElmoModel(config).eval()
    input_ids, mask = random_batch(config, [4, 2])
    exact = run_model(model, input_ids, mask, False, monkeypatch)
    assert_outputs_match(run_model(model, input_ids, mask, True, monkeypatch), exact)


def test_cpu_matmul_is_checked_and_refused_where_it_cannot_run(monkeypatch):
    with pytest.raises(ValueError, match="cpu_matmul must be one of"):
        tiny_config(cpu_matmul="mkl")
    torch.manual_seed(0)
    config = tiny_config(cpu_matmul="int8")
    model = ElmoModel(config).eval().to(torch.float64)
    input_ids, mask = random_batch(config, [4, 2])
    with pytest.raises(ValueError, match="cpu_matmul='int8' runs float32 kernels on the CPU"):
        run_model(model, input_ids, mask, True, monkeypatch)
    model = ElmoModel(tiny_config(cpu_matmul="onednn")).eval()
    monkeypatch.setattr(torch.backends.mkldnn, "is_available", lambda: False)
    with pytest.raises(ValueError, match="cpu_matmul='onednn' needs a torch built with oneDNN"):
        run_model(model, input_ids, mask, True, monkeypatch)
