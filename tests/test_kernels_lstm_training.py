"""
The hand-written backward of the recurrence (`ElmoLstmLayerFunction`) against autograd through the reference loop of
`modeling_elmo`, in float32 and float64 and by `torch.autograd.gradcheck`, and the directions of a layer run at once
(`run_directions`).
"""

import threading
import time

import pytest
import torch
from utils import (
    BFLOAT16_TOLERANCE,
    FLOAT32_TOLERANCE,
    GRADIENT_TOLERANCE,
    assert_clips_reached,
    assert_close,
    assert_close_in_bfloat16,
    assert_gradients_match,
    bilm_leaves,
    bilm_with_weights_of_scale,
    random_batch,
    random_state,
    tiny_config,
    torch_threads,
    use_kernels,
)

from hf_elmo import ElmoModel, kernels_lstm_training
from hf_elmo.kernels_cpu_products import blas_product
from hf_elmo.kernels_lstm_training import (
    DirectionSettings,
    ElmoLstmLayerFunction,
    lstm_layers_with_handwritten_backward,
)
from hf_elmo.modeling_elmo import ElmoLstmLayer, lstm_layers_reference

# Gradients of the hand-written backward (`ElmoLstmLayerFunction`) against autograd through the reference loop.


def bilm_results_and_gradients(bilm, mask, tokens, hidden, memory, fast, monkeypatch, autocast_dtype=None):
    """
    Every layer's output and the final state under autograd, and the gradients of a fixed random linear function of
    all of them with respect to the tokens, the initial state and every parameter, by name. With `autocast_dtype`,
    the forward runs under autocast to it and the backward outside, as the Trainer runs them.
    """
    use_kernels(bilm.forward_layers[0].config, fast, monkeypatch)
    with torch.autocast("cpu", dtype=autocast_dtype, enabled=autocast_dtype is not None):
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
    # The clips were hit, so their gradients were tested: the final memory, the first LSTM layer's outputs.
    assert_clips_reached(bilm.forward_layers[0], exact[-1], exact[1])


@pytest.mark.parametrize(
    "config_overrides",
    [
        {"cell_clip": 1.0, "proj_clip": 0.5},
        {"cell_clip": None, "proj_clip": None},
        {"projection_dim": 16, "use_skip_connections": False, "cell_clip": 1.0},
    ],
    ids=["projected-clipped", "unclipped", "unprojected"],
)
@pytest.mark.parametrize("lengths", [[7], [9, 4, 1, 9, 2], [6, 0, 3]], ids=["batch1", "padded", "empty-row"])
def test_handwritten_backward_under_autocast_matches_autograd_through_reference_under_autocast(
    config_overrides, lengths, monkeypatch
):
    """
    Mixed precision: every product in bfloat16 in both passes, as autocast takes the reference's; the outputs, the
    final state and every gradient within `BFLOAT16_TOLERANCE`, from a random initial state.
    """
    config = tiny_config(**config_overrides)
    bilm = bilm_with_weights_of_scale(config, 0.5)
    leaves = bilm_leaves(config, lengths, "random")
    exact, exact_gradients = bilm_results_and_gradients(bilm, *leaves, False, monkeypatch, torch.bfloat16)
    fast, fast_gradients = bilm_results_and_gradients(bilm, *leaves, True, monkeypatch, torch.bfloat16)
    for index, (fast_result, exact_result) in enumerate(zip(fast, exact, strict=True)):
        assert_close_in_bfloat16(fast_result, exact_result, f"result {index}")
    assert fast_gradients.keys() == exact_gradients.keys()
    for name, gradient in fast_gradients.items():
        assert gradient.dtype == exact_gradients[name].dtype
        assert_close_in_bfloat16(gradient, exact_gradients[name], name)
    assert_clips_reached(bilm.forward_layers[0], exact[-1], exact[1])
    float32, _ = bilm_results_and_gradients(bilm, *leaves, True, monkeypatch)
    assert (fast[-2] - float32[-2]).abs().max() > FLOAT32_TOLERANCE  # the products really ran in bfloat16


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
    assert_clips_reached(bilm.forward_layers[0], exact[-1], exact[1])


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
            [DirectionSettings(layer.cell_clip, layer.proj_clip, config.forget_bias, None)],
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
            [DirectionSettings(config.cell_clip, config.proj_clip, config.forget_bias, None)] * 2,
            mask,
            *leaves,
        )

    def spy(task, threads):
        workers.append(threading.current_thread().name)
        return run_on_threads(task, threads)

    run_on_threads = kernels_lstm_training._run_on_threads
    with pytest.MonkeyPatch.context() as patch, torch_threads(2):
        patch.setattr(kernels_lstm_training, "_run_on_threads", spy)
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
                monkeypatch.setattr("hf_elmo.modeling_elmo.runs_only_its_forward", lambda layer: False)
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
        kernels_lstm_training.run_directions([fails, slow], torch.device("cpu"))
    assert finished.is_set()
    with torch_threads(2):
        assert kernels_lstm_training.run_directions([lambda: 1, lambda: 2], torch.device("cpu")) == [1, 2]


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
        [(outputs, _, memory_after)] = run([layer], [inputs[:, :1]], mask[:, :1], [hidden], [memory])
        return (memory_after if clip == "cell_clip" else outputs[:, 0])[0, 0].abs().item()

    gradients = {}
    for run in (lstm_layers_reference, lstm_layers_with_handwritten_backward):
        setattr(layer, clip, None)
        boundary = first_step_value(run)
        setattr(layer, clip, boundary)
        assert first_step_value(run) == boundary
        [(outputs, _, final_memory)] = run([layer], [inputs], mask, [hidden], [memory])
        parameters = dict(layer.named_parameters())
        loss = outputs.sum() + final_memory.sum()
        gradients[run.__name__] = dict(zip(parameters, torch.autograd.grad(loss, list(parameters.values()))))
    assert_gradients_match(
        gradients["lstm_layers_with_handwritten_backward"], gradients["lstm_layers_reference"], **GRADIENT_TOLERANCE
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


def test_whole_model_under_autocast_matches_the_reference_under_autocast(monkeypatch):
    """
    `ElmoModel` trained under bfloat16 autocast, as `--bf16` runs it: the character CNN, highways and projection in
    autocast's dtype feed the recurrence's kernels, whose inputs' gradients flow back to them. The character side's
    gradients sum bfloat16 products over every character window, in both paths and in other orders: each gradient is
    within twice `BFLOAT16_TOLERANCE` of the reference's under the same autocast, and no farther from float32's than
    the reference's is, give or take `BFLOAT16_TOLERANCE`.
    """
    torch.manual_seed(0)
    config = tiny_config()
    model = ElmoModel(config).train()
    input_ids, mask = random_batch(config, [9, 4, 1, 9, 2])
    weights = torch.randn(5, 9, 2 * config.projection_dim, generator=torch.Generator().manual_seed(2))
    results = {}
    for fast, mixed in ((False, False), (False, True), (True, True)):
        use_kernels(config, fast, monkeypatch)
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=mixed):
            output = model(input_ids, attention_mask=mask)
        loss = (output.last_hidden_state.float() * weights).sum()
        parameters = dict(model.named_parameters())
        results[fast, mixed] = output, dict(zip(parameters, torch.autograd.grad(loss, list(parameters.values()))))
    (fast, fast_gradients), (exact, exact_gradients) = results[True, True], results[False, True]
    float32_gradients = results[False, False][1]
    assert_close_in_bfloat16(fast.last_hidden_state.detach(), exact.last_hidden_state.detach())
    for name, gradient in fast_gradients.items():
        assert gradient.dtype == torch.float32
        scale = float32_gradients[name].abs().max().item()
        assert (gradient - exact_gradients[name]).abs().max().item() <= 2 * BFLOAT16_TOLERANCE * scale, name
        fast_error = (gradient - float32_gradients[name]).abs().max().item()
        reference_error = (exact_gradients[name] - float32_gradients[name]).abs().max().item()
        assert fast_error <= reference_error + BFLOAT16_TOLERANCE * scale, name
