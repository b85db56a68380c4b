"""`hf_elmo.loading`: the class a folder loads as, its tokenizer, one-line errors, and a Hub out of reach."""

import json
import shutil
import socket
from pathlib import Path

import h5py
import numpy as np
import pytest
import torch
from utils import FLOAT32_TOLERANCE, require, tiny_config, unreadable, word_vocab_tokenizer, write_original_checkpoint

from hf_elmo import (
    ElmoConfig,
    ElmoForPreTraining,
    ElmoForSequenceClassification,
    ElmoForTokenClassification,
    ElmoModel,
    ElmoTokenizer,
    bundled_model_path,
)
from hf_elmo.alphabet_elmo import learn_character_vocabulary
from hf_elmo.loading import load_model, load_model_and_tokenizer, load_tokenizer, resolve_model_name


@pytest.mark.parametrize(
    "saved_class, loaded_class",
    [
        (ElmoModel, ElmoModel),
        (ElmoForPreTraining, ElmoModel),  # the biLM: the softmax serves pre-training, which asks for it by name
        (ElmoForSequenceClassification, ElmoForSequenceClassification),
        (ElmoForTokenClassification, ElmoForTokenClassification),
    ],
)
def test_the_folder_architecture_picks_the_class(tmp_path, saved_class, loaded_class):
    saved_class(tiny_config(word_vocab_size=10, num_labels=2)).save_pretrained(tmp_path)
    model, tokenizer = load_model_and_tokenizer(tmp_path, hub=False, dtype=torch.float32)
    assert type(model) is loaded_class and not model.training and model.dtype == torch.float32
    assert tokenizer.max_characters_per_token == 20  # a folder without tokenizer files: the config's width
    assert type(load_model(tmp_path, ElmoModel)) is ElmoModel  # a class given is the class loaded


def test_a_folder_that_does_not_load_is_one_line_naming_it(tmp_path):
    ElmoModel(tiny_config()).save_pretrained(tmp_path / "model")
    config = json.loads((tmp_path / "model" / "config.json").read_text(encoding="utf-8"))
    config["n_layers"] = 1  # the weights hold 2
    (tmp_path / "model" / "config.json").write_text(json.dumps(config), encoding="utf-8")
    with pytest.raises(ValueError) as raised:
        load_model(tmp_path / "model")
    message = str(raised.value)
    assert message.startswith(f"cannot load {tmp_path / 'model'} as an hf_elmo model: ") and "\n" not in message
    assert "n_layers" in message
    with pytest.raises(ValueError, match=r"^no such model folder or bundled model \(ko-nsmc, ko-nsmc-sentiment\): k$"):
        load_model_and_tokenizer("k", hub=False)


@pytest.fixture
def unreachable_hub(tmp_path, monkeypatch):
    """The Hub cannot be connected to (no proxy, HF_HUB_OFFLINE unset); the Hub cache is `tmp_path / "hub"`."""
    for key in ("HTTPS_PROXY", "https_proxy", "ALL_PROXY"):
        monkeypatch.delenv(key, raising=False)
    monkeypatch.setattr("huggingface_hub.constants.HF_HUB_OFFLINE", False)
    monkeypatch.setattr("huggingface_hub.constants.HF_HUB_CACHE", str(tmp_path / "hub"))

    def refused(*args, **kwargs):
        raise ConnectionRefusedError("no network in this test")

    monkeypatch.setattr(socket, "create_connection", refused)
    return tmp_path / "hub"


@pytest.mark.parametrize("setting", ["HF_HUB_OFFLINE", "HTTPS_PROXY"])
def test_the_hub_is_not_tried_offline_or_behind_a_proxy(unreachable_hub, monkeypatch, setting):
    """Offline, nothing is tried; behind a proxy a direct connection says nothing: both are "not unreachable" (the
    download says why it fails), and no connection is made."""
    from hf_elmo.loading import hub_unreachable

    if setting == "HF_HUB_OFFLINE":
        monkeypatch.setattr("huggingface_hub.constants.HF_HUB_OFFLINE", True)
    else:
        monkeypatch.setenv(setting, "http://proxy.example:3128")
    monkeypatch.setattr(socket, "create_connection", lambda *args, **kwargs: pytest.fail("a connection was tried"))
    assert hub_unreachable() is False


def test_an_unreachable_hub_loads_the_cache_and_changes_no_setting_of_huggingface_hub(tmp_path, unreachable_hub):
    """No minutes of retries: an id not in the cache fails at once, one in it loads from its folder there, and
    huggingface_hub stays online for the rest of the process (the library sets none of its settings)."""
    from huggingface_hub import constants

    with pytest.raises(ValueError) as raised:
        resolve_model_name("someone/elmo")
    assert str(raised.value) == (
        "no such model folder or bundled model (ko-nsmc, ko-nsmc-sentiment): someone/elmo; as a Hub id it is not in "
        "the Hub cache, and the Hub cannot be reached (with HF_HUB_OFFLINE=1 it is not tried)"
    )
    snapshot = unreachable_hub / "models--someone--cached-elmo" / "snapshots" / ("0" * 40)
    ElmoModel(tiny_config()).save_pretrained(snapshot)
    ElmoTokenizer(max_characters_per_token=20).save_pretrained(snapshot)
    (snapshot.parent.parent / "refs").mkdir()
    (snapshot.parent.parent / "refs" / "main").write_text("0" * 40)
    assert resolve_model_name("someone/cached-elmo") == str(snapshot)
    model, tokenizer = load_model_and_tokenizer("someone/cached-elmo")
    assert type(model) is ElmoModel and tokenizer.max_characters_per_token == 20
    assert constants.HF_HUB_OFFLINE is False and not constants.is_offline_mode()


def copy_of_bundled(name: str, folder: Path) -> Path:
    shutil.copytree(bundled_model_path(name), folder)
    return folder


def edit_json(path, **changes):
    data = json.loads(path.read_text(encoding="utf-8"))
    data.update(changes)
    path.write_text(json.dumps(data), encoding="utf-8")


def test_a_folder_without_the_word_vocabulary_its_config_reads_is_refused_before_the_weights(tmp_path):
    """The config's word input needs `word_input_vocab.json`: refused from the config alone (these weights would
    not even load), in one line."""
    folder = copy_of_bundled("ko-nsmc", tmp_path / "model")
    edit_json(folder / "config.json", word_input_vocab_size=10, word_input_dim=4)
    with pytest.raises(ValueError) as raised:
        load_model_and_tokenizer(folder)
    assert str(raised.value) == (
        f"{folder} lacks word_input_vocab.json, which its tokenizer needs (without, the model would read other ids "
        "or units); copy or download the model folder again"
    )


def test_a_tokenizer_that_disagrees_with_the_config_is_refused(tmp_path):
    """Other characters per token (a byte alphabet), or another model's character vocabulary (one learned from
    other text, in the bundled biLM's folder): other rows, refused as weights that disagree are."""
    ElmoModel(tiny_config()).save_pretrained(tmp_path / "bytes")
    ElmoTokenizer(max_characters_per_token=30).save_pretrained(tmp_path / "bytes")
    with pytest.raises(ValueError) as raised:
        load_model_and_tokenizer(tmp_path / "bytes")
    assert str(raised.value) == (
        f"the tokenizer of {tmp_path / 'bytes'} disagrees with its config: it has max_characters_per_token 30 (the "
        "config's: 20); copy or download the model folder again"
    )
    require("kiwipiepy", reason='the Korean tokenizer needs the korean extra: "hf_elmo[korean]"')
    folder = copy_of_bundled("ko-nsmc", tmp_path / "learned")
    learn_character_vocabulary(["배가 고프다"]).save(folder / "char_vocab.json")  # 5 characters and 6 markers
    config_size = ElmoConfig.from_pretrained(folder).char_vocab_size
    expected = rf"it has a character vocabulary of 11 \(the config's: {config_size}, or other markers\)"
    with pytest.raises(ValueError, match=expected):
        load_model_and_tokenizer(folder)


def test_the_tokenizer_gives_word_vector_ids_exactly_when_the_model_reads_them(tmp_path):
    """A head with word vectors (saved, or asked for by `from_pretrained`'s keywords) gets a tokenizer that gives
    their ids, whatever the folder's tokenizer was saved with; the biLM of its folder one that does not."""
    ElmoModel(tiny_config()).save_pretrained(tmp_path / "bilm")
    saved = word_vocab_tokenizer(tmp_path / "bilm", ["a", "cat", "sat"])
    saved.save_pretrained(tmp_path / "bilm")
    vocab_size = saved.word_vocab_size
    sentence = ["a cat sat", "a dog"]
    word_vectors = dict(num_labels=2, word_vector_dim=4, word_vector_vocab_size=vocab_size)
    head, tokenizer = load_model_and_tokenizer(
        tmp_path / "bilm", ElmoForSequenceClassification, hub=False, **word_vectors
    )
    assert tokenizer.word_vector_ids and "word_vector_ids" in tokenizer.model_input_names
    with torch.no_grad():
        expected = head(**tokenizer(sentence, padding=True, return_tensors="pt")).logits
    head.save_pretrained(tmp_path / "head")
    tokenizer.save_pretrained(tmp_path / "head")
    edit_json(tmp_path / "head" / "tokenizer_config.json", word_vector_ids=False)  # as an older tokenizer was saved
    reloaded, tokenizer = load_model_and_tokenizer(tmp_path / "head", hub=False)
    assert type(reloaded) is ElmoForSequenceClassification and tokenizer.word_vector_ids
    with torch.no_grad():
        assert torch.equal(reloaded(**tokenizer(sentence, padding=True, return_tensors="pt")).logits, expected)
    bilm, tokenizer = load_model_and_tokenizer(tmp_path / "head", ElmoModel, hub=False)
    assert not tokenizer.word_vector_ids
    with torch.no_grad():  # ElmoModel takes no word_vector_ids
        assert bilm(**tokenizer(sentence, padding=True, return_tensors="pt")).last_hidden_state.shape == (2, 5, 16)
    _, tokenizer = load_model_and_tokenizer(tmp_path / "bilm", ElmoForSequenceClassification, hub=False, num_labels=2)
    assert not tokenizer.word_vector_ids
    word_vectors["word_vector_vocab_size"] = vocab_size + 1
    with pytest.raises(ValueError) as raised:
        load_model_and_tokenizer(tmp_path / "bilm", ElmoForSequenceClassification, hub=False, **word_vectors)
    assert str(raised.value) == (
        f"the tokenizer of {tmp_path / 'bilm'} disagrees with its config: it has a word vocabulary of {vocab_size} "
        f"words (the word vectors': {vocab_size + 1}); copy or download the model folder again"
    )


def test_load_tokenizer_gives_the_full_load_s_ids_without_the_weights(tmp_path, monkeypatch):
    """`load_tokenizer` reads the config and the tokenizer files alone (no model is made): the ids of the tokenizer
    the full load gives (a head's folder, without its word-vector ids); and the same refusals."""
    ElmoModel(tiny_config()).save_pretrained(tmp_path / "bilm")
    word_vocab_tokenizer(tmp_path / "bilm", ["a", "cat", "sat"]).save_pretrained(tmp_path / "bilm")
    vocab_size = ElmoTokenizer.from_pretrained(tmp_path / "bilm").word_vocab_size
    head, full = load_model_and_tokenizer(
        tmp_path / "bilm",
        ElmoForSequenceClassification,
        num_labels=2,
        word_vector_dim=4,
        word_vector_vocab_size=vocab_size,
    )
    head.save_pretrained(tmp_path / "head")
    full.save_pretrained(tmp_path / "head")
    monkeypatch.setattr("hf_elmo.loading._from_pretrained", lambda *args: pytest.fail("the weights loaded"))
    alone = load_tokenizer(tmp_path / "head")
    sentences = ["a cat sat", "a dog"]
    assert not alone.word_vector_ids and full.word_vector_ids
    ours, theirs = alone(sentences, padding=True), full(sentences, padding=True)
    assert ours["input_ids"] == theirs["input_ids"] and ours["attention_mask"] == theirs["attention_mask"]
    ElmoTokenizer(max_characters_per_token=30).save_pretrained(tmp_path / "bilm")
    with pytest.raises(ValueError, match="disagrees with its config: it has max_characters_per_token 30"):
        load_tokenizer(tmp_path / "bilm")


# -- weights that cannot be read, or only by unpickling (issue 50) ----------------------------------------------------


class TouchesAFile:
    """What a malicious pickle does when loaded: here, it makes `marker`, so that a test sees whether it ran."""

    def __init__(self, marker: Path):
        self.marker = marker

    def __reduce__(self):
        return (Path.touch, (self.marker,))


def test_pickled_weights_alone_are_refused_in_one_line_never_unpickled(tmp_path, capsys):
    """`pytorch_model.bin` (a malicious pickle) in place of `model.safetensors`: torch's refusal advised re-running
    with `weights_only=False`, the dangerous way; the folder is refused in one line saying that it has no
    safetensors weights and that hf_elmo will not unpickle them, and the pickle never runs, for `info` and `embed`."""
    from hf_elmo.cli import main

    folder, marker = tmp_path / "model", tmp_path / "ran"
    ElmoModel(tiny_config()).save_pretrained(folder)
    (folder / "model.safetensors").unlink()
    torch.save({"bilm.weight": TouchesAFile(marker)}, folder / "pytorch_model.bin")
    expected = (
        f"{folder} has no safetensors weights, only pytorch_model.bin, a pickle, which hf_elmo will not unpickle (a "
        "pickle can run any code): get the model's model.safetensors"
    )
    with pytest.raises(ValueError) as raised:
        load_model_and_tokenizer(folder)
    assert str(raised.value) == expected
    (tmp_path / "in.txt").write_text("a line\n")
    for argv in (
        ["info", str(folder)],
        ["embed", str(folder), str(tmp_path / "in.txt"), str(tmp_path / "o.h5"), "--top"],
    ):
        capsys.readouterr()
        assert main(argv) == 1
        assert capsys.readouterr().err == f"hf-elmo: error: {expected}\n"
    assert not marker.exists() and sorted(path.name for path in tmp_path.iterdir()) == ["in.txt", "model"]
    # Beside safetensors weights, a pickle is left alone: the folder loads them and the pickle never runs.
    ElmoModel(tiny_config()).save_pretrained(folder)
    assert type(load_model(folder)) is ElmoModel and not marker.exists()


def test_weights_that_cannot_be_read_are_named_as_such_not_as_damaged(tmp_path, monkeypatch):
    """An intact `model.safetensors` without read permission was "cut short or corrupt (No such file or directory)":
    it says that it cannot be read, and why; one cut short says so."""
    folder = tmp_path / "model"
    ElmoModel(tiny_config()).save_pretrained(folder)
    weights = folder / "model.safetensors"
    with monkeypatch.context() as patch:
        unreadable(patch, weights)
        with pytest.raises(ValueError) as raised:
            load_model(folder)
    assert str(raised.value) == (
        f"{weights} cannot be read (Permission denied): let this user read it (chmod a+r), it is not known to be "
        "damaged"
    )
    weights.chmod(0o644)
    intact = weights.read_bytes()
    weights.unlink()
    weights.mkdir()  # a folder in its place: the reason, not "cut short or corrupt"
    with pytest.raises(ValueError) as raised:
        load_model(folder)
    assert (
        str(raised.value) == f"{weights} cannot be read (not a regular file); copy or download the model folder again"
    )
    weights.rmdir()
    weights.write_bytes(intact[:100])
    with pytest.raises(ValueError, match=f"^{weights} is cut short or corrupt \\(.*\\); copy or download the model"):
        load_model(folder)


def test_weights_downloaded_cut_short_are_one_line(tmp_path, monkeypatch):
    """`read_weights_with_prefix` of a Hub id whose downloaded `model.safetensors` is cut short: one line, where
    safetensors' own error came through. The download is a stand-in for the Hub, which the tests cannot reach."""
    import huggingface_hub

    from hf_elmo import loading

    folder = tmp_path / "snapshot"
    ElmoModel(tiny_config()).save_pretrained(folder)
    weights = folder / "model.safetensors"
    weights.write_bytes(weights.read_bytes()[:100])
    monkeypatch.setattr(loading, "resolve_model_name", lambda name, hub: name)
    monkeypatch.setattr(huggingface_hub, "snapshot_download", lambda repo_id, allow_patterns: str(folder))
    with pytest.raises(ValueError) as raised:
        loading.read_weights_with_prefix("someone/elmo", "softmax.")
    assert str(raised.value).startswith(
        "cannot load someone/elmo as an hf_elmo model: model.safetensors is cut short or corrupt ("
    )
    assert str(raised.value).endswith("); download it again") and "\n" not in str(raised.value)


def test_an_original_checkpoint_is_named_with_the_convert_that_makes_a_model_of_it(tmp_path):
    """A folder of `options.json` and a weights `.hdf5` (bilm-tf's layout) given where a model folder goes: one line
    naming `hf-elmo convert` with its paths, from the loader and from `from_pretrained` (transformers said "no file
    named model.safetensors")."""
    options, weights = write_original_checkpoint(tmp_path / "original", tiny_config())
    folder = tmp_path / "original"
    expected = (
        f"{folder} holds an original (bilm-tf) checkpoint, not an hf_elmo model folder: convert it with hf-elmo "
        f"convert --options-file {options} --weight-file {weights} --output-dir {folder}-hf"
    )
    with pytest.raises(ValueError) as raised:
        load_model(tmp_path / "original")
    assert str(raised.value) == expected
    for model_class in (ElmoModel, ElmoForSequenceClassification):
        with pytest.raises(OSError) as raised:
            model_class.from_pretrained(tmp_path / "original")
        assert str(raised.value) == expected


# -- by Hub id --------------------------------------------------------------------------------------------------------


def test_a_hub_id_loads_through_each_loader_of_hf_elmo_as_its_folder(stand_in_hub, tmp_path):
    """hf_elmo's own loaders take a Hub id as they take a folder: the bundled models, published to the stand-in Hub
    (a test double of the Hub, which cannot be reached here: `hub_stand_in.py`) through huggingface_hub's real upload
    and read back through its real download, give the folders' classes, ids and outputs in `load_model_and_tokenizer`,
    `load_tokenizer`, `ElmoSentenceEmbedder` (its word counts and settings fetched by id) and `hf-elmo embed`."""
    require("kiwipiepy", reason="the bundled models' tokenizer needs the korean extra (kiwipiepy)")
    from hf_elmo import ElmoSentenceEmbedder
    from hf_elmo.cli import main
    from hf_elmo.publishing import publish_folder

    reviews = ["정말 재미있고 감동적인 영화였어요", "시간 낭비, 돈 아깝다"]
    for name in ("ko-nsmc", "ko-nsmc-sentiment"):
        publish_folder(name, f"someone/{name}")
        (local, local_tokenizer), (hub, hub_tokenizer) = (
            load_model_and_tokenizer(n) for n in (name, f"someone/{name}")
        )
        assert type(hub) is type(local) and hub_tokenizer.word_vector_ids == local_tokenizer.word_vector_ids, name
        batch, hub_batch = (t(reviews, padding=True, return_tensors="pt") for t in (local_tokenizer, hub_tokenizer))
        assert set(hub_batch) == set(batch) and all(torch.equal(hub_batch[key], batch[key]) for key in batch), name
        with torch.inference_mode():
            torch.testing.assert_close(hub(**hub_batch)[0], local(**batch)[0], atol=FLOAT32_TOLERANCE, rtol=0)
        assert load_tokenizer(f"someone/{name}")(reviews)["input_ids"] == load_tokenizer(name)(reviews)["input_ids"]
    vectors = [ElmoSentenceEmbedder.from_pretrained(n).encode(reviews) for n in ("ko-nsmc", "someone/ko-nsmc")]
    torch.testing.assert_close(vectors[1], vectors[0], atol=FLOAT32_TOLERANCE, rtol=0)
    (tmp_path / "in.txt").write_text("\n".join(reviews) + "\n", encoding="utf-8")
    for name in ("ko-nsmc", "someone/ko-nsmc"):
        out = tmp_path / f"{name.replace('/', '-')}.h5"
        assert main(["embed", name, str(tmp_path / "in.txt"), str(out), "--top", "--pretokenize"]) == 0
    with h5py.File(tmp_path / "ko-nsmc.h5") as local_file, h5py.File(tmp_path / "someone-ko-nsmc.h5") as hub_file:
        for key in ("0", "1"):
            np.testing.assert_allclose(hub_file[key][()], local_file[key][()], atol=FLOAT32_TOLERANCE, rtol=0)
