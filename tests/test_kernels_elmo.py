"""
The registry of kernels and `choose_path`, which picks the reference code or a kernel for each call:
by the config, autograd and hooks, never by autocast; chosen at `from_pretrained`, never saved.
"""

import json
import re

import pytest
import torch
from utils import (
    FLOAT32_TOLERANCE,
    bilm_leaves,
    bilm_with_weights_of_scale,
    random_batch,
    scan_compiled_afresh,
    spy_on_kernels,
    tiny_config,
)

from hf_elmo import ElmoModel, kernels_elmo
from hf_elmo.modeling_elmo import runs_only_its_forward


def test_the_choice_follows_the_config_autograd_and_autocast(monkeypatch):
    """
    Training the biLM takes the hand-written backward, both directions of a layer in one call (autograd through the
    reference loop when the config asks for the reference) and `nn.Conv1d`; a frozen biLM or inference takes the
    in-place kernels; autocast the same kernels (their products in autocast's dtype).
    """
    calls = spy_on_kernels(monkeypatch)
    torch.manual_seed(0)
    config = tiny_config()
    model = ElmoModel(config)
    input_ids, mask = random_batch(config, [4, 2])
    convolutions, n_layers = len(config.filters), config.n_layers
    distinct, checked = ["distinct_rows_by_packed_keys"], ["check_inputs"]
    inference = checked + distinct + ["max_pooled_by_matmul"] * convolutions + ["lstm_layers_in_place"] * n_layers
    trained = (
        checked
        + distinct
        + ["conv_max_pooled"] * convolutions
        + ["lstm_layers_with_handwritten_backward"] * (n_layers)
    )
    reference = (
        checked
        + ["distinct_rows_reference"]
        + ["conv_max_pooled"] * convolutions
        + ["lstm_layers_reference"] * n_layers
    )

    model(input_ids, attention_mask=mask).last_hidden_state.sum().backward()
    assert calls == trained
    assert model.bilm.forward_layers[0].recurrent_kernel.grad is not None

    calls.clear()
    monkeypatch.setattr(config, "recurrence_implementation", "reference")
    model(input_ids, attention_mask=mask).last_hidden_state.sum().backward()
    assert calls == reference
    with torch.no_grad():
        model(input_ids, attention_mask=mask)
    assert calls[len(reference) :] == reference
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
    for grad_enabled, expected in ((False, inference), (True, trained)):
        calls.clear()
        with torch.set_grad_enabled(grad_enabled), torch.autocast("cpu", dtype=torch.bfloat16):
            model(input_ids, attention_mask=mask)
        assert calls == expected


@pytest.mark.parametrize("exporting", [True, False])
def test_a_graph_keeps_no_value_and_only_an_export_scans_the_steps(exporting, monkeypatch):
    """
    Under `torch.export` (ONNX too) and `torch.compile` every position is encoded and no mask is checked (a graph
    holds no value); an export runs the steps as one scan, which holds any number of steps, while `torch.compile`,
    specialised to its shapes, keeps the loop: inductor cannot lower the scan (it failed on it).
    """
    calls = spy_on_kernels(monkeypatch)
    monkeypatch.setattr(torch.compiler, "is_compiling", lambda: True)  # exporting compiles too
    monkeypatch.setattr(torch.compiler, "is_exporting", lambda: exporting)
    if exporting:
        scan_compiled_afresh()  # it failed after test_every_path_clips_as_the_reference_does in one worker
    config = tiny_config()
    input_ids, mask = random_batch(config, [4, 2])
    with torch.no_grad():
        ElmoModel(config)(input_ids, attention_mask=mask)
    recurrence = "lstm_layers_scanned" if exporting else "lstm_layers_reference"
    expected = ["trust_values", "every_row_as_distinct"] + ["conv_max_pooled"] * len(config.filters)
    assert calls == expected + [recurrence] * config.n_layers


@pytest.mark.slow
def test_torch_compile_gives_the_eager_vectors():
    """The model under `torch.compile` (inductor, which builds C++ here: about 30 s) gives the eager vectors."""
    torch.manual_seed(0)
    config = tiny_config()
    model = ElmoModel(config).eval()
    input_ids, mask = random_batch(config, [4, 2])
    with torch.no_grad():
        eager = model(input_ids, attention_mask=mask).last_hidden_state
        compiled = torch.compile(model)(input_ids, attention_mask=mask).last_hidden_state
    assert (compiled - eager).abs().max() <= FLOAT32_TOLERANCE


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
    assert all(runs_only_its_forward(layer) for layer in (bilm.forward_layers[0], bilm.backward_layers[0]))
    assert not runs_only_its_forward(bilm.backward_layers[1]) and runs_only_its_forward(bilm.forward_layers[1])


def test_recurrence_implementation_is_chosen_at_from_pretrained(tmp_path, tiny_model):
    tiny_model.save_pretrained(tmp_path)
    loaded = ElmoModel.from_pretrained(tmp_path, recurrence_implementation="reference")
    assert loaded.config.recurrence_implementation == "reference"
    assert loaded.bilm.forward_layers[0].config is loaded.config
    with pytest.raises(ValueError, match="recurrence_implementation"):
        ElmoModel.from_pretrained(tmp_path, recurrence_implementation="fast")


def test_machine_settings_are_chosen_at_from_pretrained_and_not_saved(tmp_path):
    """The model's saved folder carries neither setting; `from_pretrained` chooses them for the config that
    `choose_path` and `step_products` read."""
    ElmoModel(tiny_config(recurrence_implementation="reference", cpu_matmul="int8")).save_pretrained(tmp_path)
    saved = json.loads((tmp_path / "config.json").read_text())
    assert "recurrence_implementation" not in saved and "cpu_matmul" not in saved
    default = ElmoModel.from_pretrained(tmp_path).config
    assert (default.recurrence_implementation, default.cpu_matmul) == ("auto", "auto")
    loaded = ElmoModel.from_pretrained(tmp_path, cpu_matmul="int8")
    assert loaded.config.cpu_matmul == "int8" and loaded.bilm.forward_layers[0].config is loaded.config
    with pytest.raises(ValueError, match="cpu_matmul must be one of"):
        ElmoModel.from_pretrained(tmp_path, cpu_matmul="mkl")


def test_every_entry_is_declared_and_an_unknown_key_raises():
    """Each registry has an entry for every path (the model's own code named where it runs), a device's entry comes
    before its path's, and a key that names no path is a `KeyError` naming the paths, as `AttentionInterface`'s."""
    registry = kernels_elmo.ALL_DISTINCT_ROWS
    assert set(registry) == set(kernels_elmo.PATHS)
    for table in (kernels_elmo.ALL_RECURRENCES, kernels_elmo.ALL_TASK_BILSTMS, kernels_elmo.ALL_VALUE_CHECKS):
        assert set(table) >= set(kernels_elmo.PATHS) and table["reference"] == kernels_elmo.REFERENCE

    def reference(rows):
        return rows

    cpu = torch.device("cpu")
    assert registry.get_interface("reference", cpu, reference) is reference
    assert registry.get_interface("inference", cpu, reference).__name__ == "distinct_rows_by_packed_keys"
    with pytest.raises(KeyError, match="'fast' is not a key of ALL_DISTINCT_ROWS: a path \\(reference, exported"):
        registry.get_interface("fast", cpu, reference)
    with pytest.raises(KeyError, match="is not a key of ALL_DISTINCT_ROWS"):
        registry.register(("inference", torch.device("cuda")), reference)
    with pytest.raises(KeyError, match="the reference path of ALL_DISTINCT_ROWS runs the model's own code"):
        registry.register(("reference", "cuda"), reference)
    with pytest.raises(ValueError, match="needs one entry for each of exported, compiled, inference, training"):
        kernels_elmo.Kernels("ALL_NEW", inference=reference)
    with pytest.raises(TypeError, match="the exported path of ALL_RECURRENCES runs the reference's graph form"):
        kernels_elmo.ALL_RECURRENCES.get_interface("exported", cpu, reference)


def test_a_registry_takes_exactly_one_entry_a_path_and_returns_what_is_registered():
    """`Kernels` refuses a missing or an unknown path (the reference's entry is its own) with the expected paths in
    the message; a registered kernel, for a path or for a device alone, is what `get_interface` gives."""

    def reference(rows):
        return rows

    def kernel(rows):
        return rows + 1

    def on_cpu(rows):
        return rows + 2

    paths = kernels_elmo.PATHS[1:]
    expected = "ALL_NEW needs one entry for each of exported, compiled, inference, training; got "
    for entries in [*({p: kernel for p in paths if p != left_out} for left_out in paths), {}]:
        with pytest.raises(ValueError, match=f"^{expected}{re.escape(str(sorted(entries)))}$"):
            kernels_elmo.Kernels("ALL_NEW", **entries)
    for extra in ("reference", "fast"):
        entries = {**dict.fromkeys(paths, kernel), extra: kernel}
        with pytest.raises(ValueError, match=f"^{expected}{re.escape(str(sorted(entries)))}$"):
            kernels_elmo.Kernels("ALL_NEW", **entries)
    registry = kernels_elmo.Kernels("ALL_NEW", **dict.fromkeys(paths, kernel))
    assert registry == {"reference": kernels_elmo.REFERENCE, **dict.fromkeys(paths, kernel)}
    cpu = torch.device("cpu")
    assert registry.get_interface("reference", cpu, reference) is reference
    assert all(registry.get_interface(path, cpu, reference) is kernel for path in paths)
    registry.register(("inference", "cpu"), on_cpu)
    registry.register("training", on_cpu)
    assert registry.get_interface("inference", cpu, reference) is on_cpu
    assert registry.get_interface("inference", torch.device("meta"), reference) is kernel
    assert registry.get_interface("training", cpu, reference) is on_cpu
    with pytest.raises(KeyError, match="'fast' is not a key of ALL_NEW"):
        registry.register("fast", on_cpu)
