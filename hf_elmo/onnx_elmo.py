"""ELMo in ONNX: one exported graph for any batch size and sentence length, run by ONNX Runtime.

[`export_onnx`] writes a folder as Optimum's exports are laid out: `model.onnx` beside `config.json` and the
tokenizer files. The graph is traced from the model itself ([`ElmoForOnnx`] only names its inputs and outputs): while
`torch.export` traces, the model runs its reference code, each LSTM as one scan over the positions
(`modeling_elmo.scan_over_steps`), which `torch.onnx.export(dynamo=True)` turns into an ONNX `Scan`: the recurrence
stays a loop in the graph instead of being unrolled into a fixed number of steps, so the positions axis stays
dynamic. A head exports as it computes, and as it declares its inputs and outputs, with no code here of its own.
[`ElmoOnnxSession`] runs an exported folder with the input checks of the model.

Inputs: `input_ids` `(batch, positions, max_characters_per_token)` int64 and `attention_mask` `(batch, positions)`
int64 (right padding), then those the model also reads (`ElmoPreTrainedModel.graph_input_names`, from the
`graph_inputs` its classes declare: `word_input_ids` for models with a word-embedding input, `word_vector_ids` for
heads with word vectors, `token_type_ids` for pair classifiers and question answering), each `(batch, positions)`.
Outputs: the `graph_outputs` its class declares: for `ElmoModel`, `last_hidden_state` `(batch, positions,
2 * projection_dim)` and `hidden_states`, the `n_layers + 1` layers stacked on a first axis
(`torch.stack(output.hidden_states)`); for a head, what it computes without labels (`logits`).
"""

import contextlib
import inspect
import logging
import os
import shutil
import warnings
from pathlib import Path

import numpy as np
import torch
from torch import nn

from .configuration_elmo import ElmoConfig
from .errors import ElmoConversionError, first_line
from .folders import atomic_directory
from .loading import load_model_and_tokenizer
from .modeling_elmo import ElmoPreTrainedModel, check_ids_in_table
from .tokenization_elmo import ElmoTokenizer

ONNX_FILE = "model.onnx"
# The onnx extra's requirements (pyproject.toml), named rather than the extra: hf_elmo is on no package index.
ONNX_INSTALL_HINT = 'pip install "onnx>=1.23" "onnxruntime>=1.32" "onnxscript>=0.7"'


class ElmoForOnnx(nn.Module):
    """
    An ELMo model as the export traces it: called with the graph's inputs by name (`input_names`, the model's
    `graph_input_names`), it returns the model's `graph_outputs` as a tuple of tensors, named by `output_names` (the
    biLM's layers stacked into one tensor).

    Its `forward` takes exactly those inputs (`torch.export` binds the graph's inputs by the signature of `forward`):
    the signature is built from the names the model declares, so a head's new input is a graph input with no code
    here.
    """

    def __init__(self, model: ElmoPreTrainedModel):
        super().__init__()
        self.model = model
        self.config = model.config
        self.input_names = model.graph_input_names
        self.output_names = list(model.graph_outputs)
        signature = inspect.Signature(
            [inspect.Parameter(name, inspect.Parameter.POSITIONAL_OR_KEYWORD) for name in self.input_names]
        )

        def forward(*args: torch.Tensor, **kwargs: torch.Tensor) -> tuple[torch.Tensor, ...]:
            return self.run(signature.bind(*args, **kwargs).arguments)

        forward.__signature__ = signature
        self.forward = forward

    def run(self, inputs: dict[str, torch.Tensor]) -> tuple[torch.Tensor, ...]:
        """The outputs of the model on `inputs` (every one of `input_names`, by name), in `output_names`' order."""
        layers_wanted = "hidden_states" in self.output_names
        output = self.model(**inputs, output_hidden_states=layers_wanted, return_dict=True)
        stacked = {"hidden_states": torch.stack(output.hidden_states)} if layers_wanted else {}
        return tuple(stacked.get(name, output.get(name)) for name in self.output_names)


def example_inputs(forward: ElmoForOnnx, tokenizer: ElmoTokenizer) -> dict[str, torch.Tensor]:
    """
    Two sentences of different lengths, which the export traces (no size of them is kept in the graph): each input
    the tokenizer gives, and zeros `(batch, positions)` for the others (`token_type_ids` of single sentences, or a
    head's own input): no value of them is kept in the graph either.
    """
    encoding = tokenizer([["a", "bc", "def"], ["g"]], is_split_into_words=True, padding=True, return_tensors="pt")
    zeros = torch.zeros_like(encoding["attention_mask"])
    return {name: encoding[name] if name in encoding else zeros.clone() for name in forward.input_names}


def load_for_export(model_dir: str | os.PathLike) -> tuple[ElmoForOnnx, ElmoTokenizer]:
    """
    The model of a folder or a bundled model's name, as `loading.load_model_and_tokenizer` loads it (the head its
    `config.architectures` names, else the biLM), in float32, and its tokenizer.
    """
    try:
        model, tokenizer = load_model_and_tokenizer(model_dir, hub=False, dtype=torch.float32)
    except ValueError as error:
        raise ElmoConversionError(str(error)) from error
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
        raise ElmoConversionError(f"ONNX export needs the onnx extra: {ONNX_INSTALL_HINT}") from error
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
            raise ImportError(f"running an exported model needs the onnx extra: {ONNX_INSTALL_HINT}") from error
        folder = Path(folder)
        if not (folder / ONNX_FILE).is_file():
            raise ValueError(f"{folder} holds no {ONNX_FILE}; write it with: hf-elmo export --format onnx")
        config = ElmoConfig.from_pretrained(folder)
        self.max_characters_per_token = config.max_characters_per_token
        # The rows of the table each id input looks up, checked before the graph runs (its lookup would fail inside).
        self.table_rows = {
            "input_ids": config.alphabet.table_rows,
            "word_input_ids": config.word_input_vocab_size,
            "word_vector_ids": config.word_vector_vocab_size,
        }
        self.session = onnxruntime.InferenceSession(
            str(folder / ONNX_FILE), session_options, providers=providers or ["CPUExecutionProvider"]
        )
        self.input_names = [value.name for value in self.session.get_inputs()]
        self.output_names = [value.name for value in self.session.get_outputs()]

    def __call__(self, input_ids, attention_mask, **inputs) -> dict[str, np.ndarray]:
        """
        `input_ids` `(batch, positions, max_characters_per_token)`, `attention_mask` `(batch, positions)` with each
        row's valid positions first, and the graph's other inputs (`word_input_ids`, `word_vector_ids`,
        `token_type_ids`) by name.
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
        for name, value in feeds.items():
            if self.table_rows.get(name) is not None:
                check_ids_in_table(name, torch.from_numpy(value), self.table_rows[name])
        return dict(zip(self.output_names, self.session.run(self.output_names, feeds)))


__all__ = ["ElmoForOnnx", "ElmoOnnxSession", "export_onnx", "quantize_int8"]
