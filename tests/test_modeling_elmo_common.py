"""
transformers' conventions for ElmoModel, the three heads and ElmoForPreTraining, in the manner of its common test
mixins (`ModelTesterMixin`, `ConfigTester`, the loading checks of `test_modeling_utils.py`): one test per convention.
"""

import json

import pytest
import torch
from transformers.modeling_outputs import QuestionAnsweringModelOutput
from utils import FLOAT32_TOLERANCE, require, spy_on_kernels, tiny_config

from hf_elmo import (
    ElmoConfig,
    ElmoForPreTraining,
    ElmoForQuestionAnswering,
    ElmoForSequenceClassification,
    ElmoForTokenClassification,
    ElmoModel,
    ElmoTokenizer,
)

HEAD_CLASSES = (ElmoForSequenceClassification, ElmoForTokenClassification, ElmoForQuestionAnswering)
ALL_MODEL_CLASSES = (ElmoModel, *HEAD_CLASSES, ElmoForPreTraining)
# Each head's own layers (beside the biLM and the task encoder), which PEFT trains in full.
HEAD_LAYERS = {
    ElmoForSequenceClassification: ["classifier"],
    ElmoForTokenClassification: ["classifier"],
    ElmoForQuestionAnswering: ["attention", "qa_outputs"],
}


class ElmoModelTester:
    """A tiny config every model class accepts, a padded batch, and seeded models."""

    sentences = [["a", "short", "one"], ["a", "much", "longer", "sentence", "than", "the", "first"]]

    def __init__(self, **config_overrides):
        self.config_overrides = {
            "num_labels": 3,
            "word_vocab_size": 11,
            "n_negative_samples": 4,
            "mix_dropout": 0.0,
            **config_overrides,
        }
        self.tokenizer = ElmoTokenizer(max_characters_per_token=20)

    def get_config(self, **overrides) -> ElmoConfig:
        return tiny_config(**{**self.config_overrides, **overrides})

    def prepare_inputs(self, sentences=None, model_class=None) -> dict[str, torch.Tensor]:
        """A padded batch of `sentences`; for `ElmoForQuestionAnswering`, pairs of each one's first third (the
        question) and the rest (the context)."""
        sentences = sentences or self.sentences
        if model_class is ElmoForQuestionAnswering:
            pairs = (
                [sentence[: len(sentence) // 3] for sentence in sentences],
                [sentence[len(sentence) // 3 :] for sentence in sentences],
            )
            encoded = self.tokenizer(*pairs, is_split_into_words=True, padding=True, return_tensors="pt")
            return {name: encoded[name] for name in ("input_ids", "attention_mask", "token_type_ids")}
        encoded = self.tokenizer(sentences, is_split_into_words=True, padding=True, return_tensors="pt")
        return {"input_ids": encoded["input_ids"], "attention_mask": encoded["attention_mask"]}

    def create_model(self, model_class, seed: int = 0, **overrides):
        torch.manual_seed(seed)
        return model_class(self.get_config(**overrides)).eval()

    def main_output(self, model, **kwargs) -> torch.Tensor:
        """The first tensor of the model's output: top layer, logits, start logits, or pre-training's forward
        logits."""
        return model(**self.prepare_inputs(model_class=type(model)), **kwargs, return_dict=False)[0]


@pytest.fixture
def tester() -> ElmoModelTester:
    return ElmoModelTester()


def max_difference(first: torch.Tensor, second: torch.Tensor) -> float:
    return (first.detach() - second.detach()).abs().max().item()


# ---------------------------------------------------------------------------------------------------------------------
# Config
# ---------------------------------------------------------------------------------------------------------------------


def test_config_standard_names(tester):
    config = tester.get_config(num_hidden_layers=3)
    assert config.n_layers == config.num_hidden_layers == 3
    assert config.num_representation_layers == 4 and config.hidden_size == 2 * config.projection_dim
    config.num_hidden_layers = 1
    assert config.n_layers == 1
    assert ElmoConfig.from_dict(config.to_dict()).num_hidden_layers == 1
    with pytest.raises(ValueError, match="mix_weights"):
        tester.get_config(num_hidden_layers=3, mix_weights=[0.0, 0.0, 0.0])


def test_config_accepts_the_keys_another_model_type_writes(tmp_path):
    from transformers import BertConfig

    bert = BertConfig(hidden_size=96, num_hidden_layers=4, num_attention_heads=6, intermediate_size=37)
    bert.save_pretrained(tmp_path)
    config = ElmoConfig.from_pretrained(tmp_path)
    assert config.hidden_size == 2 * config.projection_dim  # derived, the foreign value ignored
    assert config.n_layers == 4 and config.num_attention_heads == 6
    saved = json.loads((tmp_path / "config.json").read_text())
    assert ElmoConfig(**saved).num_hidden_layers == 4


# ---------------------------------------------------------------------------------------------------------------------
# Outputs
# ---------------------------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("model_class", ALL_MODEL_CLASSES)
def test_hidden_states_count_and_shape(tester, model_class):
    model = tester.create_model(model_class, n_layers=3)
    inputs = tester.prepare_inputs(model_class=model_class)
    with torch.no_grad():
        hidden_states = model(**inputs, output_hidden_states=True).hidden_states
    assert len(hidden_states) == model.config.num_hidden_layers + 1
    for layer in hidden_states:
        assert layer.shape == (*inputs["attention_mask"].shape, model.config.hidden_size)


@pytest.mark.parametrize("model_class", ALL_MODEL_CLASSES)
def test_each_class_declares_its_description_and_graph_outputs(tester, model_class):
    """What export and `hf-elmo info` read of a class is declared on it: one line of description, and graph outputs
    that its output without labels holds, none missing."""
    assert "description" in vars(model_class) and model_class.description and "\n" not in model_class.description
    model = tester.create_model(model_class)
    with torch.no_grad():  # as the export asks for them: the layers where they are an output
        output = model(**tester.prepare_inputs(model_class=model_class), output_hidden_states=True)
    assert model_class.graph_outputs and all(output.get(name) is not None for name in model_class.graph_outputs)


@pytest.mark.parametrize("model_class", ALL_MODEL_CLASSES)
def test_hidden_states_follow_the_config(tester, model_class):
    inputs = tester.prepare_inputs(model_class=model_class)
    model = tester.create_model(model_class, output_hidden_states=True)
    with torch.no_grad():
        assert model(**inputs).hidden_states is not None
        assert model(**inputs, output_hidden_states=False).hidden_states is None
        model.config.output_hidden_states = False
        assert model(**inputs).hidden_states is None
        assert model(**inputs, output_hidden_states=True).hidden_states is not None


@pytest.mark.parametrize("model_class", ALL_MODEL_CLASSES)
def test_hidden_states_are_in_the_autograd_graph(tester, model_class):
    """`retain_grad()` on every returned layer gets a gradient from the output, as Captum's attributions need."""
    model = tester.create_model(model_class)
    model.enable_input_require_grads()  # the heads' biLM is frozen: the graph starts at the character table
    output = model(**tester.prepare_inputs(model_class=model_class), output_hidden_states=True)
    for layer in output.hidden_states:
        layer.retain_grad()
    main = output.last_hidden_state if model_class is ElmoModel else output[0]
    main.square().sum().backward()
    for index, layer in enumerate(output.hidden_states):
        assert layer.grad is not None and layer.grad.abs().sum() > 0, f"layer {index}"


@pytest.mark.parametrize("model_class", ALL_MODEL_CLASSES)
def test_tuple_outputs_equal_dict_outputs(tester, model_class):
    model = tester.create_model(model_class)
    inputs = tester.prepare_inputs(model_class=model_class)
    with torch.no_grad():
        as_dict = model(**inputs, output_hidden_states=True)
        as_tuple = model(**inputs, output_hidden_states=True, return_dict=False)
    assert len(as_tuple) == len(as_dict.to_tuple())
    assert torch.equal(as_tuple[0], as_dict.to_tuple()[0])
    assert all(torch.equal(first, second) for first, second in zip(as_tuple[-1], as_dict.hidden_states, strict=True))


def test_pretraining_without_labels_returns_the_softmax_logits(tester):
    model = tester.create_model(ElmoForPreTraining)
    inputs = tester.prepare_inputs()
    with torch.no_grad():
        output = model(**inputs)
    shape = (*inputs["attention_mask"].shape, model.config.word_vocab_size)
    assert output.loss is None and output.forward_logits.shape == output.backward_logits.shape == shape
    forward_log_probs, backward_log_probs = model.word_log_probs(**inputs)
    assert torch.equal(forward_log_probs, output.forward_logits.log_softmax(-1))
    assert torch.equal(backward_log_probs, output.backward_logits.log_softmax(-1))
    # In eval mode the loss is the exact softmax's: the logits give it back.
    labels = torch.randint(0, model.config.word_vocab_size, inputs["attention_mask"].shape)
    labels[inputs["attention_mask"] == 0] = -100
    with torch.no_grad():
        with_labels = model(**inputs, labels=labels)
    assert with_labels.forward_logits is None
    expected = torch.nn.functional.cross_entropy(
        output.forward_logits[:, :-1].flatten(0, 1), labels[:, 1:].flatten(), ignore_index=-100
    )
    assert abs(with_labels.forward_loss.item() - expected.item()) <= FLOAT32_TOLERANCE


@pytest.mark.parametrize("model_class", ALL_MODEL_CLASSES)
def test_attention_outputs_and_inputs_embeds_are_refused(tester, model_class):
    model = tester.create_model(model_class)
    inputs = tester.prepare_inputs(model_class=model_class)
    with torch.no_grad():
        model(**inputs, output_attentions=False, inputs_embeds=None)
        with pytest.raises(ValueError, match="no attention"):
            model(**inputs, output_attentions=True)
        with pytest.raises(ValueError, match="character ids"):
            model(**inputs, inputs_embeds=torch.zeros(2, 9, 8))


# ---------------------------------------------------------------------------------------------------------------------
# Input embeddings
# ---------------------------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("model_class", ALL_MODEL_CLASSES)
def test_input_embeddings_are_the_character_table(tester, model_class):
    model = tester.create_model(model_class)
    elmo = model if model_class is ElmoModel else model.elmo
    assert model.get_input_embeddings() is elmo.char_encoder.char_embedding
    with torch.no_grad():
        before = tester.main_output(model)
        table = torch.nn.Embedding(262, model.config.char_embedding_dim, padding_idx=0)
        model.set_input_embeddings(table)
        assert model.get_input_embeddings() is table
        assert max_difference(tester.main_output(model), before) > 0
    with pytest.raises(ValueError, match="character table"):
        model.set_input_embeddings(torch.nn.Embedding(300, model.config.char_embedding_dim))
    with pytest.raises(NotImplementedError, match="fixed alphabet"):
        model.resize_token_embeddings(300)


@pytest.mark.parametrize("model_class", HEAD_CLASSES)
def test_enable_input_require_grads(tester, model_class):
    """A frozen biLM gives outputs without a graph to the inputs until `enable_input_require_grads`, as PEFT uses."""
    model = tester.create_model(model_class)
    assert model.config.freeze_bilm
    inputs = tester.prepare_inputs(model_class=model_class)
    assert not model(**inputs, output_hidden_states=True).hidden_states[-1].requires_grad
    model.enable_input_require_grads()
    assert model(**inputs, output_hidden_states=True).hidden_states[-1].requires_grad


# ---------------------------------------------------------------------------------------------------------------------
# torch.export
# ---------------------------------------------------------------------------------------------------------------------


# ElmoForPreTraining's graph (its sampled softmax beside the biLM) takes the longest to trace: with the slow tests.
EXPORTED_CLASSES = [
    pytest.param(model_class, marks=pytest.mark.slow if model_class is ElmoForPreTraining else ())
    for model_class in ALL_MODEL_CLASSES
]


@pytest.mark.parametrize("model_class", EXPORTED_CLASSES)
def test_torch_export_agrees_with_eager(tester, model_class):
    model = tester.create_model(model_class)
    inputs = tester.prepare_inputs(model_class=model_class)
    exported = torch.export.export(model, (), inputs).module()
    # Other sentences of the same shapes: the program holds no value of the batch it was traced with.
    other = [["another", "one", "here"], ["and", "a", "second", "one", "of", "seven", "words"]]
    for batch in (inputs, tester.prepare_inputs(other, model_class)):
        with torch.no_grad():
            eager = model(**batch)[0]
        assert max_difference(exported(**batch)[0], eager) <= FLOAT32_TOLERANCE


def test_torch_export_of_a_head_with_a_task_bilstm_agrees_with_eager(tester):
    """The task BiLSTM reads each row's valid positions: traced as scans, on rows of other lengths too."""
    model = tester.create_model(ElmoForSequenceClassification, task_lstm_dim=3)
    inputs = tester.prepare_inputs()
    exported = torch.export.export(model, (inputs["input_ids"], inputs["attention_mask"])).module()
    other = tester.prepare_inputs([["another", "one", "here"], ["and", "a", "second", "one", "of", "seven", "words"]])
    for batch in (inputs, other):
        with torch.no_grad():
            eager = model(batch["input_ids"], batch["attention_mask"])[0]
        assert max_difference(exported(batch["input_ids"], batch["attention_mask"])[0], eager) <= FLOAT32_TOLERANCE


# ---------------------------------------------------------------------------------------------------------------------
# device_map, offloading, splitting
# ---------------------------------------------------------------------------------------------------------------------

OFFLOAD_MAPS = {
    "backward-stack-on-disk": {"char_encoder": "cpu", "bilm.forward_layers": "cpu", "bilm.backward_layers": "disk"},
    "character-encoder-on-disk": {"char_encoder": "disk", "bilm": "cpu"},
    "layers-alternating": {
        "char_encoder": "disk",
        "bilm.forward_layers.0": "disk",
        "bilm.forward_layers.1": "cpu",
        "bilm.backward_layers.0": "cpu",
        "bilm.backward_layers.1": "disk",
    },
}


def head_labels(model_class) -> dict[str, torch.Tensor]:
    """Labels for `ElmoModelTester.prepare_inputs()`: a class per sentence or per position, or an answer's span."""
    if model_class is ElmoForSequenceClassification:
        return {"labels": torch.tensor([0, 2])}
    if model_class is ElmoForQuestionAnswering:
        return {"start_positions": torch.tensor([4, 6]), "end_positions": torch.tensor([5, 8])}  # in the contexts
    return {"labels": torch.tensor([[0, 1, 2, 1, 0, 0, 0, 0, 0], [0, 1, 2, 1, 2, 1, 2, 1, 0]])}


def head_scores(output) -> torch.Tensor:
    """A head's scores: its logits, or the start logits of an answer."""
    return output.start_logits if isinstance(output, QuestionAnsweringModelOutput) else output.logits


def with_prefix(device_map: dict[str, str], prefix: str) -> dict[str, str]:
    return {f"{prefix}{name}": device for name, device in device_map.items()}


@pytest.mark.parametrize("name", OFFLOAD_MAPS)
def test_disk_offload_gives_the_outputs_of_the_whole_model(tester, tmp_path, name, monkeypatch):
    model = tester.create_model(ElmoModel)
    model.save_pretrained(tmp_path / "model")
    inputs = tester.prepare_inputs()
    with torch.no_grad():
        expected = model(**inputs, output_hidden_states=True, return_final_state=True)
    offloaded = ElmoModel.from_pretrained(
        tmp_path / "model", device_map=OFFLOAD_MAPS[name], offload_folder=tmp_path / "offload"
    ).eval()
    assert any(parameter.device.type == "meta" for parameter in offloaded.parameters())
    calls = spy_on_kernels(monkeypatch)
    with torch.no_grad():
        output = offloaded(**inputs, output_hidden_states=True, return_final_state=True)
    kernels = {"distinct_rows_by_packed_keys", "max_pooled_by_matmul", "lstm_layers_in_place"}
    assert set(calls) == {"check_inputs", *kernels}  # kernels, hooks and all
    for got, want in zip(
        (*output.hidden_states, *output.final_state), (*expected.hidden_states, *expected.final_state), strict=True
    ):
        assert max_difference(got, want) <= FLOAT32_TOLERANCE
    # Under autograd: the hand-written backward reads the loaded weights too.
    calls.clear()
    trained = offloaded(**inputs)
    trained.last_hidden_state.square().sum().backward()
    assert "lstm_layers_with_handwritten_backward" in calls
    assert max_difference(trained.last_hidden_state, expected.last_hidden_state) <= FLOAT32_TOLERANCE


@pytest.mark.parametrize("model_class", HEAD_CLASSES)
def test_disk_offload_of_a_head(tester, tmp_path, model_class):
    model = tester.create_model(model_class)
    model.save_pretrained(tmp_path / "model")
    inputs = tester.prepare_inputs(model_class=model_class)
    device_map = {
        **with_prefix(OFFLOAD_MAPS["layers-alternating"], "elmo."),
        "task_encoder": "disk",
        **dict.fromkeys(HEAD_LAYERS[model_class], "cpu"),
    }
    offloaded = model_class.from_pretrained(
        tmp_path / "model", device_map=device_map, offload_folder=tmp_path / "offload"
    ).eval()
    labels = head_labels(model_class)
    with torch.no_grad():
        expected, output = model(**inputs, **labels), offloaded(**inputs, **labels)
    assert max_difference(head_scores(output), head_scores(expected)) <= FLOAT32_TOLERANCE
    assert abs(output.loss.item() - expected.loss.item()) <= FLOAT32_TOLERANCE


def test_device_map_auto_with_small_max_memory(tester, tmp_path):
    """accelerate splits the model at `_no_split_modules`; what does not fit goes to disk."""
    model = tester.create_model(ElmoForPreTraining)
    model.save_pretrained(tmp_path / "model")
    size = sum(parameter.numel() * parameter.element_size() for parameter in model.parameters())
    offloaded = ElmoForPreTraining.from_pretrained(
        tmp_path / "model", device_map="auto", max_memory={"cpu": size // 3}, offload_folder=tmp_path / "offload"
    )
    offloaded.eval()
    assert "disk" in offloaded.hf_device_map.values()
    no_split = tuple(
        name for name, module in model.named_modules() if type(module).__name__ in model._no_split_modules
    )
    for placed in offloaded.hf_device_map:
        assert not any(placed.startswith(f"{name}.") for name in no_split), f"{placed} splits a no-split module"
    inputs = tester.prepare_inputs()
    with torch.no_grad():
        expected, output = model(**inputs), offloaded(**inputs)
    assert max_difference(output.forward_logits, expected.forward_logits) <= FLOAT32_TOLERANCE
    assert max_difference(output.backward_logits, expected.backward_logits) <= FLOAT32_TOLERANCE
    # The sampled softmax reads its candidates' rows inside the softmax's own call, where the weights are loaded.
    labels = torch.randint(0, 11, inputs["attention_mask"].shape)
    offloaded.train()(**inputs, labels=labels).loss.backward()


def test_no_split_modules_name_module_classes():
    model = ElmoForSequenceClassification(tiny_config())
    classes = {type(module).__name__ for module in model.modules()}
    assert set(model._no_split_modules) <= classes


# ---------------------------------------------------------------------------------------------------------------------
# PEFT
# ---------------------------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "model_class, task_type",
    [
        (ElmoForSequenceClassification, "SEQ_CLS"),
        (ElmoForTokenClassification, "TOKEN_CLS"),
        (ElmoForQuestionAnswering, "QUESTION_ANS"),
    ],
)
def test_peft_lora_on_a_head(tester, tmp_path, model_class, task_type):
    """LoRA on the character encoder's projection, the head's own layers trained in full; the adapter saves and
    reloads."""
    peft = require("peft")

    model = tester.create_model(model_class)
    lora = peft.LoraConfig(
        task_type=task_type,
        r=2,
        lora_alpha=4,
        target_modules=["projection"],
        modules_to_save=HEAD_LAYERS[model_class],
        init_lora_weights=False,
    )
    peft_model = peft.get_peft_model(model, lora)
    trainable = {name for name, parameter in peft_model.named_parameters() if parameter.requires_grad}
    assert trainable and all("lora_" in name or "modules_to_save" in name for name in trainable)
    inputs = tester.prepare_inputs(model_class=model_class)
    labels = head_labels(model_class)
    output = peft_model(**inputs, **labels)
    output.loss.backward()
    lora_gradients = [parameter.grad for name, parameter in peft_model.named_parameters() if "lora_A" in name]
    assert lora_gradients and all(gradient is not None and gradient.abs().sum() > 0 for gradient in lora_gradients)
    with torch.no_grad():
        for parameter in peft_model.parameters():
            if parameter.requires_grad:
                parameter.sub_(0.1 * parameter.grad)
        adapted = head_scores(peft_model(**inputs))
    peft_model.save_pretrained(tmp_path / "adapter")

    reloaded = peft.PeftModel.from_pretrained(tester.create_model(model_class), tmp_path / "adapter").eval()
    with torch.no_grad():
        reloaded_scores = head_scores(reloaded(**inputs))
        assert max_difference(reloaded_scores, adapted) <= FLOAT32_TOLERANCE
        assert max_difference(reloaded_scores, head_scores(tester.create_model(model_class)(**inputs))) > 1e-4
