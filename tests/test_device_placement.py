"""
Every model class runs forward and backward on a device that is not the CPU (`fake_device`: CPU values reported on
`meta`), so that a tensor made on the CPU by mistake fails, and the transfers to the host are where the tables below
say, each once per call of the code that needs host values: none inside a recurrence's steps.

Mixed precision is left to CUDA: autocast has no kernels for `meta`. `test_mixed_precision_training_on_gpu` (`pytest
-m gpu`) and the bf16 runs of `benchmarks/gpu_check.sh` train under it there.
"""

import collections
import copy

import pytest
import torch
from fake_device import FAKE_DEVICE, DeviceTensor, FakeDevice
from utils import FLOAT32_TOLERANCE, GRADIENT_TOLERANCE, assert_gradients_match, tiny_config

from hf_elmo import (
    ElmoForPreTraining,
    ElmoForQuestionAnswering,
    ElmoForSequenceClassification,
    ElmoForTokenClassification,
    ElmoModel,
    ElmoTokenizer,
)

SENTENCES = [["a", "short", "one"], ["the", "longest", "sentence", "of", "the", "three", "here"], ["two", "words"]]
N_LAYERS = 2
BIO_LABELS = {0: "O", 1: "B-X", 2: "I-X"}

# Where the biLM's forward brings values to the host, as `(function, operation): count`: a value ("_to_copy" of a
# `tolist()`, "_local_scalar_dense" of an `int()`, "equal") or a size that depends on values ("nonzero",
# "unique_dim", indexing with a boolean mask), for which the host waits for the device.
BILM_FORWARD = {
    # the right-padding check (`torch.equal`), then whether any character id is outside the character table
    ("modeling_elmo.check_inputs", "equal.default"): 1,
    ("modeling_elmo.check_ids_in_table", "_local_scalar_dense.default"): 1,
    # the distinct words: the largest id (how many bits a key packs), then the first row of each distinct key
    ("kernels_char_cnn.distinct_rows_by_packed_keys", "_local_scalar_dense.default"): 1,
    ("kernels_char_cnn.distinct_rows_by_packed_keys", "index.Tensor"): 1,
}
# The packing of the valid steps (`PackedSteps.of`): its one transfer, a copy of the mask from which the host works out
# the layout. Inference packs once per layer and direction; training once per layer, for both directions.
PACKING = ("kernels_lstm_inference.PackedSteps.of", "_to_copy.default")
# Inference's first layer projects each distinct word vector once (`torch.unique`), in each direction.
DISTINCT_WORD_VECTORS = ("kernels_lstm_inference.lstm_layer_in_place", "unique_dim.default")
INFERENCE_FORWARD = {**BILM_FORWARD, PACKING: 2 * N_LAYERS, DISTINCT_WORD_VECTORS: 2}
TRAINING_FORWARD = {**BILM_FORWARD, PACKING: N_LAYERS}
# A task BiLSTM packs the rows by their lengths, which PyTorch takes on the CPU; unpacking, PyTorch's
# `pad_packed_sequence` copies the rows' order to the CPU too, to order the lengths it returns.
TASK_BILSTM = {("modeling_elmo.task_bilstm_packed", "_to_copy.default"): 2}
# Pre-training keeps each direction's predicted positions (boolean masks on its states and its targets) and counts
# them (to split the losses), and checks the smallest and largest word id; the gradient of each kept selection of
# states reads its mask again.
PRETRAINING_LOSS = {
    ("modeling_elmo.ElmoForPreTraining._direction_losses", "index.Tensor"): 4,
    ("modeling_elmo.ElmoForPreTraining._direction_losses", "_local_scalar_dense.default"): 4,
}
PRETRAINING_BACKWARD = {("backward of IndexBackward0", "index_put.default"): 2}


def merged(*tables: dict) -> collections.Counter:
    """The counts of `tables` added up."""
    total = collections.Counter()
    for table in tables:
        total.update(table)
    return total


# name: (model class, config overrides, expected forward and backward transfers in training mode)
CASES = {
    "ElmoModel": (ElmoModel, {}, TRAINING_FORWARD, {}),
    "sequence head, frozen biLM": (ElmoForSequenceClassification, {}, INFERENCE_FORWARD, {}),
    "sequence head, biLM trained, task BiLSTM": (
        ElmoForSequenceClassification,
        {"freeze_bilm": False, "task_lstm_dim": 4, "pooling": "mean_max"},
        merged(TRAINING_FORWARD, TASK_BILSTM),
        {},
    ),
    "token head, frozen biLM": (ElmoForTokenClassification, {}, INFERENCE_FORWARD, {}),
    "token head, CRF, biLM trained": (
        ElmoForTokenClassification,
        {"use_crf": True, "crf_constraint": "BIO", "freeze_bilm": False, "id2label": BIO_LABELS},
        TRAINING_FORWARD,
        {},
    ),
    "question-answering head, frozen biLM": (ElmoForQuestionAnswering, {}, INFERENCE_FORWARD, {}),
    "question-answering head, biLM trained, modeling BiLSTM": (
        ElmoForQuestionAnswering,
        {"freeze_bilm": False, "task_lstm_dim": 4},
        merged(TRAINING_FORWARD, TASK_BILSTM, TASK_BILSTM),
        {},
    ),
    "pre-training, sampled softmax": (
        ElmoForPreTraining,
        {"lstm_dropout": 0.1},
        merged(TRAINING_FORWARD, PRETRAINING_LOSS),
        PRETRAINING_BACKWARD,
    ),
}


def make_batch(model_class) -> dict[str, torch.Tensor]:
    """Three sentences of different lengths, padded, with labels for `model_class`; for a question-answering head,
    each one's first word as a question and the rest as its context, with an answer in each context."""
    tokenizer = ElmoTokenizer(max_characters_per_token=20)
    if model_class is ElmoForQuestionAnswering:
        pairs = [sentence[:1] for sentence in SENTENCES], [sentence[1:] for sentence in SENTENCES]
        batch = tokenizer(*pairs, is_split_into_words=True, padding=True, return_tensors="pt")
        # `<S> q </S> <S>` come first: the context's words start at position 4.
        return {
            **{name: batch[name] for name in ("input_ids", "attention_mask", "token_type_ids")},
            "start_positions": torch.tensor([4, 5, 4]),
            "end_positions": torch.tensor([5, 8, 4]),
        }
    batch = tokenizer(SENTENCES, is_split_into_words=True, padding=True, return_tensors="pt")
    inputs = {"input_ids": batch["input_ids"], "attention_mask": batch["attention_mask"]}
    generator = torch.Generator().manual_seed(0)
    positions = inputs["attention_mask"].shape
    if model_class is ElmoForSequenceClassification:
        inputs["labels"] = torch.randint(0, 3, positions[:1], generator=generator)
    elif model_class is ElmoForTokenClassification:
        inputs["labels"] = torch.randint(0, 3, positions, generator=generator)
    elif model_class is ElmoForPreTraining:
        labels = torch.randint(0, 11, positions, generator=generator)
        inputs["labels"] = labels.masked_fill(inputs["attention_mask"] == 0, -100)
    return inputs


def loss_of(model, inputs) -> torch.Tensor:
    """The model's loss; for `ElmoModel`, a sum over its top layer and final state, which the backward reads."""
    if isinstance(model, ElmoModel):
        output = model(**inputs, return_final_state=True)
        return output.last_hidden_state.square().sum() + sum(state.sum() for state in output.final_state)
    return model(**inputs).loss


def values(tensor: torch.Tensor) -> torch.Tensor:
    """The CPU values of a result: a device tensor's, read without recording a transfer."""
    return tensor.elem if isinstance(tensor, DeviceTensor) else tensor


def on_the_cpu(model, inputs, seed: int):
    """The loss and the gradients by parameter name of `model` on the CPU, the random draws (dropout, negative
    samples) seeded with `seed`."""
    torch.manual_seed(seed)
    loss = loss_of(model, inputs)
    loss.backward()
    return loss.detach(), {name: p.grad for name, p in model.named_parameters() if p.grad is not None}


@pytest.mark.parametrize("case", CASES)
def test_forward_and_backward_on_another_device(case):
    """
    Training mode, the loss and its backward, on the fake device: every tensor the model makes is on the device
    (a CPU tensor made by mistake raises where it meets one), the results are those of the CPU, and the transfers to
    the host are those of the tables above.
    """
    model_class, overrides, expected_forward, expected_backward = CASES[case]
    torch.manual_seed(0)
    config = tiny_config(n_layers=N_LAYERS, num_labels=3, word_vocab_size=11, n_negative_samples=4, **overrides)
    cpu_model = model_class(config).train()
    model = copy.deepcopy(cpu_model)
    cpu_inputs = make_batch(model_class)
    cpu_loss, cpu_gradients = on_the_cpu(cpu_model, cpu_inputs, seed=1)

    with FakeDevice() as device:
        model.to(FAKE_DEVICE)
        inputs = {name: tensor.to(FAKE_DEVICE) for name, tensor in cpu_inputs.items()}
        assert {p.device for p in model.parameters()} == {FAKE_DEVICE}
        device.take_syncs()
        torch.manual_seed(1)
        loss = loss_of(model, inputs)
        forward = device.take_syncs()
        loss.backward()
        backward = device.take_syncs()

    assert loss.device == FAKE_DEVICE
    assert forward == expected_forward
    assert backward == expected_backward
    assert abs(values(loss).item() - cpu_loss.item()) <= FLOAT32_TOLERANCE * max(1.0, abs(cpu_loss.item()))
    gradients = {name: p.grad for name, p in model.named_parameters() if p.grad is not None}
    assert all(gradient.device == FAKE_DEVICE for gradient in gradients.values())
    assert_gradients_match({name: values(g) for name, g in gradients.items()}, cpu_gradients, **GRADIENT_TOLERANCE)


def test_elmo_model_inference_on_another_device():
    """The fast inference path (no gradients) gives the CPU's layers and final state, with the transfers of the
    inference table: one packing per layer and direction."""
    torch.manual_seed(0)
    cpu_model = ElmoModel(tiny_config(n_layers=N_LAYERS)).eval()
    model = copy.deepcopy(cpu_model)
    cpu_inputs = make_batch(ElmoModel)
    with torch.no_grad():
        expected = cpu_model(**cpu_inputs, output_hidden_states=True, return_final_state=True)
    with FakeDevice() as device, torch.no_grad():
        model.to(FAKE_DEVICE)
        inputs = {name: tensor.to(FAKE_DEVICE) for name, tensor in cpu_inputs.items()}
        device.take_syncs()
        output = model(**inputs, output_hidden_states=True, return_final_state=True)
        assert device.take_syncs() == INFERENCE_FORWARD
    for layer, expected_layer in zip(
        (*output.hidden_states, *output.final_state), (*expected.hidden_states, *expected.final_state), strict=True
    ):
        assert layer.device == FAKE_DEVICE
        assert (values(layer) - expected_layer).abs().max().item() <= FLOAT32_TOLERANCE


def test_crf_decode_on_another_device():
    """The Viterbi path under BIO constraints, on the device, with no transfer to the host."""
    torch.manual_seed(0)
    config = tiny_config(num_labels=3, use_crf=True, crf_constraint="BIO", id2label=BIO_LABELS)
    cpu_model = ElmoForTokenClassification(config).eval()
    model = copy.deepcopy(cpu_model)
    cpu_inputs = make_batch(ElmoModel)
    with torch.no_grad():
        cpu_logits = cpu_model(**cpu_inputs).logits
        expected = cpu_model.decode(cpu_logits, cpu_inputs["attention_mask"])
    with FakeDevice() as device, torch.no_grad():
        model.to(FAKE_DEVICE)
        logits, mask = cpu_logits.to(FAKE_DEVICE), cpu_inputs["attention_mask"].to(FAKE_DEVICE)
        device.take_syncs()
        path = model.decode(logits, mask)
        assert device.take_syncs() == {}
    assert path.device == FAKE_DEVICE and torch.equal(values(path), expected)


def test_the_fake_device_catches_a_tensor_made_on_the_cpu():
    """The helper itself: a factory call without `device=` makes a CPU tensor, which fails where it meets a device
    tensor; one with it does not; each transfer to the host is recorded with its operation and caller."""
    with FakeDevice() as device:
        on_device = torch.ones(3, device=FAKE_DEVICE)
        with pytest.raises(RuntimeError, match="CPU tensors of shape \\(3,\\)"):
            on_device + torch.arange(3)
        assert (on_device + torch.arange(3, device=FAKE_DEVICE)).device == FAKE_DEVICE
        assert (on_device * torch.tensor(2.0)).device == FAKE_DEVICE  # a zero-dimensional CPU tensor is a scalar
        assert on_device.sum().item() == 3.0
        assert on_device.tolist() == [1.0, 1.0, 1.0]
        assert on_device.nonzero().device == FAKE_DEVICE
        assert device.take_syncs() == {
            ("test", "_local_scalar_dense.default"): 1,
            ("test", "_to_copy.default"): 1,
            ("test", "nonzero.default"): 1,
        }
