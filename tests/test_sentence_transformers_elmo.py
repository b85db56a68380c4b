"""`SentenceTransformer(folder)` on folders hf_elmo writes: `ElmoModel.sentence_embedding`, batched, offline."""

import json
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch
from utils import FLOAT32_TOLERANCE, require, save_with_word_counts, tiny_config, write_original_checkpoint

from hf_elmo import ElmoModel, ElmoTokenizer, bundled_model_path
from hf_elmo.alphabet_elmo import learn_character_vocabulary
from hf_elmo.conversion_original import convert_original
from hf_elmo.folder_layout import ENCODER_CLASS, SIF_A
from hf_elmo.pretraining import main as pretraining_main
from hf_elmo.sentence_weighting import WORD_COUNTS_FILE, WordCounts, common_component, reference_directions

require("sentence_transformers")
from sentence_transformers import SentenceTransformer  # noqa: E402
from sentence_transformers.util import import_from_string  # noqa: E402

from hf_elmo.sentence_transformers_elmo import ElmoSentenceTransformerModule  # noqa: E402

# Spacing and punctuation as users type them; "" has no word (a zero vector, as sentence_embedding gives).
TEXTS = ["the cat sat on the mat", "a", "hello,  world  again !", "", "one two three four five six seven", "x y"]
# 배 is belly in the first two, a boat in the third, a pear in the fourth.
BAE_SENTENCES = ["배가 고프다", "배가 아프다", "배를 타고 여행을 가다", "배를 깎아 먹었다"]


@pytest.fixture(autouse=True)
def offline(monkeypatch):
    """No Hub request, even where sentence-transformers would look a model or its card up."""
    monkeypatch.setattr("huggingface_hub.constants.HF_HUB_OFFLINE", True)


def load(folder, **kwargs) -> SentenceTransformer:
    """The folder's sentence-transformers model, on CPU, from local files only."""
    return SentenceTransformer(str(folder), trust_remote_code=True, local_files_only=True, device="cpu", **kwargs)


def own_sentence_embedding(
    model: ElmoModel,
    tokenizer: ElmoTokenizer,
    texts,
    word_counts: WordCounts | None = None,
    sif_a: float = SIF_A,
    settings: dict | None = None,
    **encoding,
) -> torch.Tensor:
    """hf_elmo's sentence vectors of `texts`, in one padded batch; each word SIF-weighted (`sif_a`) by `word_counts`
    where given, as the module weighs a folder's; `settings`: `sentence_embedding`'s `layer_weights`,
    `common_component` and `reference_mean`."""
    batch = tokenizer(texts, padding=True, return_word_labels=word_counts is not None, return_tensors="pt", **encoding)
    weights = None if word_counts is None else word_counts.sif_weights(batch.pop("labels"), sif_a)
    with torch.inference_mode():
        return model.sentence_embedding(**batch, word_weights=weights, **(settings or {}))


def module_settings(module: ElmoSentenceTransformerModule) -> dict:
    """What the module passes `sentence_embedding` besides the words' weights."""
    return {
        "sif_a": module.sif_a,
        "settings": {
            "layer_weights": module.layer_weights,
            "common_component": module.common_component,
            "reference_mean": module.reference_mean,
        },
    }


def cosines(vectors: torch.Tensor) -> torch.Tensor:
    normalised = torch.nn.functional.normalize(vectors, dim=-1)
    return normalised @ normalised.T


@pytest.fixture
def tiny_folder(tmp_path, tiny_model, tiny_tokenizer) -> Path:
    tiny_model.save_pretrained(tmp_path / "tiny")
    tiny_tokenizer.save_pretrained(tmp_path / "tiny")
    return tmp_path / "tiny"


@pytest.fixture
def counted_folder(tmp_path, tiny_model) -> Path:
    """A tiny biLM folder with a word vocabulary of `TEXTS` and those texts' word counts."""
    return save_with_word_counts(tmp_path / "counted", tiny_model, TEXTS)


@pytest.fixture(scope="module")
def bundled():
    """The bundled biLM as sentence-transformers loads it, and as hf_elmo loads it, with its word counts."""
    folder = bundled_model_path("ko-nsmc")
    return (
        load(folder),
        ElmoModel.from_pretrained(folder).eval(),
        ElmoTokenizer.from_pretrained(folder),
        WordCounts.from_pretrained(folder),
    )


def test_the_folder_loads_as_the_elmo_module_alone(tiny_folder, tiny_model):
    model = load(tiny_folder)
    assert [type(module) for module in model] == [ElmoSentenceTransformerModule]
    assert type(model[0].model) is ElmoModel  # hf_elmo's class, not the folder's code copy
    assert import_from_string(ENCODER_CLASS) is ElmoSentenceTransformerModule
    assert model.get_embedding_dimension() == 2 * tiny_model.config.projection_dim
    assert model.similarity_fn_name == "cosine"


@pytest.mark.parametrize("batch_size", [1, 4, len(TEXTS)])
def test_encode_is_sentence_embedding_at_any_batch_size(tiny_folder, tiny_model, tiny_tokenizer, batch_size):
    """A folder without word counts: every word weighs alike, the plain mean `sentence_embedding` gives by default."""
    model = load(tiny_folder)
    assert model[0].word_counts is None and model[0].sif_a == SIF_A
    vectors = model.encode(TEXTS, batch_size=batch_size, convert_to_tensor=True)
    reference = own_sentence_embedding(tiny_model, tiny_tokenizer, TEXTS)
    assert vectors.shape == (len(TEXTS), 2 * tiny_model.config.projection_dim)
    torch.testing.assert_close(vectors, reference, atol=FLOAT32_TOLERANCE, rtol=0)


def test_the_module_given_directly_needs_no_trust_remote_code(tiny_folder, tiny_model, tiny_tokenizer):
    module = ElmoSentenceTransformerModule.load(str(tiny_folder), local_files_only=True)
    vectors = SentenceTransformer(modules=[module], device="cpu").encode(TEXTS, convert_to_tensor=True)
    torch.testing.assert_close(
        vectors, own_sentence_embedding(tiny_model, tiny_tokenizer, TEXTS), atol=FLOAT32_TOLERANCE, rtol=0
    )


def test_texts_are_split_as_the_folders_tokenizer_splits_them(tmp_path, tiny_model):
    # A non-default pre-tokenizer ("don't" is 3 words): the module reads it from the folder, as hf_elmo does.
    tokenizer = ElmoTokenizer(max_characters_per_token=20, pre_tokenizer="whitespace")
    tiny_model.save_pretrained(tmp_path)
    tokenizer.save_pretrained(tmp_path)
    texts = ["don't stop, ever", "well-known  words"]
    model = load(tmp_path)
    features = model.preprocess(texts)
    assert torch.equal(features["input_ids"], tokenizer(texts, padding=True, return_tensors="pt")["input_ids"])
    torch.testing.assert_close(
        model.encode(texts, convert_to_tensor=True),
        own_sentence_embedding(tiny_model, tokenizer, texts),
        atol=FLOAT32_TOLERANCE,
        rtol=0,
    )


@pytest.mark.parametrize("batch_size", [1, 3, 32])
def test_bundled_bilm_encodes_as_sentence_embedding(bundled, batch_size):
    """The bundled folder has its pre-training text's word counts and a reference text's mean and principal directions
    (examples/nsmc/bundle.py): its vectors are SIF-weighted, less those."""
    model, bilm, tokenizer, counts = bundled
    assert len(counts) == tokenizer.word_vocab_size
    module = model[0]
    assert len(module.reference_mean) == bilm.config.hidden_size
    assert len(module.common_component) > 1 and len(module.common_component[0]) == bilm.config.hidden_size
    texts = BAE_SENTENCES + ["정말 재미있고 감동적인 영화였어요", "시간 낭비, 돈 아깝다", "지루하고 스토리도 엉망이다"]
    vectors = model.encode(texts, batch_size=batch_size, convert_to_tensor=True)
    expected = own_sentence_embedding(bilm, tokenizer, texts, counts, **module_settings(module))
    torch.testing.assert_close(vectors, expected, atol=FLOAT32_TOLERANCE, rtol=0)
    assert not torch.allclose(expected, own_sentence_embedding(bilm, tokenizer, texts, counts), atol=1e-3)


def test_bundled_bae_similarities_are_hf_elmos(bundled):
    model, bilm, tokenizer, counts = bundled
    vectors = model.encode(BAE_SENTENCES, convert_to_tensor=True)
    similarity = model.similarity(vectors, vectors)
    torch.testing.assert_close(
        similarity,
        cosines(own_sentence_embedding(bilm, tokenizer, BAE_SENTENCES, counts, **module_settings(model[0]))),
        atol=FLOAT32_TOLERANCE,
        rtol=0,
    )
    # The two bellies are nearer each other than the belly is to the boat or the pear.
    assert similarity[0, 1] > max(similarity[0, 2], similarity[0, 3])
    pairwise = model.similarity_pairwise(vectors[:2], vectors[2:])
    torch.testing.assert_close(pairwise, similarity[[0, 1], [2, 3]], atol=FLOAT32_TOLERANCE, rtol=0)


def test_layer_weights_and_max_seq_length_apply_and_survive_save(tmp_path, tiny_model, tiny_tokenizer):
    length = np.int64(4)  # numpy's integer, which the settings file must still hold as JSON's
    module = ElmoSentenceTransformerModule(
        tiny_model, tiny_tokenizer, layer_weights=[0.0, 0.0, 1.0], max_seq_length=length
    )
    model = SentenceTransformer(modules=[module], device="cpu")
    with torch.inference_mode():
        reference = tiny_model.sentence_embedding(
            **tiny_tokenizer(TEXTS, padding=True, truncation=True, max_length=4, return_tensors="pt"),
            layer_weights=[0.0, 0.0, 1.0],
        )
    torch.testing.assert_close(model.encode(TEXTS, convert_to_tensor=True), reference, atol=FLOAT32_TOLERANCE, rtol=0)
    model.save(str(tmp_path / "saved"))
    config = json.loads((tmp_path / "saved" / "sentence_bert_config.json").read_text())
    assert config == {
        "layer_weights": [0.0, 0.0, 1.0],
        "max_seq_length": 4,
        "sif_a": SIF_A,
        "common_component": None,
        "reference_mean": None,
    }
    reloaded = load(tmp_path / "saved")
    assert reloaded.max_seq_length == 4
    torch.testing.assert_close(
        reloaded.encode(TEXTS, convert_to_tensor=True), reference, atol=FLOAT32_TOLERANCE, rtol=0
    )


def test_word_counts_weigh_the_words_and_survive_save(counted_folder, tiny_model, tmp_path):
    """A folder with `word_counts.json`: each word weighs a / (a + p(w)), as `sentence_embedding` weighs it given those
    weights; `save` keeps the counts, and `sif_a=None` goes back to the plain mean."""
    model = load(counted_folder)
    tokenizer, counts = ElmoTokenizer.from_pretrained(counted_folder), WordCounts.from_pretrained(counted_folder)
    assert model[0].word_counts.counts.tolist() == counts.counts.tolist()
    expected = own_sentence_embedding(tiny_model, tokenizer, TEXTS, counts)
    vectors = model.encode(TEXTS, batch_size=4, convert_to_tensor=True)
    torch.testing.assert_close(vectors, expected, atol=FLOAT32_TOLERANCE, rtol=0)
    assert not torch.allclose(vectors, own_sentence_embedding(tiny_model, tokenizer, TEXTS), atol=1e-4)
    model.save(str(tmp_path / "saved"))
    assert (tmp_path / "saved" / WORD_COUNTS_FILE).read_bytes() == (counted_folder / WORD_COUNTS_FILE).read_bytes()
    reloaded = load(tmp_path / "saved").encode(TEXTS, batch_size=4, convert_to_tensor=True)
    torch.testing.assert_close(reloaded, vectors, atol=FLOAT32_TOLERANCE, rtol=0)
    plain = SentenceTransformer(
        modules=[ElmoSentenceTransformerModule(tiny_model, tokenizer, sif_a=None, word_counts=counts)]
    )
    torch.testing.assert_close(
        plain.encode(TEXTS, convert_to_tensor=True),
        own_sentence_embedding(tiny_model, tokenizer, TEXTS),
        atol=FLOAT32_TOLERANCE,
        rtol=0,
    )


def test_a_saved_common_component_is_removed_from_every_vector(counted_folder, tmp_path):
    """Estimated once on a reference text and saved in `sentence_bert_config.json`: after reloading, every vector is
    orthogonal to it, and is the vector without it less its projection on it."""
    model = load(counted_folder)
    without = model.encode(TEXTS, convert_to_tensor=True)
    component = common_component(
        model.encode(["the mat", "a cat sat", "seven dogs", "one two"], convert_to_tensor=True)
    )
    model[0].common_component = component.tolist()
    model.save(str(tmp_path / "saved"))
    saved = json.loads((tmp_path / "saved" / "sentence_bert_config.json").read_text())
    assert saved["common_component"] == component.tolist()
    vectors = load(tmp_path / "saved").encode(TEXTS, convert_to_tensor=True)
    torch.testing.assert_close(vectors @ component, torch.zeros(len(TEXTS)), atol=FLOAT32_TOLERANCE, rtol=0)
    torch.testing.assert_close(vectors, without - (without @ component)[:, None] * component, atol=1e-5, rtol=0)


def test_saved_reference_statistics_take_out_the_mean_and_the_top_directions(counted_folder, tmp_path):
    """All-but-the-top: the mean and two principal directions of a reference text, saved and reloaded, give each
    vector less the mean, then less its projections on the directions."""
    model = load(counted_folder)
    without = model.encode(TEXTS, convert_to_tensor=True)
    reference = model.encode(["the mat", "a cat sat", "seven dogs", "one two", "the cat"], convert_to_tensor=True)
    mean, directions = reference_directions(reference, 2)
    model[0].reference_mean, model[0].common_component = mean.tolist(), directions.tolist()
    model.save(str(tmp_path / "saved"))
    saved = json.loads((tmp_path / "saved" / "sentence_bert_config.json").read_text())
    assert (saved["reference_mean"], saved["common_component"]) == (mean.tolist(), directions.tolist())
    vectors = load(tmp_path / "saved").encode(TEXTS, convert_to_tensor=True)
    centred = without - mean
    expected = centred - (centred @ directions.T) @ directions
    torch.testing.assert_close(vectors, expected, atol=FLOAT32_TOLERANCE, rtol=0)
    torch.testing.assert_close(vectors @ directions.T, torch.zeros(len(TEXTS), 2), atol=FLOAT32_TOLERANCE, rtol=0)


def test_converted_and_pre_training_folders_load(tmp_path):
    options, weights = write_original_checkpoint(tmp_path / "original", tiny_config(), seed=3)
    convert_original(options, weights, tmp_path / "converted")
    # Two steps of hf-elmo pretrain on learned characters: its output folder as the Trainer saves it.
    text = ["배가 고프다", "배를 타고 여행을 가다", "배를 깎아 먹었다", "a b c"] * 4
    for name in ("train.txt", "valid.txt"):
        (tmp_path / name).write_text("\n".join(text) + "\n", encoding="utf-8")
    pretraining_main(
        ["--train-file", str(tmp_path / "train.txt"), "--validation-file", str(tmp_path / "valid.txt")]
        + ["--output-dir", str(tmp_path / "pre-training"), "--preset", "tiny", "--char-vocab", "learned"]
        + ["--max-characters-per-token", "20", "--n-negative-samples", "4", "--min-count", "1", "--max-steps", "2"]
    )
    # The converted folder has no word counts (plain means), the pre-training folder its training text's (SIF).
    assert WordCounts.from_pretrained(tmp_path / "converted") is None
    for folder in (tmp_path / "converted", tmp_path / "pre-training"):
        bilm, tokenizer = ElmoModel.from_pretrained(folder).eval(), ElmoTokenizer.from_pretrained(folder)
        torch.testing.assert_close(
            load(folder).encode(text[:4], batch_size=3, convert_to_tensor=True),
            own_sentence_embedding(bilm, tokenizer, text[:4], WordCounts.from_pretrained(folder)),
            atol=FLOAT32_TOLERANCE,
            rtol=0,
        )


# docs/sentence-transformers.md: where hf_elmo is not installed, the code files saved beside the weights give the same
# vector through sentence-transformers' own Transformer module, calling sentence_embedding.
WITHOUT_HF_ELMO = """
import sys

import torch

sys.modules["hf_elmo"] = None  # as if hf_elmo were not installed: importing it fails
from sentence_transformers import SentenceTransformer
from sentence_transformers.base.modules import Transformer

folder, texts, output = sys.argv[1], sys.argv[2:-1], sys.argv[-1]
remote = {"trust_remote_code": True, "local_files_only": True}
module = Transformer(
    folder,
    model_kwargs=remote,
    config_kwargs=remote,
    processor_kwargs=remote,
    modality_config={"text": {"method": "sentence_embedding", "method_output_name": None}},
    module_output_name="sentence_embedding",
)
assert type(module.model).__module__.startswith("transformers_modules."), type(module.model)
torch.save(SentenceTransformer(modules=[module], device="cpu").encode(texts, convert_to_tensor=True), output)
"""


def test_without_hf_elmo_the_folders_code_serves_the_stock_transformer(tiny_folder, tiny_model, tiny_tokenizer):
    run = subprocess.run(
        [sys.executable, "-c", WITHOUT_HF_ELMO, str(tiny_folder), *TEXTS, str(tiny_folder / "vectors.pt")],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert run.returncode == 0, run.stderr
    torch.testing.assert_close(
        torch.load(tiny_folder / "vectors.pt"),
        own_sentence_embedding(tiny_model, tiny_tokenizer, TEXTS),
        atol=FLOAT32_TOLERANCE,
        rtol=0,
    )


def test_bad_input_gets_one_line(tiny_folder, tiny_model, tiny_tokenizer):
    with pytest.raises(ValueError, match="trust_remote_code=True"):
        SentenceTransformer(str(tiny_folder), local_files_only=True, device="cpu")
    with pytest.raises(
        ValueError, match=r"^ElmoSentenceTransformerModule embeds texts \(str\), one per input, got tuple$"
    ):
        load(tiny_folder).encode([("a text", "its pair")])
    with pytest.raises(ValueError, match=r"^ElmoSentenceTransformerModule runs in PyTorch, not backend='onnx'"):
        load(tiny_folder, backend="onnx")
    with pytest.raises(ValueError, match=r"^layer_weights needs 3 values, one per layer, got 2$"):
        ElmoSentenceTransformerModule(tiny_model, tiny_tokenizer, layer_weights=[0.5, 0.5])
    with pytest.raises(ValueError, match=r"rows of 50 characters .* reads 20 .*: save the model's own tokenizer"):
        ElmoSentenceTransformerModule(tiny_model, ElmoTokenizer())
    with pytest.raises(ValueError, match=r"^sif_a must be a number > 0 \(or None for equal weights\), got 0$"):
        ElmoSentenceTransformerModule(tiny_model, tiny_tokenizer, sif_a=0)
    with pytest.raises(ValueError, match=r"^common_component needs 16 values \(2 \* projection_dim\) .* got \[3\]$"):
        ElmoSentenceTransformerModule(tiny_model, tiny_tokenizer, common_component=[1.0, 0.0, 0.0])
    with pytest.raises(ValueError, match=r"^common_component needs 16 .* per direction, got \[3, 16\]$"):
        ElmoSentenceTransformerModule(tiny_model, tiny_tokenizer, common_component=[[1.0] * 16, [1.0, 0.0, 0.0]])
    with pytest.raises(ValueError, match=r"^reference_mean needs 16 values \(2 \* projection_dim\), got 2$"):
        ElmoSentenceTransformerModule(tiny_model, tiny_tokenizer, reference_mean=[1.0, 0.0])
    with pytest.raises(
        ValueError, match=r"^the word counts are of 4 words, the tokenizer's word vocabulary holds None"
    ):
        ElmoSentenceTransformerModule(tiny_model, tiny_tokenizer, word_counts=WordCounts([0, 0, 0, 1], words=1))


def test_load_refuses_a_tokenizer_that_disagrees_with_the_config(tmp_path):
    """The module's `load` runs the check every command's loader runs (`loading.check_tokenizer`): a folder whose
    character vocabulary is another model's is refused in the loader's one line, before any vector is computed."""
    require("kiwipiepy", reason='the Korean tokenizer needs the korean extra: "hf_elmo[korean]"')
    folder = shutil.copytree(bundled_model_path("ko-nsmc"), tmp_path / "learned")
    learn_character_vocabulary(["배가 고프다"]).save(folder / "char_vocab.json")  # 5 characters and 6 markers
    with pytest.raises(
        ValueError, match=rf"^the tokenizer of {folder} disagrees with its config: it has a character "
    ):
        ElmoSentenceTransformerModule.load(str(folder), local_files_only=True)
