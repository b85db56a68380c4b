"""The private parts of torch, transformers and argparse that hf_elmo and its test setup use, each pinned by a test.

A private name has no promise behind it: a release may rename it, change its arguments or its meaning without a word.
Each test asserts what the package relies on, and fails with one message naming the private part, what changed, and
where the package uses it, so that a new torch or transformers (pyproject.toml bounds them at the versions tested)
says at once what to port.
"""

import argparse
import dataclasses
import inspect
import logging

import pytest
import torch
from torch import nn
from transformers import PreTrainedModel
from utils import require, tiny_config

from hf_elmo import ElmoModel
from hf_elmo.command_line import CommandParser
from hf_elmo.modeling_elmo import ElmoPreTrainedModel, runs_only_its_forward, scan_over_steps


def changed(private: str, used: str, what: str) -> str:
    """The message of a failed pin: which private part changed, what of it, and where hf_elmo uses it."""
    return f"{private} changed ({what}); hf_elmo uses it in {used}: port that use, then this test"


def test_transformers_finalize_model_loading_is_a_staticmethod_from_pretrained_calls_on_the_class():
    """
    `ElmoPreTrainedModel._finalize_model_loading` (a classmethod) refuses unloaded biLM weights, then calls
    transformers' own, a staticmethod `(model, load_config, loading_info)` that `from_pretrained` calls on the class.
    """
    used = "modeling_elmo.ElmoPreTrainedModel._finalize_model_loading (weight_checks.refuse_unloaded_bilm_weights)"
    private = "transformers.PreTrainedModel._finalize_model_loading"
    theirs = inspect.getattr_static(PreTrainedModel, "_finalize_model_loading", None)
    assert isinstance(theirs, staticmethod), changed(private, used, f"no longer a staticmethod: {theirs!r}")
    parameters = list(inspect.signature(theirs.__func__).parameters)
    assert parameters == ["model", "load_config", "loading_info"], changed(private, used, f"arguments {parameters}")
    source = inspect.getsource(PreTrainedModel.from_pretrained.__func__)
    call = "cls._finalize_model_loading(model, load_config, loading_info)"
    assert call in source, changed(private, used, f"from_pretrained no longer calls {call}")


def test_transformers_loading_records_hold_what_the_weight_check_reads(tmp_path, monkeypatch):
    """The arguments transformers passes: `load_config.pretrained_model_name_or_path` and `loading_info`'s
    `missing_keys`, `unexpected_keys` and `mismatched_keys` (triples of name, shapes), read once per load."""
    used = "weight_checks.refuse_unloaded_bilm_weights, called by ElmoPreTrainedModel._finalize_model_loading"
    ElmoModel(tiny_config()).save_pretrained(tmp_path)
    seen = []
    ours = ElmoPreTrainedModel._finalize_model_loading.__func__

    def recording(cls, model, load_config, loading_info):
        seen.append((load_config, loading_info))
        return ours(cls, model, load_config, loading_info)

    monkeypatch.setattr(ElmoPreTrainedModel, "_finalize_model_loading", classmethod(recording))
    ElmoModel.from_pretrained(tmp_path)
    assert len(seen) == 1, changed(
        "transformers.PreTrainedModel._finalize_model_loading", used, f"called {len(seen)} times by from_pretrained"
    )
    load_config, loading_info = seen[0]
    name = getattr(load_config, "pretrained_model_name_or_path", None)
    assert name == tmp_path or str(name) == str(tmp_path), changed(
        "transformers' LoadStateDictConfig", used, f"pretrained_model_name_or_path is {name!r}"
    )
    fields = {field.name for field in dataclasses.fields(loading_info)}
    assert {"missing_keys", "unexpected_keys", "mismatched_keys"} <= fields, changed(
        "transformers' LoadStateDictInfo", used, f"its fields are {sorted(fields)}"
    )
    assert not loading_info.missing_keys and not loading_info.unexpected_keys and not loading_info.mismatched_keys


def test_torch_scan_takes_a_step_an_initial_carry_and_the_steps_and_gives_the_carry_and_the_outputs():
    """`scan(combine_fn, init, xs)` -> `(carry, stacked outputs)`, the steps along dim 0: the exported recurrence."""
    used = "modeling_elmo.scan_over_steps (the recurrence of torch.export and ONNX graphs)"
    private = "torch._higher_order_ops.scan.scan"
    from torch._higher_order_ops.scan import scan

    parameters = list(inspect.signature(scan).parameters)[:3]
    assert parameters == ["combine_fn", "init", "xs"], changed(private, used, f"its first arguments are {parameters}")
    steps = torch.arange(12.0).view(4, 3)
    carry, outputs = scan(lambda total, step: (total + step, 2 * (total + step)), torch.zeros(3), steps)
    assert torch.equal(carry, steps.sum(0)), changed(private, used, "the carry is not the last step's")
    assert torch.equal(outputs, 2 * steps.cumsum(0)), changed(private, used, "the outputs are not each step's")


def test_the_scanned_recurrence_gives_the_loops_outputs():
    """The model's own use of `scan`, against the loop it stands for in traced graphs."""
    from hf_elmo.modeling_elmo import loop_over_steps

    torch.manual_seed(0)
    gates, mask = torch.randn(2, 5, 8), torch.tensor([[True] * 5, [True] * 3 + [False] * 2])
    hidden, memory = torch.randn(2, 2), torch.randn(2, 2)

    def step(gates, hidden, memory):  # a stand-in cell of the Step signature: (gates, hidden, memory) -> new state
        memory = memory * torch.sigmoid(gates[:, :2]) + torch.tanh(gates[:, 2:4])
        return torch.sigmoid(gates[:, 4:6]) * torch.tanh(memory), memory

    looped = loop_over_steps(step, gates, mask, hidden, memory)
    scanned = scan_over_steps(step, gates, mask, hidden, memory)
    for ours, reference in zip(scanned, looped):
        assert torch.allclose(ours, reference, atol=1e-6), changed(
            "torch._higher_order_ops.scan.scan", "modeling_elmo.scan_over_steps", "its outputs differ from the loop's"
        )


def test_a_modules_forward_hooks_and_an_instance_forward_are_where_the_biLM_looks():
    """`module._forward_hooks` and `_forward_pre_hooks` (dicts, empty without hooks) and an instance's own `forward`
    in `vars(module)` (accelerate's `device_map` wraps it so): where any is, the biLM calls the layer."""
    used = "modeling_elmo.runs_only_its_forward (whether ElmoBiLm may run a layer's recurrence without calling it)"
    layer = nn.Linear(2, 2)
    for name in ("_forward_hooks", "_forward_pre_hooks"):
        value = getattr(layer, name, None)
        assert isinstance(value, dict) and not value, changed(f"torch.nn.Module.{name}", used, f"it is {value!r}")
    assert runs_only_its_forward(layer)
    hooked = nn.Linear(2, 2)
    hooked.register_forward_hook(lambda module, inputs, output: None)
    assert hooked._forward_hooks and not runs_only_its_forward(hooked), changed(
        "torch.nn.Module._forward_hooks", used, "register_forward_hook no longer fills it"
    )
    pre_hooked = nn.Linear(2, 2)
    pre_hooked.register_forward_pre_hook(lambda module, inputs: None)
    assert pre_hooked._forward_pre_hooks and not runs_only_its_forward(pre_hooked), changed(
        "torch.nn.Module._forward_pre_hooks", used, "register_forward_pre_hook no longer fills it"
    )
    accelerate_hooks = require("accelerate.hooks")
    wrapped = nn.Linear(2, 2)
    accelerate_hooks.add_hook_to_module(wrapped, accelerate_hooks.ModelHook())
    assert "forward" in vars(wrapped) and not runs_only_its_forward(wrapped), changed(
        "accelerate.hooks.add_hook_to_module", used, "it no longer sets the instance's own forward"
    )


@pytest.mark.skipif(not torch.backends.mkldnn.is_available(), reason="oneDNN is not built into this torch")
def test_onednn_linear_ops_take_a_reordered_weight_and_give_the_product():
    """`torch.ops.mkldnn._reorder_linear_weight(weight)` and `_linear_pointwise(x, packed, None, "none", [], "")`:
    oneDNN's linear, the CPU products' "onednn" candidates."""
    used = "kernels_cpu_products.onednn_product"
    torch.manual_seed(0)
    weight, x = torch.randn(3, 5), torch.randn(4, 5)
    try:
        packed = torch.ops.mkldnn._reorder_linear_weight(weight.contiguous())
        result = torch.ops.mkldnn._linear_pointwise(x, packed, None, "none", [], "")
    except (AttributeError, RuntimeError, TypeError) as error:
        pytest.fail(changed("torch.ops.mkldnn._reorder_linear_weight / _linear_pointwise", used, str(error)))
    assert torch.allclose(result, x @ weight.T, atol=1e-5), changed(
        "torch.ops.mkldnn._linear_pointwise", used, "its result is no longer x @ weight.T"
    )


def test_a_tensors_version_counts_its_in_place_writes():
    """`tensor._version` grows with each in-place write: with the data pointer and the sum, it tells a prepared copy
    of a kernel that the kernel changed."""
    used = "kernels_cpu_products (the identity of a prepared kernel copy)"
    kernel = torch.zeros(2, 2)
    before = getattr(kernel, "_version", None)
    kernel.add_(1)
    assert isinstance(before, int) and kernel._version > before, changed(
        "torch.Tensor._version", used, f"{before!r} -> {getattr(kernel, '_version', None)!r} across an in-place add"
    )


def test_argparse_tables_of_actions_and_option_strings():
    """`parser._actions` (each with its `nargs` and, for subparsers, `choices`) and `parser._option_string_actions`
    (every option string the parser takes): how the command line names an unknown option before a missing one; and
    `_negative_number_matcher`, by which argparse reads `-1` as a value."""
    used = "command_line.CommandParser.parse_known_args"
    parser = CommandParser(prog="probe")
    parser.add_argument("--all", action="store_true")
    commands = parser.add_subparsers(dest="command")
    commands.add_parser("embed")
    tables = {name: getattr(parser, name, None) for name in ("_actions", "_option_string_actions")}
    assert isinstance(tables["_actions"], list), changed("argparse.ArgumentParser._actions", used, "not a list")
    subparsers = [action for action in tables["_actions"] if action.nargs == argparse.PARSER]
    assert len(subparsers) == 1 and "embed" in subparsers[0].choices, changed(
        "argparse.ArgumentParser._actions", used, "the subparsers' action is not found by nargs == PARSER"
    )
    assert isinstance(tables["_option_string_actions"], dict) and {"--all", "-h", "--help"} <= set(
        tables["_option_string_actions"]
    ), changed("argparse.ArgumentParser._option_string_actions", used, "it no longer holds every option string")
    # pretraining.PretrainParser.is_unknown_option takes a negative number for a value, as argparse does.
    matcher = getattr(parser, "_negative_number_matcher", None)
    values = {word: bool(matcher and matcher.match(word)) for word in ("-1", "-0.5", "-.5", "--seed")}
    assert values == {"-1": True, "-0.5": True, "-.5": True, "--seed": False}, changed(
        "argparse.ArgumentParser._negative_number_matcher", "pretraining.PretrainParser", f"it matches {values}"
    )


def test_torch_onnx_exporter_logs_its_registration_notes_under_the_name_silenced():
    """The logger of the ONNX exporter's registration notes ("torchvision is not installed", on every export)."""
    require("onnxscript")
    import torch.onnx._internal.exporter._registration as registration

    name = "torch.onnx._internal.exporter._registration"
    found = getattr(registration, "logger", None)
    assert isinstance(found, logging.Logger) and found.name == name, changed(
        f"the logger {name}", "onnx_elmo.quiet_exporter", f"the module's logger is {found!r}"
    )


def test_transformers_shared_hub_client_is_made_on_first_use_with_the_endpoint_of_that_time(monkeypatch):
    """`transformers.utils.hub.hf_api()` returns one `HfApi`, kept in `_hf_api` once made, whose endpoint is the
    one `huggingface_hub.constants.ENDPOINT` held then: the stand-in Hub of each test needs it made anew."""
    import transformers.utils.hub
    from huggingface_hub import constants

    used = "tests/conftest.py's stand_in_hub fixture, which sets it to None for each stand-in"
    private = "transformers.utils.hub._hf_api"
    assert hasattr(transformers.utils.hub, "_hf_api"), changed(private, used, "no longer a module attribute")
    monkeypatch.setattr(transformers.utils.hub, "_hf_api", None)
    monkeypatch.setattr(constants, "ENDPOINT", "http://127.0.0.1:9")
    made = transformers.utils.hub.hf_api()
    assert transformers.utils.hub._hf_api is made, changed(private, used, "hf_api() no longer keeps its client there")
    assert made.endpoint == "http://127.0.0.1:9", changed(private, used, f"the client's endpoint is {made.endpoint}")
