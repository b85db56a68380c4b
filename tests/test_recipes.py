"""
The two recipes of docs/architecture.md, followed to the letter with no file of the package edited: "Adding a head"
(a head defined here, registered as the recipe says, saves, reloads, trains under the stock `Trainer`, exports to
ONNX with an input of its own and is described by `hf-elmo info`) and "Adding a kernel" (a kernel registered for a
path and one for a device, each called there, the registry's own kernels and the reference elsewhere).
"""

import numpy as np
import pytest
import torch
from fake_device import FAKE_DEVICE, DeviceTensor, FakeDevice
from torch import nn
from torch.nn import functional as F
from trainer_data import sentence_dataset
from transformers import AutoModelForMultipleChoice, Trainer, TrainingArguments
from transformers.modeling_outputs import SequenceClassifierOutput
from utils import FLOAT32_TOLERANCE, random_batch, require, spy_on_kernels, tiny_config

import hf_elmo
from hf_elmo import ElmoModel, ElmoTokenizer, kernels_elmo
from hf_elmo.cli import main
from hf_elmo.modeling_elmo import AUTO_CLASSES, ElmoHeadModel, conv_max_pooled, word_positions

# -- Adding a head ----------------------------------------------------------------------------------------------------


class ElmoForEmphasisedClassification(ElmoHeadModel):
    r"""
    A toy head: a sentence classifier whose words are averaged with weights `1 + word_emphasis`, an input of its own
    that no other head reads (recipe step 1: it subclasses `ElmoHeadModel`, and declares what the rest reads).
    """

    description = "a toy classifier of sentences whose words weigh 1 + their emphasis"
    graph_inputs = {"word_emphasis": None}  # read by every model of this class

    def __init__(self, config):
        super().__init__(config)
        self.classifier = nn.Linear(self.task_encoder.output_dim, config.num_labels)
        self.post_init()

    def head_settings(self) -> dict[str, str]:
        return {**self.label_settings(), **super().head_settings(), "emphasis": "1 + word_emphasis per word"}

    def forward(
        self,
        input_ids,
        attention_mask=None,
        word_emphasis=None,
        labels=None,
        word_input_ids=None,
        word_vector_ids=None,
        **options,
    ):
        """Recipe step 2: `_encode`, the penalty added to the loss, an output class of transformers."""
        features, mask, hidden_states, penalty = self._encode(
            input_ids, attention_mask, word_input_ids, word_vector_ids, options
        )
        weights = word_positions(input_ids, mask, self.config).to(features.dtype)
        if word_emphasis is not None:
            weights = weights * (1 + word_emphasis.to(features.dtype))
        pooled = (features * weights[..., None]).sum(dim=1) / weights.sum(dim=1).clamp(min=1)[:, None]
        logits = self.classifier(pooled)
        loss = None if labels is None else F.cross_entropy(logits, labels) + penalty
        output = SequenceClassifierOutput(loss=loss, logits=logits, hidden_states=hidden_states)
        return self._as_return_dict_or_tuple(output, options.get("return_dict"))


@pytest.fixture
def registered_head(monkeypatch):
    """
    Recipe step 4: its Auto class in `AUTO_CLASSES`, which `import hf_elmo` registers (`register_auto_classes`,
    called again here since the package is imported already). An Auto class no ELMo head takes, so that the
    registration left in transformers' tables after the test gives no other test this class.
    """
    monkeypatch.setitem(AUTO_CLASSES, "AutoModelForMultipleChoice", ElmoForEmphasisedClassification)
    hf_elmo.register_auto_classes()
    return ElmoForEmphasisedClassification


@pytest.fixture
def head_folder(tmp_path, registered_head):
    """The toy head (random weights) saved with its tokenizer."""
    torch.manual_seed(0)
    head = registered_head(tiny_config(num_labels=2)).eval()
    head.save_pretrained(tmp_path / "head")
    ElmoTokenizer(max_characters_per_token=20).save_pretrained(tmp_path / "head")
    return tmp_path / "head"


def emphasised_batch(tokenizer):
    batch = tokenizer(["the cat sat", "a dog barked at the moon"], padding=True, return_tensors="pt")
    torch.manual_seed(1)
    batch["word_emphasis"] = torch.randint(0, 3, batch["attention_mask"].shape)
    return batch


def test_a_head_defined_outside_the_package_saves_reloads_and_loads_by_its_auto_class(head_folder, registered_head):
    tokenizer = ElmoTokenizer.from_pretrained(head_folder)
    batch = emphasised_batch(tokenizer)
    torch.manual_seed(0)
    head = registered_head(tiny_config(num_labels=2)).eval()
    loaded = AutoModelForMultipleChoice.from_pretrained(head_folder).eval()
    assert type(loaded) is registered_head
    with torch.no_grad():
        logits = head(**batch).logits
        torch.testing.assert_close(loaded(**batch).logits, logits, atol=FLOAT32_TOLERANCE, rtol=0)
        # the emphasis is read: without it the words weigh alike
        plain = head(batch["input_ids"], batch["attention_mask"]).logits
    assert not torch.allclose(plain, logits, atol=FLOAT32_TOLERANCE, rtol=0)
    assert (head_folder / "modules.json").exists() is False  # a head's folder names no sentence-transformers module
    with pytest.raises(TypeError, match="unexpected keyword argument 'emphasis'"):
        head(batch["input_ids"], emphasis=batch["word_emphasis"])


def test_a_head_defined_outside_the_package_trains_under_the_stock_trainer(head_folder, registered_head, tmp_path):
    tokenizer = ElmoTokenizer.from_pretrained(head_folder)
    model = registered_head.from_pretrained(head_folder)
    before = model.classifier.weight.detach().clone()
    arguments = TrainingArguments(
        output_dir=str(tmp_path / "run"),
        per_device_train_batch_size=8,
        max_steps=4,
        learning_rate=0.1,
        report_to="none",
        save_strategy="no",
        disable_tqdm=True,
        use_cpu=True,
    )
    dataset = sentence_dataset(tokenizer, 16, seed=0)
    trainer = Trainer(model=model, args=arguments, processing_class=tokenizer, train_dataset=dataset)
    result = trainer.train()
    assert result.global_step == 4 and np.isfinite(result.training_loss)
    assert not torch.equal(model.classifier.weight.detach(), before)


def test_a_head_defined_outside_the_package_exports_its_own_input(head_folder, registered_head, tmp_path):
    require("onnxruntime", reason='the ONNX tests need the onnx extra: pip install "hf_elmo[onnx]"')
    require("onnxscript", reason='the ONNX tests need the onnx extra: pip install "hf_elmo[onnx]"')
    from hf_elmo.onnx_elmo import ElmoOnnxSession, export_onnx

    export_onnx(head_folder, tmp_path / "onnx")
    session = ElmoOnnxSession(tmp_path / "onnx")
    assert session.input_names == ["input_ids", "attention_mask", "word_emphasis"]
    assert session.output_names == ["logits"]
    batch = emphasised_batch(ElmoTokenizer.from_pretrained(head_folder))
    with torch.no_grad():
        expected = registered_head.from_pretrained(head_folder).eval()(**batch).logits.numpy()
    logits = session(**{name: value.numpy() for name, value in batch.items()})["logits"]
    np.testing.assert_allclose(logits, expected, rtol=0, atol=FLOAT32_TOLERANCE)


def test_a_head_defined_outside_the_package_is_described_by_info(head_folder, capsys):
    capsys.readouterr()
    assert main(["info", str(head_folder)]) == 0
    out = capsys.readouterr().out
    assert "task: a toy classifier of sentences whose words weigh 1 + their emphasis\n" in out
    rows = [
        "head: ElmoForEmphasisedClassification",
        "labels: 2: LABEL_0, LABEL_1",
        "layer mix: learned (scalar mix)",
        "task LSTM: none",
        "emphasis: 1 + word_emphasis per word",
        "biLM: frozen (the mix and head train)",
    ]
    assert "\n".join(rows) + "\n" in out


# -- Adding a kernel --------------------------------------------------------------------------------------------------


def test_a_kernel_registered_for_a_path_and_one_for_a_device_are_the_ones_called(monkeypatch):
    """
    Recipe step 3: `register` a kernel for the "training" path of `ALL_CHARACTER_CONVOLUTIONS` (every device) and
    one for ("inference", the fake device's type). Each runs where its key says, and nowhere else: inference on the
    CPU keeps the registry's kernel, the reference path the reference.
    """
    registry = kernels_elmo.ALL_CHARACTER_CONVOLUTIONS
    ran = []

    def convolution_for_training(module, chars):
        ran.append("training")
        return conv_max_pooled(module, chars)

    def convolution_on_the_device(module, chars):
        ran.append(chars.device.type)
        return conv_max_pooled(module, chars)

    device_key = ("inference", FAKE_DEVICE.type)
    for key in ("training", device_key):  # monkeypatch puts back each entry (or its absence) after the test
        monkeypatch.setitem(registry, key, registry.get(key))
    registry.register("training", convolution_for_training)
    registry.register(device_key, convolution_on_the_device)

    calls = spy_on_kernels(monkeypatch)
    config = tiny_config()
    torch.manual_seed(0)
    model = ElmoModel(config)
    input_ids, mask = random_batch(config, [4, 2])
    convolutions = len(config.filters)

    def convolutions_called():
        chosen = [name for name in calls if "conv" in name or "pooled" in name]
        calls.clear()
        return chosen

    model(input_ids, attention_mask=mask).last_hidden_state.sum().backward()
    assert convolutions_called() == ["convolution_for_training"] * convolutions
    with torch.no_grad():
        expected = model(input_ids, attention_mask=mask).last_hidden_state
    assert convolutions_called() == ["max_pooled_by_matmul"] * convolutions  # inference on the CPU: unchanged
    monkeypatch.setattr(config, "recurrence_implementation", "reference")
    with torch.no_grad():
        model(input_ids, attention_mask=mask)
    assert convolutions_called() == ["conv_max_pooled"] * convolutions
    monkeypatch.setattr(config, "recurrence_implementation", "auto")
    assert ran == ["training"] * convolutions

    ran.clear()
    with FakeDevice(), torch.no_grad():
        model.to(FAKE_DEVICE)
        output = model(input_ids.to(FAKE_DEVICE), attention_mask=mask.to(FAKE_DEVICE)).last_hidden_state
    assert convolutions_called() == ["convolution_on_the_device"] * convolutions
    assert ran == [FAKE_DEVICE.type] * convolutions
    assert isinstance(output, DeviceTensor) and (output.elem - expected).abs().max().item() <= FLOAT32_TOLERANCE
