"""The ELMo layer (ElmoScalarMix) and the task heads: conventions of transformers, masking, freezing, loading."""

import copy

import pytest
import torch
from safetensors.torch import load_file
from torch import nn
from torch.nn import functional as F
from transformers import AutoModelForSequenceClassification, AutoModelForTokenClassification
from utils import FLOAT32_TOLERANCE, tiny_config, word_vocab_tokenizer

from hf_elmo import (
    ElmoForPreTraining,
    ElmoForQuestionAnswering,
    ElmoForSequenceClassification,
    ElmoForTokenClassification,
    ElmoScalarMix,
    ElmoTokenizer,
    bundled_model_path,
)
from hf_elmo.loading import read_weights_with_prefix
from hf_elmo.modeling_elmo import ElmoTaskBiLstm, word_vectors_from_softmax

SENTENCES = [["A", "short", "one", "."], ["The", "second", "sentence", "is", "a", "bit", "longer", "."]]


def encode(tokenizer, sentences, **kwargs):
    return tokenizer(sentences, is_split_into_words=True, padding=True, return_tensors="pt", **kwargs)


def make_head(cls, **overrides):
    torch.manual_seed(0)
    overrides.setdefault("num_labels", 3)
    return cls(tiny_config(**overrides)).eval()


# -- ElmoScalarMix ----------------------------------------------------------------------------------------------------


def test_scalar_mix_is_gamma_times_softmax_weighted_sum():
    torch.manual_seed(0)
    layers = tuple(torch.randn(2, 5, 6) for _ in range(3))
    mask = torch.ones(2, 5, dtype=torch.bool)
    mix = ElmoScalarMix(3)
    with torch.no_grad():
        mix.scalar_parameters.copy_(torch.tensor([0.5, -1.0, 2.0]))
        mix.gamma.fill_(1.7)
    weights = torch.softmax(torch.tensor([0.5, -1.0, 2.0]), dim=0)
    expected = 1.7 * sum(w * h for w, h in zip(weights, layers))
    torch.testing.assert_close(mix(layers, mask), expected)


def test_scalar_mix_layer_norm_uses_valid_positions_only():
    torch.manual_seed(0)
    layers = tuple(torch.randn(2, 6, 4) for _ in range(2))
    mask = torch.tensor([[1, 1, 1, 1, 0, 0], [1, 1, 1, 1, 1, 1]], dtype=torch.bool)
    mix = ElmoScalarMix(2, layer_norm=True, fixed_weights=[0.0, -1e4])  # all weight on layer 0
    out = mix(layers, mask)
    valid = out[0, :4]
    torch.testing.assert_close(valid.mean(), torch.tensor(0.0), atol=1e-6, rtol=0)
    torch.testing.assert_close(valid.var(unbiased=False), torch.tensor(1.0), atol=1e-5, rtol=0)
    assert torch.all(out[0, 4:] == 0)
    changed = tuple(layer.clone() for layer in layers)
    for layer in changed:
        layer[0, 4:] = 1000.0  # padding must not influence the statistics
    torch.testing.assert_close(mix(changed, mask)[0, :4], valid)


def test_scalar_mix_fixed_weights_do_not_train_and_penalty_is_l2():
    fixed = ElmoScalarMix(3, fixed_weights=[1.0, 2.0, 3.0], l2_coefficient=0.5)
    assert not fixed.scalar_parameters.requires_grad and fixed.gamma.requires_grad
    assert fixed.penalty().item() == 0.0
    trainable = ElmoScalarMix(3, l2_coefficient=0.5)
    with torch.no_grad():
        trainable.scalar_parameters.copy_(torch.tensor([1.0, -2.0, 0.5]))
    torch.testing.assert_close(trainable.penalty(), torch.tensor(0.5 * (1 + 4 + 0.25)))
    with pytest.raises(ValueError, match="fixed_weights"):
        ElmoScalarMix(3, fixed_weights=[1.0])


# -- heads ------------------------------------------------------------------------------------------------------------


def test_freeze_bilm_default_trains_only_mix_and_head(tiny_tokenizer):
    model = make_head(ElmoForSequenceClassification).train()
    trainable = {name for name, p in model.named_parameters() if p.requires_grad}
    assert trainable and not any(name.startswith("elmo.") for name in trainable)
    assert "task_encoder.mix.scalar_parameters" in trainable and "classifier.weight" in trainable
    model(**encode(tiny_tokenizer, SENTENCES), labels=torch.tensor([0, 2])).loss.backward()
    assert all(p.grad is None for p in model.elmo.parameters())
    assert model.task_encoder.mix.scalar_parameters.grad is not None

    unfrozen = make_head(ElmoForSequenceClassification, freeze_bilm=False)
    assert all(p.requires_grad for p in unfrozen.parameters())


@pytest.mark.parametrize(
    "options",
    [
        dict(pooling="mean"),
        dict(pooling="max", task_lstm_dim=5),
        dict(pooling="mean_max", concat_token_representation=True, mix_layer_norm=True),
    ],
)
def test_sequence_logits_do_not_depend_on_padding(tiny_tokenizer, options):
    model = make_head(ElmoForSequenceClassification, **options)
    with torch.no_grad():
        together = model(**encode(tiny_tokenizer, SENTENCES)).logits
        alone = model(**encode(tiny_tokenizer, SENTENCES[:1])).logits
    torch.testing.assert_close(together[:1], alone, atol=FLOAT32_TOLERANCE, rtol=0)
    assert together.shape == (2, 3)


def test_sequence_problem_types_follow_transformers(tiny_tokenizer):
    batch = encode(tiny_tokenizer, SENTENCES)
    single = make_head(ElmoForSequenceClassification)
    labels = torch.tensor([2, 0])
    out = single(**batch, labels=labels)
    assert single.config.problem_type == "single_label_classification"
    torch.testing.assert_close(out.loss, F.cross_entropy(out.logits, labels))

    multi = make_head(ElmoForSequenceClassification)
    targets = torch.tensor([[1.0, 0.0, 1.0], [0.0, 0.0, 1.0]])
    out = multi(**batch, labels=targets)
    assert multi.config.problem_type == "multi_label_classification"
    torch.testing.assert_close(out.loss, F.binary_cross_entropy_with_logits(out.logits, targets))

    regression = make_head(ElmoForSequenceClassification, num_labels=1)
    values = torch.tensor([0.3, -1.2])
    out = regression(**batch, labels=values)
    assert regression.config.problem_type == "regression" and out.logits.shape == (2, 1)
    torch.testing.assert_close(out.loss, F.mse_loss(out.logits.squeeze(-1), values))


def test_l2_penalty_is_added_to_the_loss(tiny_tokenizer):
    batch = encode(tiny_tokenizer, SENTENCES)
    labels = torch.tensor([1, 0])
    plain = make_head(ElmoForSequenceClassification)
    penalised = make_head(ElmoForSequenceClassification, mix_l2_coefficient=0.1)
    s = torch.tensor([0.5, -0.5, 1.0])
    for model in (plain, penalised):
        with torch.no_grad():
            model.task_encoder.mix.scalar_parameters.copy_(s)
    difference = penalised(**batch, labels=labels).loss - plain(**batch, labels=labels).loss
    torch.testing.assert_close(difference, 0.1 * (s**2).sum())


def test_sentence_pairs_pool_each_sentence(tiny_tokenizer):
    model = make_head(ElmoForSequenceClassification, pair_classification=True, pooling="mean_max")
    premises = [["A", "man", "sleeps", "."], ["Cats", "purr", "."]]
    batch = tiny_tokenizer(
        premises,
        [["Someone", "rests", "."], ["Dogs", "bark", "."]],
        is_split_into_words=True,
        padding=True,
        return_tensors="pt",
    )
    other = tiny_tokenizer(
        premises,
        [["Someone", "runs", "."], ["Dogs", "bark", "."]],
        is_split_into_words=True,
        padding=True,
        return_tensors="pt",
    )
    assert model.classifier.in_features == 4 * 2 * 16
    with torch.no_grad():
        logits, changed = model(**batch).logits, model(**other).logits
    assert not torch.allclose(logits[0], changed[0])
    torch.testing.assert_close(logits[1], changed[1])
    batch.pop("token_type_ids")
    with pytest.raises(ValueError, match="token_type_ids"):
        model(**batch)


def test_token_head_aligns_with_positions_and_ignores_boundaries(tiny_tokenizer):
    model = make_head(ElmoForTokenClassification, task_lstm_dim=4)
    batch = encode(tiny_tokenizer, SENTENCES)
    positions = batch["input_ids"].shape[1]
    torch.manual_seed(1)
    labels = torch.randint(0, 3, (2, positions))
    word_labels = labels.clone()
    for i in range(2):
        for position, word in enumerate(batch.word_ids(i)):
            if word is None:
                word_labels[i, position] = -100
    word_labels[1, 3] = -100
    labels[1, 3] = -100
    with torch.no_grad():
        out = model(**batch, labels=labels)
        reference = model(**batch, labels=word_labels)
    assert out.logits.shape == (2, positions, 3)
    torch.testing.assert_close(out.loss, reference.loss)
    valid = word_labels != -100
    torch.testing.assert_close(out.loss, F.cross_entropy(out.logits[valid], word_labels[valid]))
    with torch.no_grad():
        alone = model(**encode(tiny_tokenizer, SENTENCES[:1])).logits
    torch.testing.assert_close(out.logits[0, : alone.shape[1]], alone[0], atol=FLOAT32_TOLERANCE, rtol=0)


@pytest.mark.parametrize(
    "cls,auto",
    [
        (ElmoForSequenceClassification, AutoModelForSequenceClassification),
        (ElmoForTokenClassification, AutoModelForTokenClassification),
    ],
)
def test_head_loads_bilm_from_base_checkpoint(tmp_path, tiny_model, cls, auto):
    tiny_model.save_pretrained(tmp_path)
    model = cls.from_pretrained(tmp_path, num_labels=4, freeze_bilm=False)
    assert model.config.num_labels == 4 and model.classifier.out_features == 4
    base = tiny_model.state_dict()
    for name, value in model.elmo.state_dict().items():
        assert torch.equal(value, base[name]), name
    assert all(p.requires_grad for p in model.parameters())
    assert torch.all(model.task_encoder.mix.scalar_parameters == 0) and model.task_encoder.mix.gamma.item() == 1.0
    assert torch.isfinite(model.classifier.weight).all() and model.classifier.weight.abs().sum() > 0
    frozen = auto.from_pretrained(tmp_path, num_labels=2)
    assert type(frozen) is cls
    assert not any(p.requires_grad for p in frozen.elmo.parameters())


@pytest.mark.parametrize("cls", [ElmoForSequenceClassification, ElmoForTokenClassification])
def test_fine_tuned_head_reloads_to_identical_predictions(tmp_path, tiny_tokenizer, cls):
    model = make_head(
        cls,
        task_lstm_dim=3,
        mix_weights=[0.0, 1.0, -1.0],
        freeze_bilm=False,
        id2label={0: "A", 1: "B", 2: "C"},
        label2id={"A": 0, "B": 1, "C": 2},
    )
    with torch.no_grad():
        for parameter in model.parameters():
            if parameter.requires_grad:
                parameter.add_(0.01 * torch.randn_like(parameter))
    batch = encode(tiny_tokenizer, SENTENCES)
    with torch.no_grad():
        expected = model(**batch).logits
    model.save_pretrained(tmp_path)
    reloaded = cls.from_pretrained(tmp_path).eval()
    assert reloaded.config.id2label == {0: "A", 1: "B", 2: "C"}
    assert not reloaded.task_encoder.mix.scalar_parameters.requires_grad
    with torch.no_grad():
        assert torch.equal(reloaded(**batch).logits, expected)


def test_bad_config_values_are_rejected():
    with pytest.raises(ValueError, match="pooling"):
        tiny_config(pooling="sum")
    with pytest.raises(ValueError, match="mix_weights"):
        tiny_config(mix_weights=[1.0])


# -- the token head's CRF ---------------------------------------------------------------------------------------------

BIO_LABELS = {0: "O", 1: "B-LOC", 2: "I-LOC"}


def make_crf_head(**overrides):
    options = dict(id2label=BIO_LABELS, label2id={label: i for i, label in BIO_LABELS.items()})
    return make_head(ElmoForTokenClassification, use_crf=True, **{**options, **overrides})


def word_mask(batch) -> torch.Tensor:
    return torch.tensor([[word is not None for word in batch.word_ids(i)] for i in range(len(batch["input_ids"]))])


def test_crf_head_starts_as_the_softmax_head_and_trains_its_transitions(tiny_tokenizer):
    # The CRF's transitions start at zero: the same logits (its emission scores) and the same loss as without it.
    batch = encode(tiny_tokenizer, SENTENCES)
    torch.manual_seed(1)
    labels = torch.randint(0, 3, batch["input_ids"].shape[:2])  # boundaries and padding hold labels too: ignored
    labels[1, 3] = -100
    plain = make_head(ElmoForTokenClassification, task_lstm_dim=4, id2label=BIO_LABELS)
    crf = make_crf_head(task_lstm_dim=4)
    with torch.no_grad():
        expected = plain(**batch, labels=labels)
    out = crf(**batch, labels=labels)
    assert torch.equal(out.logits, expected.logits) and out.logits.shape == (2, batch["input_ids"].shape[1], 3)
    torch.testing.assert_close(out.loss, expected.loss, atol=FLOAT32_TOLERANCE, rtol=0)
    out.loss.backward()
    assert crf.crf.transitions.grad.abs().sum() > 0 and crf.crf.start_transitions.grad.abs().sum() > 0


def test_crf_head_predicts_the_viterbi_path_with_marginal_probabilities(tiny_tokenizer):
    model = make_crf_head(crf_constraint="BIO")
    with torch.no_grad():
        model.crf.transitions.copy_(torch.tensor([[0.0, 3.0, 0.0], [-2.0, 0.0, 4.0], [1.0, 0.0, 2.0]]))
    batch = encode(tiny_tokenizer, SENTENCES)
    words = word_mask(batch)
    with torch.no_grad():
        logits = model(**batch).logits
    path = model.decode(logits, words)
    assert torch.equal(path, model.crf.decode(logits, words)) and (path[~words] == -100).all()
    assert not torch.equal(path[words], logits.argmax(dim=-1)[words])  # the transitions changed the prediction
    for row, keep in zip(path, words):
        tags = ["O"] + [BIO_LABELS[i] for i in row[keep].tolist()]
        assert all(not b.startswith("I-") or a != "O" for a, b in zip(tags, tags[1:]))  # legal BIO
    marginals = model.crf.marginals(logits, words)
    predicted = model.predict_word_labels(batch)
    for i, sentence in enumerate(predicted):
        positions = words[i].nonzero().squeeze(1)
        assert [label for label, _ in sentence] == [BIO_LABELS[path[i, p].item()] for p in positions]
        expected = [marginals[i, p, path[i, p]].item() for p in positions]
        assert [probability for _, probability in sentence] == pytest.approx(expected)
    plain = make_head(ElmoForTokenClassification, id2label=BIO_LABELS)
    with torch.no_grad():
        plain_logits = plain(**batch).logits
    assert torch.equal(plain.decode(plain_logits, words), plain_logits.argmax(dim=-1).masked_fill(~words, -100))


def test_crf_head_reloads_with_its_transitions_and_options(tmp_path, tiny_tokenizer, tiny_model):
    tiny_model.save_pretrained(tmp_path / "bilm")
    labels = dict(id2label=BIO_LABELS, label2id={label: i for i, label in BIO_LABELS.items()})
    model = AutoModelForTokenClassification.from_pretrained(
        tmp_path / "bilm", num_labels=3, use_crf=True, crf_constraint="BIO", **labels
    ).eval()
    assert type(model) is ElmoForTokenClassification and all((p == 0).all() for p in model.crf.parameters())
    assert model.crf.transitions.requires_grad
    with torch.no_grad():
        for parameter in (*model.crf.parameters(), *model.classifier.parameters()):
            parameter.add_(torch.randn_like(parameter))
    batch = encode(tiny_tokenizer, SENTENCES)
    with torch.no_grad():
        expected = model.decode(model(**batch).logits, word_mask(batch))
    model.save_pretrained(tmp_path / "tagger")
    assert (tmp_path / "tagger" / "crf_elmo.py").is_file()  # the code of remote loading imports it
    reloaded = ElmoForTokenClassification.from_pretrained(tmp_path / "tagger").eval()
    assert (reloaded.config.use_crf, reloaded.config.crf_constraint) == (True, "BIO")
    assert reloaded.crf.allowed == model.crf.allowed
    for name, value in model.crf.state_dict().items():
        assert torch.equal(reloaded.crf.state_dict()[name], value), name
    with torch.no_grad():
        assert torch.equal(reloaded.decode(reloaded(**batch).logits, word_mask(batch)), expected)


def test_crf_options_are_checked():
    with pytest.raises(ValueError, match="^crf_constraint='BIO' constrains the CRF: set use_crf=True too$"):
        make_head(ElmoForTokenClassification, crf_constraint="BIO", id2label=BIO_LABELS)
    with pytest.raises(ValueError, match="needs labels named O or B/I/E/S-TYPE in id2label, got 'U-LOC'$"):
        make_crf_head(crf_constraint="BIOES", id2label={0: "O", 1: "B-LOC", 2: "U-LOC"})


# -- word vectors beside the mix (the paper's [x_k ; ELMo_k] with a context-independent word vector) ------------------

# The words of SENTENCES but "longer" (an unknown word), and two words of no sentence.
WORDS = ["A", "short", "one", ".", "The", "second", "sentence", "is", "a", "bit", "never", "seen"]


@pytest.fixture
def word_tokenizer(tmp_path):
    return word_vocab_tokenizer(tmp_path, WORDS, word_vector_ids=True)


def make_word_vector_head(cls, tokenizer, **overrides):
    return make_head(cls, word_vector_dim=5, word_vector_vocab_size=tokenizer.word_vocab_size, **overrides)


def test_the_word_vector_comes_first_beside_the_token_representation_and_the_mix(word_tokenizer):
    model = make_word_vector_head(ElmoForSequenceClassification, word_tokenizer, concat_token_representation=True)
    assert model.task_encoder.output_dim == 5 + 8 + 16 and model.classifier.in_features == 5 + 8 + 16
    batch = encode(word_tokenizer, SENTENCES)
    mask = batch["attention_mask"].bool()
    with torch.no_grad():
        layers = model.elmo(batch["input_ids"], batch["attention_mask"], output_hidden_states=True).hidden_states
        features, _ = model.task_encoder(layers, mask, batch["word_vector_ids"])
        plain, _ = make_head(ElmoForSequenceClassification, concat_token_representation=True).task_encoder(
            layers, mask
        )
    vectors = model.task_encoder.word_vectors.weight[batch["word_vector_ids"]]
    assert torch.equal(features[..., :5], vectors * mask[..., None])  # zero at padding, as the layers
    assert (features[1, :, :5].abs().sum(-1) > 0).all() and (features[0, ~mask[0], :5] == 0).all()
    torch.testing.assert_close(features[..., 5:], plain, atol=FLOAT32_TOLERANCE, rtol=0)


@pytest.mark.parametrize("options", [dict(), dict(task_lstm_dim=4, pooling="mean_max")])
def test_the_word_vectors_change_the_logits_and_train_with_a_frozen_bilm(word_tokenizer, options):
    model = make_word_vector_head(ElmoForSequenceClassification, word_tokenizer, **options)
    batch = encode(word_tokenizer, SENTENCES)
    with torch.no_grad():
        logits = model(**batch).logits
        alone = model(**encode(word_tokenizer, SENTENCES[:1])).logits
        zeroed = copy.deepcopy(model)
        zeroed.task_encoder.word_vectors.weight.zero_()
        without_vectors = zeroed(**batch).logits
    torch.testing.assert_close(logits[:1], alone, atol=FLOAT32_TOLERANCE, rtol=0)  # padding changes nothing
    assert (logits - without_vectors).abs().min() > FLOAT32_TOLERANCE  # every row reads its words' vectors
    model.train()
    assert model.config.freeze_bilm and model.task_encoder.word_vectors.weight.requires_grad
    model(**batch, labels=torch.tensor([0, 2])).loss.backward()
    gradient = model.task_encoder.word_vectors.weight.grad
    assert (gradient[batch["word_vector_ids"][word_mask(batch)]].abs().sum(-1) > 0).all()
    assert (gradient[[word_tokenizer.word_to_id("never"), word_tokenizer.word_to_id("seen")]] == 0).all()
    assert all(p.grad is None for p in model.elmo.parameters())


@pytest.mark.parametrize("cls", [ElmoForSequenceClassification, ElmoForTokenClassification, ElmoForQuestionAnswering])
def test_every_head_reads_its_word_vectors_and_names_them_a_graph_input(word_tokenizer, cls):
    model = make_word_vector_head(cls, word_tokenizer)
    assert model.graph_input_names[:3] == ["input_ids", "attention_mask", "word_vector_ids"]
    assert "word_vector_ids" not in make_head(cls).graph_input_names
    batch = word_tokenizer(
        ["A short one", "The bit"], ["a sentence", "is a bit longer ."], padding=True, return_tensors="pt"
    )
    with torch.no_grad():
        output = model(**batch)
        batch["word_vector_ids"] = torch.full_like(batch["word_vector_ids"], word_tokenizer.word_to_id("bit"))
        other = model(**batch)
    assert not torch.allclose(output[0], other[0])


def test_word_vector_ids_missing_unexpected_misshapen_or_out_of_the_table_are_one_line(word_tokenizer):
    model = make_word_vector_head(ElmoForTokenClassification, word_tokenizer)
    batch = encode(word_tokenizer, SENTENCES)
    ids = batch.pop("word_vector_ids")
    missing = r"^this head also reads word_vector_ids \(config.word_vector_dim\); none were given: create its "
    with pytest.raises(ValueError, match=missing + "ElmoTokenizer with word_vector_ids=True$"):
        model(**batch)
    with pytest.raises(ValueError, match=r"^word_vector_ids shape \(2, 9\) does not match input_ids \(2, 10\)$"):
        model(**batch, word_vector_ids=ids[:, :-1])
    rows = model.config.word_vector_vocab_size
    with pytest.raises(ValueError, match=rf"^word_vector_ids holds ids from 0 to {rows}, but this model's table has "):
        model(**batch, word_vector_ids=ids.masked_fill(ids == ids.max(), rows))
    with pytest.raises(TypeError, match=r"^word_vector_ids must hold integer ids, got torch.float32$"):
        model(**batch, word_vector_ids=ids.float())
    with pytest.raises(
        ValueError, match=r"^word_vector_ids were given, but this head has no word vectors \(config.word_vector_dim\)$"
    ):
        make_head(ElmoForTokenClassification)(**batch, word_vector_ids=ids)


def test_the_word_vectors_start_from_exactly_the_pretraining_softmax_and_reload(tmp_path, word_tokenizer):
    torch.manual_seed(0)
    vocab_size = word_tokenizer.word_vocab_size
    pretraining = ElmoForPreTraining(tiny_config(word_vocab_size=vocab_size, n_negative_samples=4))
    pretraining.save_pretrained(tmp_path / "pretrained")
    softmax = pretraining.softmax.weight
    table = word_vectors_from_softmax(read_weights_with_prefix(tmp_path / "pretrained", "softmax."))
    assert table.shape == (vocab_size, 8) and torch.equal(table, softmax)
    assert torch.equal(word_vectors_from_softmax(pretraining.state_dict()), softmax)
    model = ElmoForSequenceClassification.from_pretrained(
        tmp_path / "pretrained", num_labels=2, word_vector_dim=8, word_vector_vocab_size=vocab_size
    )
    model.init_word_vectors(table)
    assert torch.equal(model.task_encoder.word_vectors.weight, softmax)
    with torch.no_grad():
        model.task_encoder.word_vectors.weight.add_(1.0)  # the head's own copy: the softmax stays
    assert torch.equal(table, softmax) and not torch.equal(model.task_encoder.word_vectors.weight, softmax)
    model.save_pretrained(tmp_path / "classifier")
    reloaded = ElmoForSequenceClassification.from_pretrained(tmp_path / "classifier")
    assert torch.equal(reloaded.task_encoder.word_vectors.weight, model.task_encoder.word_vectors.weight)
    assert reloaded.task_encoder.word_vectors.weight.requires_grad and reloaded.config.freeze_bilm

    pretraining.elmo.save_pretrained(tmp_path / "bilm")  # a biLM-only folder holds no softmax
    assert read_weights_with_prefix(tmp_path / "bilm", "softmax.") == {}
    no_softmax = r"^no pre-training softmax \(softmax.weight\) among these weights: only a folder saved by hf-elmo "
    with pytest.raises(
        ValueError, match=no_softmax + r"pretrain \(ElmoForPreTraining\) holds one, a biLM-only folder"
    ):
        word_vectors_from_softmax(read_weights_with_prefix(tmp_path / "bilm", "softmax."))
    shapes = (
        rf"\({vocab_size}, 8\) \(word_vector_vocab_size, word_vector_dim\); the table given is \({vocab_size}, 4\)$"
    )
    with pytest.raises(ValueError, match=f"^the word vectors are {shapes}"):
        model.init_word_vectors(table[:, :4])
    with pytest.raises(ValueError, match="^this head has no word vectors to start: set config.word_vector_dim"):
        make_head(ElmoForSequenceClassification).init_word_vectors(table)
    with pytest.raises(ValueError, match=r"^word_vector_dim \(above 0\) and word_vector_vocab_size go together"):
        ElmoForSequenceClassification.from_pretrained(tmp_path / "pretrained", word_vector_dim=8)  # no vocabulary size


# -- the task BiLSTM --------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("lengths", [[5, 2, 1], [4, 4]], ids=["padded", "full"])
def test_the_task_bilstm_is_nn_lstm_over_each_rows_valid_positions_and_its_traced_form_agrees(lengths, monkeypatch):
    """
    `ElmoTaskBiLstm` is a bidirectional `nn.LSTM` run on each row's valid positions alone (the backward direction
    starts at a row's last word, not at its padding): its eager call and its traced graph's form (run eagerly, as
    while torch.export traces) equal `nn.LSTM` on each row alone within `FLOAT32_TOLERANCE`, zero at padding.
    """
    torch.manual_seed(0)
    lstm = ElmoTaskBiLstm(tiny_config(task_lstm_dim=5), 6).eval()
    features = torch.randn(len(lengths), max(lengths), 6)
    mask = torch.arange(max(lengths))[None, :] < torch.tensor(lengths)[:, None]
    with torch.no_grad():
        expected = torch.zeros(len(lengths), max(lengths), 10)
        for row, length in enumerate(lengths):
            expected[row, :length] = nn.LSTM.forward(lstm, features[row : row + 1, :length])[0][0]
        eager = lstm(features, mask)
        with monkeypatch.context() as tracing:
            tracing.setattr(torch.compiler, "is_exporting", lambda: True)
            traced = lstm(features, mask)
    assert (eager - expected).abs().max() <= FLOAT32_TOLERANCE
    assert (traced - expected).abs().max() <= FLOAT32_TOLERANCE


def test_the_bundled_classifier_loads_its_task_bilstm_unchanged():
    """The task BiLSTM keeps `nn.LSTM`'s parameter names: a folder saved before it loads every weight as written."""
    folder = bundled_model_path("ko-nsmc-sentiment")
    model = ElmoForSequenceClassification.from_pretrained(folder)
    assert isinstance(model.task_encoder.lstm, ElmoTaskBiLstm) and model.config.task_lstm_dim > 0
    saved = load_file(f"{folder}/model.safetensors")
    for name, value in model.task_encoder.lstm.named_parameters():
        assert torch.equal(value, saved[f"task_encoder.lstm.{name}"]), name


# -- what a head declares and takes -----------------------------------------------------------------------------------


def test_each_head_names_its_own_settings_after_the_shared_ones():
    """`head_settings` (what `hf-elmo info` prints of a head): labels first where it predicts them, the mix, word
    vectors and task BiLSTM every head shares, then its own."""
    assert make_head(ElmoForSequenceClassification, task_lstm_dim=2).head_settings() == {
        "labels": "3: LABEL_0, LABEL_1, LABEL_2",
        "layer mix": "learned (scalar mix)",
        "task LSTM": "2 per direction",
        "pooling": "mean",
    }
    crf = make_head(ElmoForTokenClassification, use_crf=True, num_labels=2, mix_layer_norm=True)
    assert list(crf.head_settings().items())[1:] == [
        ("layer mix", "learned (scalar mix), layer norm"),
        ("task LSTM", "none"),
        ("CRF", "yes"),
    ]
    settings = make_head(ElmoForQuestionAnswering, question_attention=False).head_settings()
    assert "labels" not in settings and settings["question"] == "exact match"


@pytest.mark.parametrize("cls", [ElmoForSequenceClassification, ElmoForTokenClassification, ElmoForQuestionAnswering])
def test_a_head_takes_transformers_options_and_refuses_any_other_keyword(cls):
    model = make_head(cls)
    batch = ElmoTokenizer(max_characters_per_token=20)([["a", "b"]], is_split_into_words=True, return_tensors="pt")
    options = {"output_hidden_states": True, "return_dict": False, "inputs_embeds": None, "output_attentions": None}
    with torch.no_grad():
        output = model(**batch, **options)
    assert isinstance(output, tuple) and len(output[-1]) == model.config.num_representation_layers
    with pytest.raises(TypeError, match=f"^{cls.__name__}.forward\\(\\) got an unexpected keyword argument 'label'$"):
        model(**batch, label=torch.tensor([0]))
