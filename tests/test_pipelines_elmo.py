"""Sentence embeddings, transformers pipelines on saved folders, and word-level predictions of the token head."""

import pytest
import torch
from transformers import pipeline
from utils import FLOAT32_TOLERANCE, tiny_config, word_vocab_tokenizer

from hf_elmo import (
    BUNDLED_MODELS,
    ElmoForQuestionAnswering,
    ElmoForSequenceClassification,
    ElmoForTokenClassification,
    ElmoModel,
    ElmoTokenizer,
    bundled_model_path,
)

LABELS = {"id2label": {0: "neg", 1: "pos"}, "label2id": {"neg": 0, "pos": 1}}


def test_sentence_embedding_is_masked_mean_of_the_layer_mix(tiny_model, tiny_tokenizer):
    sentences = [["A", "cat", "."], ["Two", "dogs", "bark", "loudly", "."]]
    batch = tiny_tokenizer(sentences, is_split_into_words=True, padding=True, return_tensors="pt")
    weights = [0.2, 0.3, 0.5]
    with torch.no_grad():
        embedded = tiny_model.sentence_embedding(**batch, layer_weights=weights)
        default = tiny_model.sentence_embedding(**batch)
        layers = tiny_model(**batch, output_hidden_states=True).hidden_states
    assert embedded.shape == (2, tiny_model.config.hidden_size)
    for i, words in enumerate(sentences):
        span = slice(1, 1 + len(words))  # the words, without <S> and </S>
        mix = sum(w * layer[i, span] for w, layer in zip(weights, layers))
        torch.testing.assert_close(embedded[i], mix.mean(dim=0))
        torch.testing.assert_close(default[i], sum(layer[i, span] for layer in layers).mean(dim=0) / 3)
    with torch.no_grad():
        alone = tiny_model.sentence_embedding(
            **tiny_tokenizer(sentences[:1], is_split_into_words=True, return_tensors="pt"), layer_weights=weights
        )
    torch.testing.assert_close(alone[0], embedded[0], atol=FLOAT32_TOLERANCE, rtol=0)
    with pytest.raises(ValueError, match="layer_weights"):
        tiny_model.sentence_embedding(**batch, layer_weights=[1.0])


def test_sentence_embedding_weighs_words_and_removes_a_common_component(tiny_model, tiny_tokenizer):
    sentences = [["A", "cat", "."], ["Two", "dogs", "bark", "loudly", "."]]
    batch = tiny_tokenizer(sentences, is_split_into_words=True, padding=True, return_tensors="pt")
    torch.manual_seed(0)
    weights = torch.rand(batch["attention_mask"].shape)
    component = torch.randn(tiny_model.config.hidden_size)
    with torch.no_grad():
        default = tiny_model.sentence_embedding(**batch)
        equal = tiny_model.sentence_embedding(**batch, word_weights=torch.ones(batch["attention_mask"].shape))
        weighted = tiny_model.sentence_embedding(**batch, word_weights=weights)
        removed = tiny_model.sentence_embedding(**batch, word_weights=weights, common_component=component.tolist())
        layers = tiny_model(**batch, output_hidden_states=True).hidden_states
    torch.testing.assert_close(equal, default, atol=0, rtol=0)  # weights of 1 are the plain mean
    for i, words in enumerate(sentences):
        span = slice(1, 1 + len(words))
        average = sum(layer[i, span] for layer in layers) / 3
        torch.testing.assert_close(weighted[i], (weights[i, span, None] * average).sum(dim=0) / len(words))
    unit = component / component.norm()
    torch.testing.assert_close(removed @ unit, torch.zeros(2), atol=FLOAT32_TOLERANCE, rtol=0)
    torch.testing.assert_close(removed + (weighted @ unit)[:, None] * unit, weighted)
    with pytest.raises(
        ValueError, match=r"^word_weights must have shape \(2, 7\), \(batch, positions\), got \(2, 6\)$"
    ):
        tiny_model.sentence_embedding(**batch, word_weights=weights[:, :6])
    with pytest.raises(
        ValueError, match=r"^common_component must be 16 values or \(k, 16\) with 1 <= k <= 16, got shape \(8,\)$"
    ):
        tiny_model.sentence_embedding(**batch, common_component=component[:8])
    with pytest.raises(ValueError, match="^common_component's directions must be non-zero and linearly independent$"):
        tiny_model.sentence_embedding(**batch, common_component=torch.zeros(16))
    with pytest.raises(ValueError, match="linearly independent"):
        tiny_model.sentence_embedding(**batch, common_component=torch.stack([component, 2 * component]))
    with pytest.raises(ValueError, match=r"^reference_mean must be a vector of 16 values, got shape \(3,\)$"):
        tiny_model.sentence_embedding(**batch, reference_mean=[0.0, 1.0, 2.0])


def test_sentence_embedding_takes_out_a_reference_mean_and_several_directions(tiny_model, tiny_tokenizer):
    batch = tiny_tokenizer(["a cat sat", "two dogs bark loudly", "x"], padding=True, return_tensors="pt")
    torch.manual_seed(0)
    mean = torch.randn(tiny_model.config.hidden_size)
    directions = torch.randn(3, tiny_model.config.hidden_size)  # not orthonormal: the span is what is removed
    with torch.no_grad():
        plain = tiny_model.sentence_embedding(**batch)
        removed = tiny_model.sentence_embedding(**batch, common_component=directions, reference_mean=mean.tolist())
    basis = torch.linalg.qr(directions.T).Q  # (16, 3), orthonormal columns spanning the directions
    centred = plain - mean
    torch.testing.assert_close(removed, centred - (centred @ basis) @ basis.T, atol=FLOAT32_TOLERANCE, rtol=0)
    torch.testing.assert_close(removed @ directions.T, torch.zeros(3, 3), atol=1e-4, rtol=0)


def test_feature_extraction_pipeline_on_saved_folder(tmp_path, tiny_model, tiny_tokenizer):
    tiny_model.save_pretrained(tmp_path)
    tiny_tokenizer.save_pretrained(tmp_path)
    extractor = pipeline("feature-extraction", model=str(tmp_path), tokenizer=str(tmp_path))
    features = torch.tensor(extractor("The cat sat ."))
    with torch.no_grad():
        expected = tiny_model(**tiny_tokenizer("The cat sat .", return_tensors="pt")).last_hidden_state
    torch.testing.assert_close(features, expected)


@pytest.mark.parametrize("name", BUNDLED_MODELS)
def test_every_bundled_folder_gives_its_biLM_features_from_its_own_tokenizer(name):
    """
    `ElmoModel` and `pipeline("feature-extraction")` on a bundled folder take what the folder's own tokenizer gives
    (the classifier's `word_vector_ids` among it, which the biLM ignores: issue 51) and give the biLM's top layer.
    """
    folder = bundled_model_path(name)
    tokenizer = ElmoTokenizer.from_pretrained(folder)
    model = ElmoModel.from_pretrained(folder).eval()
    text = "정말 재미있는 영화"
    batch = tokenizer([text], return_tensors="pt")
    with torch.no_grad():
        expected = model(**batch).last_hidden_state
        without_word_vector_ids = model(batch["input_ids"], batch["attention_mask"]).last_hidden_state
    torch.testing.assert_close(expected, without_word_vector_ids, atol=0, rtol=0)
    features = torch.tensor(pipeline("feature-extraction", model=folder)(text))
    torch.testing.assert_close(features, expected, atol=FLOAT32_TOLERANCE, rtol=0)


@pytest.mark.parametrize(
    "head_class", [ElmoForSequenceClassification, ElmoForTokenClassification, ElmoForQuestionAnswering]
)
def test_a_head_folder_with_word_vectors_gives_features_to_every_class(tmp_path, head_class):
    """
    A head's folder whose tokenizer gives `word_vector_ids`: the head, and its biLM loaded alone (`ElmoModel`, the
    feature-extraction pipeline), each take the tokenizer's whole output; the biLM's features are the head's biLM's.
    """
    tokenizer = word_vocab_tokenizer(tmp_path / "vocabulary", ["the", "cat", "sat"], word_vector_ids=True)
    torch.manual_seed(0)
    config = tiny_config(word_vector_dim=3, word_vector_vocab_size=tokenizer.word_vocab_size, num_labels=2)
    head = head_class(config).eval()
    head.save_pretrained(tmp_path / "head")
    tokenizer.save_pretrained(tmp_path / "head")
    text = "the cat sat on a mat"
    batch = ElmoTokenizer.from_pretrained(tmp_path / "head")([text], return_tensors="pt")
    assert "word_vector_ids" in batch
    with torch.no_grad():
        expected = head.elmo(batch["input_ids"], batch["attention_mask"]).last_hidden_state
        outputs = head(**batch).to_tuple()
        reloaded = head_class.from_pretrained(tmp_path / "head").eval()(**batch).to_tuple()
        bilm = ElmoModel.from_pretrained(tmp_path / "head").eval()(**batch).last_hidden_state
    for output, again in zip(outputs, reloaded, strict=True):
        torch.testing.assert_close(again, output, atol=FLOAT32_TOLERANCE, rtol=0)
    torch.testing.assert_close(bilm, expected, atol=FLOAT32_TOLERANCE, rtol=0)
    features = torch.tensor(pipeline("feature-extraction", model=str(tmp_path / "head"))(text))
    torch.testing.assert_close(features, expected, atol=FLOAT32_TOLERANCE, rtol=0)


def test_text_classification_pipeline_uses_id2label(tmp_path, tiny_tokenizer):
    torch.manual_seed(0)
    model = ElmoForSequenceClassification(tiny_config(num_labels=2, **LABELS)).eval()
    model.save_pretrained(tmp_path)
    tiny_tokenizer.save_pretrained(tmp_path)
    classifier = pipeline("text-classification", model=str(tmp_path), tokenizer=str(tmp_path))
    texts = ["The cat sat .", "Dogs bark loudly at night"]
    results = classifier(texts)
    with torch.no_grad():
        probabilities = model(**tiny_tokenizer(texts, padding=True, return_tensors="pt")).logits.softmax(-1)
    for result, row in zip(results, probabilities):
        assert result["label"] == LABELS["id2label"][row.argmax().item()]
        assert result["score"] == pytest.approx(row.max().item(), abs=FLOAT32_TOLERANCE)


def test_word_level_predictions_of_the_token_head(tiny_tokenizer):
    torch.manual_seed(0)
    model = ElmoForTokenClassification(tiny_config(num_labels=2, **LABELS)).eval()
    sentences = [["Rome", "is", "big"], ["Oslo"]]
    encoding = tiny_tokenizer(sentences, is_split_into_words=True, padding=True, return_tensors="pt")
    predictions = model.predict_word_labels(encoding)
    assert [len(p) for p in predictions] == [3, 1]
    with torch.no_grad():
        probabilities = model(**encoding).logits.softmax(-1)
    label, score = predictions[0][2]  # "big", position 3 after <S>
    assert label == LABELS["id2label"][probabilities[0, 3].argmax().item()]
    assert score == pytest.approx(probabilities[0, 3].max().item())
