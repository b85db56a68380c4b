"""
The libraries of the fast recurrence's products (`kernels_cpu_products`): each float32 library "auto" may choose
against the reference code, each bfloat16 one under autocast against the reference under the same autocast, the
opt-in int8 products, copies prepared from kernels that follow the weights, and the measured choice between the
libraries kept per machine.
"""

import json
from pathlib import Path

import pytest
import torch
from utils import (
    assert_close_in_bfloat16,
    assert_outputs_match,
    min_cosine,
    random_batch,
    random_state,
    run_model,
    tiny_config,
)

from hf_elmo import ElmoModel, kernels_cpu_products


def choose_float32_library(library, monkeypatch):
    """Makes "auto" choose `library` for every shape, whatever this machine would measure."""
    monkeypatch.setattr(kernels_cpu_products, "fastest_library", lambda *shape: library)


@pytest.mark.parametrize("library", ["blas", "onednn"])
@pytest.mark.parametrize("lengths", [[7], [9, 4, 1, 9, 2]], ids=["batch1", "padded"])
def test_each_float32_library_matches_reference(library, lengths, monkeypatch):
    torch.manual_seed(0)
    config = tiny_config()
    model = ElmoModel(config).eval()
    input_ids, mask = random_batch(config, lengths)
    exact = run_model(model, input_ids, mask, False, monkeypatch, random_state(config, len(lengths)))
    choose_float32_library(library, monkeypatch)
    fast = run_model(model, input_ids, mask, True, monkeypatch, random_state(config, len(lengths)))
    assert_outputs_match(fast, exact)


@pytest.mark.parametrize("library", ["bfloat16", "onednn-bfloat16"])
def test_each_bfloat16_library_matches_reference_under_autocast(library, monkeypatch):
    """Under bfloat16 autocast "auto" measures `mm` against oneDNN's prepacked linear too: either matches."""
    torch.manual_seed(0)
    config = tiny_config()
    model = ElmoModel(config).eval()
    input_ids, mask = random_batch(config, [9, 4, 1, 9, 2])
    chosen = []
    monkeypatch.setattr(kernels_cpu_products, "fastest_library", lambda *shape: chosen.append(shape[-1]) or library)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        exact = run_model(model, input_ids, mask, False, monkeypatch, random_state(config, 5))
        fast = run_model(model, input_ids, mask, True, monkeypatch, random_state(config, 5))
    assert chosen and set(chosen) == {torch.bfloat16}
    for fast_layer, exact_layer in zip(fast.hidden_states, exact.hidden_states, strict=True):
        assert_close_in_bfloat16(fast_layer, exact_layer)


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
        assert "int8" in kernels_cpu_products._prepared[id(layer.recurrent_kernel)][1]
        assert "int8" not in kernels_cpu_products._prepared.get(id(layer.input_kernel), (None, {}))[1]


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
    if library == "int8":
        monkeypatch.setattr(config, "cpu_matmul", library)
    else:
        choose_float32_library(library, monkeypatch)
    before = run_model(model, input_ids, mask, True, monkeypatch)
    write([layer.recurrent_kernel for layer in model.bilm.forward_layers])
    after = run_model(model, input_ids, mask, True, monkeypatch)
    # int8 is not exact by design: its reference is a copy prepared afresh from the new weights.
    kernels_cpu_products._prepared.clear()
    exact = run_model(model, input_ids, mask, library == "int8", monkeypatch)
    assert_outputs_match(after, exact)
    assert not torch.allclose(before.last_hidden_state, after.last_hidden_state)


def choices_read_anew(monkeypatch, cache: Path) -> None:
    """`$HF_ELMO_CACHE` at `cache` and no choice held, as a new process starts: only the file there remains."""
    monkeypatch.setenv("HF_ELMO_CACHE", str(cache))
    monkeypatch.setattr(kernels_cpu_products, "_choices", None)


def counted_timings(monkeypatch) -> list:
    """A list that gains an item each time a product is timed."""
    timed, time_product = [], kernels_cpu_products.time_product
    monkeypatch.setattr(kernels_cpu_products, "time_product", lambda *args: timed.append(1) or time_product(*args))
    return timed


def model_and_exact_output(monkeypatch) -> tuple:
    """A tiny model, a batch of two rows and the model's output on it without "auto" (torch's own products)."""
    torch.manual_seed(0)
    config = tiny_config()
    model = ElmoModel(config).eval()
    input_ids, mask = random_batch(config, [4, 2])
    return model, input_ids, mask, run_model(model, input_ids, mask, False, monkeypatch)


def test_auto_measures_each_shape_once_and_keeps_the_choice(tmp_path, monkeypatch):
    """
    "auto" times the float32 libraries for each product shape the first time it meets it, writes the choices to
    `$HF_ELMO_CACHE`, and later reads them from there (a new process starts from the file): no second measurement.
    """
    choices_read_anew(monkeypatch, tmp_path)
    timed = counted_timings(monkeypatch)
    torch.manual_seed(0)
    config = tiny_config()
    model = ElmoModel(config).eval()
    input_ids, mask = random_batch(config, [9, 4, 1, 9, 2])
    first = run_model(model, input_ids, mask, True, monkeypatch)
    choices = json.loads((tmp_path / "cpu_matmul_choices.json").read_text())
    assert timed and len(timed) == 2 * len(choices)  # two libraries timed per shape
    assert set(choices.values()) <= {"blas", "onednn"}
    machine = (kernels_cpu_products.cpu_model(), f"{torch.get_num_threads()} threads")
    assert all(machine[0] in key and machine[1] in key for key in choices)

    timed.clear()
    choices_read_anew(monkeypatch, tmp_path)
    second = run_model(model, input_ids, mask, True, monkeypatch)
    assert timed == []
    assert torch.equal(first.last_hidden_state, second.last_hidden_state)  # same choices, same rounding


@pytest.mark.parametrize("damage", ["list", "foreign choice", "cut short"])
def test_auto_measures_again_over_a_damaged_choices_file(tmp_path, monkeypatch, damage):
    """A choices file that is no object, holds a choice hf_elmo does not make, or was cut short means measuring
    again (and writing it whole), never a product looked up by a name no kernel has."""
    choices_read_anew(monkeypatch, tmp_path)
    model, input_ids, mask, exact = model_and_exact_output(monkeypatch)
    run_model(model, input_ids, mask, True, monkeypatch)
    path = tmp_path / "cpu_matmul_choices.json"
    measured = json.loads(path.read_text())
    damaged = {
        "list": json.dumps(list(measured)),
        "foreign choice": json.dumps(dict.fromkeys(measured, "mkl")),
        "cut short": path.read_text()[:-5],
    }[damage]
    path.write_text(damaged)
    choices_read_anew(monkeypatch, tmp_path)
    timed = counted_timings(monkeypatch)
    assert_outputs_match(run_model(model, input_ids, mask, True, monkeypatch), exact)
    assert len(timed) == 2 * len(measured)
    assert set(json.loads(path.read_text()).values()) <= {"blas", "onednn"}


def test_auto_without_a_writable_cache_still_runs(tmp_path, monkeypatch):
    blocked = tmp_path / "a-file"
    blocked.write_text("not a folder")
    choices_read_anew(monkeypatch, blocked)
    model, input_ids, mask, exact = model_and_exact_output(monkeypatch)
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
