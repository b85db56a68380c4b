"""ELMo in ONNX: one exported graph for any batch size and sentence length, run by ONNX Runtime.

[`export_onnx`] writes a folder as Optimum's exports are laid out: `model.onnx` beside `config.json` and the
tokenizer files. The graph is traced from [`ElmoForOnnx`], a formulation of the model that reads its weights (no
copy) and takes every LSTM as one `torch` scan over the positions, which `torch.onnx.export(dynamo=True)` turns into
an ONNX `Scan`: the recurrence stays a loop in the graph instead of being unrolled into a fixed number of steps, so
the positions axis stays dynamic. [`ElmoOnnxSession`] runs an exported folder with the input checks of the model.

Inputs: `input_ids` `(batch, positions, max_characters_per_token)` int64 and `attention_mask` `(batch, positions)`
int64 (right padding), then `word_input_ids` `(batch, positions)` for models with a word-embedding input and
`token_type_ids` `(batch, positions)` for pair classifiers. Outputs: for `ElmoModel`, `last_hidden_state`
`(batch, positions, 2 * projection_dim)` and `hidden_states`, the `n_layers + 1` layers stacked on a first axis
(`torch.stack(output.hidden_states)`); for the heads, `logits`.
"""

import contextlib
import functools
import json
import logging
import os
import shutil
import warnings
from collections.abc import Callable
from pathlib import Path

import numpy as np
import torch
from torch import nn
from torch._higher_order_ops.scan import scan

from .bundled import resolve_model_name
from .configuration_elmo import ElmoConfig
from .errors import ElmoConversionError, first_line
from .folders import atomic_directory
from .modeling_elmo import (
    ElmoForSequenceClassification,
    ElmoForTokenClassification,
    ElmoLstmLayer,
    ElmoModel,
    lstm_cell,
    masked_pool,
    reverse_valid_steps,
    word_positions,
)
from .tokenization_elmo import ElmoTokenizer

ONNX_FILE = "model.onnx"
# The class a folder's `config.architectures` names -> the model its graph is exported from; any other ELMo folder
# (`ElmoModel`, `ElmoForPreTraining`) exports its biLM.
HEADS = {
    "ElmoForSequenceClassification": ElmoForSequenceClassification,
    "ElmoForTokenClassification": ElmoForTokenClassification,
}


def lstm_direction(
    step: Callable, input_gates: torch.Tensor, mask: torch.Tensor, hidden: torch.Tensor, memory: torch.Tensor
) -> torch.Tensor:
    """
    Runs `step(gates, hidden, memory) -> (new_hidden, new_memory)` over the positions of `input_gates` `(batch,
    steps, 4 * cell_dim)` (each step's input product, bias included) as one scan, from `hidden`, `memory` `(batch,
    dim)`. At a step where `mask` `(batch, steps)` is False a row keeps its state and outputs zeros. Returns the
    outputs `(batch, steps, hidden_dim)`.
    """

    def combine(carry, step_inputs):
        hidden, memory = carry
        gates, valid = step_inputs
        new_hidden, new_memory = step(gates, hidden, memory)
        valid = valid[:, None]
        carry = (torch.where(valid, new_hidden, hidden), torch.where(valid, new_memory, memory))
        return carry, torch.where(valid, new_hidden, 0.0)

    _, outputs = scan(combine, (hidden, memory), (input_gates.transpose(0, 1), mask.transpose(0, 1)))
    return outputs.transpose(0, 1)


def elmo_lstm_layer(layer: ElmoLstmLayer, inputs: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """
    `layer` from a zero state on `inputs` `(batch, steps, projection_dim)` in its reading order: the reference
    recurrence's step (`modeling_elmo.lstm_cell`) as one scan.
    """
    batch = inputs.shape[0]
    hidden = inputs.new_zeros(batch, layer.recurrent_kernel.shape[0])
    memory = inputs.new_zeros(batch, layer.cell_dim)
    return lstm_direction(
        functools.partial(lstm_cell, layer), inputs @ layer.input_kernel + layer.bias, mask, hidden, memory
    )


def task_lstm(lstm: nn.LSTM, features: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """
    The heads' task BiLSTM (`nn.LSTM`, one layer, bidirectional, batch first) on `features` `(batch, steps, dim)` as
    it runs on packed sequences: each direction over each row's valid steps only. Returns `(batch, steps, 2 * H)`,
    zero at padded steps.
    """
    lengths, hidden_size = mask.sum(dim=1), lstm.hidden_size  # the scan's body may not read the module itself
    outputs = []
    for suffix in ("", "_reverse"):
        weight_ih, weight_hh = getattr(lstm, f"weight_ih_l0{suffix}"), getattr(lstm, f"weight_hh_l0{suffix}")
        bias = getattr(lstm, f"bias_ih_l0{suffix}") + getattr(lstm, f"bias_hh_l0{suffix}")

        def step(input_gates, hidden, memory, weight_hh=weight_hh):
            gates = input_gates + hidden @ weight_hh.t()
            in_gate, forget_gate, cell_input, out_gate = gates.split(hidden_size, dim=-1)
            new_memory = torch.sigmoid(forget_gate) * memory + torch.sigmoid(in_gate) * torch.tanh(cell_input)
            return torch.sigmoid(out_gate) * torch.tanh(new_memory), new_memory

        inputs = features if suffix == "" else reverse_valid_steps(features, lengths)
        hidden, memory = (features.new_zeros(features.shape[0], hidden_size) for _ in range(2))
        output = lstm_direction(step, inputs @ weight_ih.t() + bias, mask, hidden, memory)
        outputs.append(output if suffix == "" else reverse_valid_steps(output, lengths))
    return torch.cat(outputs, dim=-1)


class ElmoForOnnx(nn.Module):
    """
    An `ElmoModel`, `ElmoForSequenceClassification` or `ElmoForTokenClassification` computed as the export needs:
    the same weights and results, every LSTM as a scan over positions, no input checks (a graph cannot raise on
    values: [`ElmoOnnxSession`] checks the inputs) and outputs as a tuple of tensors, named by `output_names`.
    """

    def __init__(self, model: ElmoModel | ElmoForSequenceClassification | ElmoForTokenClassification):
        super().__init__()
        self.model = model
        self.elmo = model if isinstance(model, ElmoModel) else model.elmo
        self.config = model.config
        self.input_names = ["input_ids", "attention_mask"]
        if self.config.word_input_vocab_size is not None:
            self.input_names.append("word_input_ids")
        if isinstance(model, ElmoForSequenceClassification) and self.config.pair_classification:
            self.input_names.append("token_type_ids")
        self.output_names = ["last_hidden_state", "hidden_states"] if model is self.elmo else ["logits"]

    def forward(
        self,
        input_ids: torch.LongTensor,
        attention_mask: torch.Tensor,
        word_input_ids: torch.LongTensor | None = None,
        token_type_ids: torch.LongTensor | None = None,
    ) -> tuple[torch.Tensor, ...]:
        mask = attention_mask.bool()
        layers = self.bilm_layers(input_ids, mask, word_input_ids)
        if self.model is self.elmo:
            return layers[-1], torch.stack(layers)
        features = self.task_features(layers, mask)
        if isinstance(self.model, ElmoForTokenClassification):
            return (self.model.classifier(features),)
        words = word_positions(input_ids, mask, self.config)
        pooling = self.config.pooling
        if self.config.pair_classification:
            second = token_type_ids.bool()
            u, v = masked_pool(features, words & ~second, pooling), masked_pool(features, words & second, pooling)
            pooled = torch.cat([u, v, (u - v).abs(), u * v], dim=-1)
        else:
            pooled = masked_pool(features, words, pooling)
        return (self.model.classifier(pooled),)

    def bilm_layers(
        self, input_ids: torch.LongTensor, mask: torch.Tensor, word_input_ids: torch.LongTensor | None
    ) -> list[torch.Tensor]:
        """The `n_layers + 1` layers of `ElmoModel.hidden_states`, each `(batch, positions, 2 * projection_dim)`."""
        bilm, dim = self.elmo.bilm, self.config.projection_dim
        lengths = mask.sum(dim=1)
        tokens = self.elmo.embed_words(input_ids, mask, word_input_ids)
        layers = [torch.cat([tokens, tokens], dim=-1)]
        for index, (forward_layer, backward_layer) in enumerate(zip(bilm.forward_layers, bilm.backward_layers)):
            forward_input = layers[-1][..., :dim]
            # The backward stack reads each row from its last valid position.
            backward_input = reverse_valid_steps(layers[-1][..., dim:], lengths)
            forward_output = elmo_lstm_layer(forward_layer, forward_input, mask)
            backward_output = elmo_lstm_layer(backward_layer, backward_input, mask)
            if bilm.use_skip_connections and index > 0:
                forward_output, backward_output = forward_output + forward_input, backward_output + backward_input
            layers.append(torch.cat([forward_output, reverse_valid_steps(backward_output, lengths)], dim=-1))
        return layers

    def task_features(self, layers: list[torch.Tensor], mask: torch.Tensor) -> torch.Tensor:
        """What `ElmoTaskEncoder` computes from the layers: the ELMo mix, the token layer beside it, the BiLSTM."""
        encoder = self.model.task_encoder
        features = encoder.mix(tuple(layers), mask)
        if encoder.concat_token_representation:
            features = torch.cat([layers[0][..., : self.config.projection_dim], features], dim=-1)
        if encoder.lstm is not None:
            features = task_lstm(encoder.lstm, features, mask)
        return features


def example_inputs(forward: ElmoForOnnx, tokenizer: ElmoTokenizer) -> dict[str, torch.Tensor]:
    """Two sentences of different lengths, which the export traces (no size of them is kept in the graph)."""
    encoding = tokenizer([["a", "bc", "def"], ["g"]], is_split_into_words=True, padding=True, return_tensors="pt")
    inputs = {name: encoding[name] for name in forward.input_names if name in encoding}
    if "token_type_ids" in forward.input_names:
        inputs["token_type_ids"] = torch.zeros_like(encoding["attention_mask"])
    return inputs


def load_for_export(model_dir: str | os.PathLike) -> tuple[ElmoForOnnx, ElmoTokenizer]:
    """The model of a folder or a bundled model's name (by its `config.architectures`, in float32 and eval mode) and
    its tokenizer."""
    try:
        path = resolve_model_name(str(model_dir), hub=False)
    except ValueError as error:
        raise ElmoConversionError(str(error)) from error
    try:
        config = ElmoConfig.from_pretrained(path)
        model_class = next((HEADS[name] for name in config.architectures or [] if name in HEADS), ElmoModel)
        model = model_class.from_pretrained(path, dtype=torch.float32).eval()
        tokenizer = ElmoTokenizer.from_pretrained(path)
    except (OSError, ValueError) as error:
        raise ElmoConversionError(f"{model_dir} could not be loaded as an hf_elmo model: {error}") from error
    if tokenizer.max_characters_per_token != config.max_characters_per_token:  # a folder without tokenizer files
        tokenizer = ElmoTokenizer(config.max_characters_per_token)
    return ElmoForOnnx(model).eval(), tokenizer


@contextlib.contextmanager
def quiet_exporter():
    """Silences what torch's ONNX exporter says on every export that is no news to the user."""
    with warnings.catch_warnings():
        # torch's own deprecations, and a note that each named axis is used once (as intended) under one name.
        warnings.filterwarnings("ignore", message=r".*isinstance\(treespec, LeafSpec\)", category=FutureWarning)
        warnings.filterwarnings("ignore", message=r"# The axis name: .* will not be used", category=UserWarning)
        registration = logging.getLogger("torch.onnx._internal.exporter._registration")
        level = registration.level
        registration.setLevel(logging.ERROR)  # "torchvision is not installed. Skipping torchvision::nms", ...
        try:
            yield
        finally:
            registration.setLevel(level)


def export_onnx(model_dir: str | os.PathLike, output_dir: str | os.PathLike, overwrite: bool = False) -> Path:
    """
    Writes `model.onnx` (see the module's doc) with `config.json` and the tokenizer files of the model folder
    `model_dir` into `output_dir`, which appears complete or not at all. A head folder (its `config.architectures`)
    exports the head's `logits`, any other folder the biLM's layers.
    """
    try:
        import onnxscript  # noqa: F401  torch.onnx.export(dynamo=True) translates with it
    except ImportError as error:
        raise ElmoConversionError('ONNX export needs the onnx extra: pip install "hf_elmo[onnx]"') from error
    with atomic_directory(output_dir, overwrite) as staging, torch.no_grad(), quiet_exporter():
        forward, tokenizer = load_for_export(model_dir)
        inputs = example_inputs(forward, tokenizer)
        batch, positions = torch.export.Dim("batch"), torch.export.Dim("positions")
        dynamic_shapes = {name: {0: batch, 1: positions} for name in inputs}
        try:
            program = torch.onnx.export(
                forward,
                kwargs=inputs,
                dynamic_shapes=dynamic_shapes,
                input_names=forward.input_names,
                output_names=forward.output_names,
                dynamo=True,
                verbose=False,
            )
        except Exception as error:  # torch raises many types (export, translation, optimisation), each many lines
            raise ElmoConversionError(f"torch.onnx.export failed on {model_dir}: {first_line(error)}") from error
        program.save(staging / ONNX_FILE)
        forward.config.save_pretrained(staging)
        tokenizer.save_pretrained(staging)
    return Path(output_dir)


def quantize_int8(folder: str | os.PathLike, output_dir: str | os.PathLike, overwrite: bool = False) -> Path:
    """
    Writes to `output_dir` (complete or not at all) a copy of the exported `folder` whose graph ONNX Runtime's
    dynamic quantisation has rewritten: int8 weights and activations quantised at each call, in every product, those
    inside the LSTM scans included. Results change slightly: compare them with the float32 graph's.
    """
    from onnxruntime.quantization import QuantType, quantize_dynamic

    folder = Path(folder)
    if not (folder / ONNX_FILE).is_file():
        raise ValueError(f"{folder} holds no {ONNX_FILE}; write it with: hf-elmo export --format onnx")
    with atomic_directory(output_dir, overwrite) as staging:
        for path in folder.iterdir():
            if path.is_file() and path.name != ONNX_FILE:
                shutil.copy2(path, staging / path.name)
        options = {"EnableSubgraph": True}  # the Scan bodies hold the recurrent products
        quantize_dynamic(folder / ONNX_FILE, staging / ONNX_FILE, weight_type=QuantType.QInt8, extra_options=options)
    return Path(output_dir)


class ElmoOnnxSession:
    """
    An exported folder run by ONNX Runtime. Called with the tokenizer's arrays (NumPy or torch), it checks them as
    the model does and returns the outputs by name, as NumPy arrays.
    """

    def __init__(self, folder: str | os.PathLike, session_options=None, providers: list[str] | None = None):
        try:
            import onnxruntime
        except ImportError as error:
            raise ImportError('running an exported model needs the onnx extra: pip install "hf_elmo[onnx]"') from error
        folder = Path(folder)
        if not (folder / ONNX_FILE).is_file():
            raise ValueError(f"{folder} holds no {ONNX_FILE}; write it with: hf-elmo export --format onnx")
        config = json.loads((folder / "config.json").read_text(encoding="utf-8"))
        self.max_characters_per_token = config["max_characters_per_token"]
        self.session = onnxruntime.InferenceSession(
            str(folder / ONNX_FILE), session_options, providers=providers or ["CPUExecutionProvider"]
        )
        self.input_names = [value.name for value in self.session.get_inputs()]
        self.output_names = [value.name for value in self.session.get_outputs()]

    def __call__(self, input_ids, attention_mask, **inputs) -> dict[str, np.ndarray]:
        """
        `input_ids` `(batch, positions, max_characters_per_token)`, `attention_mask` `(batch, positions)` with each
        row's valid positions first, and the graph's other inputs (`word_input_ids`, `token_type_ids`) by name.
        """
        input_ids, attention_mask = np.asarray(input_ids, dtype=np.int64), np.asarray(attention_mask, dtype=np.int64)
        if input_ids.ndim != 3 or input_ids.shape[-1] != self.max_characters_per_token:
            raise ValueError(
                f"input_ids must have shape (batch, positions, {self.max_characters_per_token}), got {input_ids.shape}"
            )
        if input_ids.shape[0] == 0 or input_ids.shape[1] == 0:
            raise ValueError(f"cannot run on an empty batch (input_ids of shape {input_ids.shape})")
        feeds = {"input_ids": input_ids, "attention_mask": attention_mask}
        for name, value in inputs.items():
            if name not in self.input_names:
                raise ValueError(f"this graph takes {', '.join(self.input_names)}; {name} is not one of them")
            feeds[name] = np.asarray(value, dtype=np.int64)
        for name, value in feeds.items():
            if name != "input_ids" and value.shape != input_ids.shape[:2]:
                raise ValueError(f"{name} must have shape {input_ids.shape[:2]} (batch, positions), got {value.shape}")
        missing = [name for name in self.input_names if name not in feeds]
        if missing:
            raise ValueError(f"this graph also takes {', '.join(missing)} (from the tokenizer); none was given")
        valid = attention_mask.astype(bool)
        if not np.array_equal(valid, np.arange(valid.shape[1]) < valid.sum(axis=1, keepdims=True)):
            raise ValueError("attention_mask must mark each row's valid positions first (right padding)")
        return dict(zip(self.output_names, self.session.run(self.output_names, feeds)))


__all__ = ["ElmoForOnnx", "ElmoOnnxSession", "export_onnx", "quantize_int8"]
