"""ONNX export: tiny models exported once, run by ONNX Runtime on batches and sentence lengths the export never saw,
compared with PyTorch on every output; the export-friendly formulation compared with the model itself; bad input."""

import inspect
import json
from pathlib import Path

import numpy as np
import pytest
import torch
from utils import FLOAT32_TOLERANCE, min_cosine, require, scan_compiled_afresh, tiny_config, word_vocab_tokenizer

from hf_elmo import (
    ElmoForPreTraining,
    ElmoForQuestionAnswering,
    ElmoForSequenceClassification,
    ElmoForTokenClassification,
    ElmoModel,
    ElmoTokenizer,
)
from hf_elmo.alphabet_elmo import learn_character_vocabulary
from hf_elmo.cli import main
from hf_elmo.onnx_elmo import ONNX_FILE, ElmoForOnnx, ElmoOnnxSession, export_onnx, load_for_export, quantize_int8

require("onnxruntime", reason='the ONNX tests need the onnx extra: pip install "hf_elmo[onnx]"')
require("onnxscript", reason='the ONNX tests need the onnx extra: pip install "hf_elmo[onnx]"')

# The export traces 2 sentences padded to 5 positions; these batches have other sizes and lengths, and rows of
# different lengths (one of a single word, one past any length seen).
BATCHES = [
    [["word"]],
    [["the", "cat", "sat"], ["a"], ["one", "two", "three", "four", "five", "six", "seven", "eight", "nine", "ten"]],
    [["été", "à", "Paris"]] * 2 + [["x"] * 17, ["new", "york"], ["ok"]],
]
TEXTS = [" ".join(sentence) for batch in BATCHES for sentence in batch]


def learned_vocabulary_model(folder: Path) -> tuple[ElmoModel, ElmoTokenizer]:
    """An ELMoForManyLangs-like model: learned characters, a word-embedding input, carry-side highway gates, no
    forget bias, a projection of an equally wide representation; its tokenizer files are written to `folder`."""
    folder.mkdir(parents=True)
    alphabet = learn_character_vocabulary(TEXTS[:3])  # other characters of the batches are unknown
    alphabet.save(folder / "chars.json")
    words = {"<oov>": 0, "<pad>": 1, "<S>": 2, "</S>": 3, "the": 4, "cat": 5, "x": 6}
    (folder / "words.json").write_text(json.dumps(words), encoding="utf-8")
    tokenizer = ElmoTokenizer(
        20, char_vocab_file=str(folder / "chars.json"), word_input_vocab_file=str(folder / "words.json")
    )
    config = tiny_config(
        filters=[[1, 2], [2, 2], [3, 4]],
        n_highway=2,
        activation="relu",
        highway_gate="carry",
        forget_bias=0.0,
        always_project=True,
        word_input_vocab_size=len(words),
        word_input_dim=3,
        **alphabet.config_fields(),
    )
    return ElmoModel(config), tokenizer


def build(kind: str, folder: Path) -> tuple[torch.nn.Module, ElmoTokenizer]:
    torch.manual_seed(0)
    if kind == "learned":
        model, tokenizer = learned_vocabulary_model(folder)
    elif kind == "word_vectors":  # a word vocabulary of the first two batches: the last one's words are unknown
        tokenizer = word_vocab_tokenizer(folder, " ".join(TEXTS[:4]).split(), word_vector_ids=True)
        config = tiny_config(
            num_labels=3,
            task_lstm_dim=5,
            concat_token_representation=True,
            word_vector_dim=6,
            word_vector_vocab_size=tokenizer.word_vocab_size,
        )
        model = ElmoForSequenceClassification(config)
    else:
        tokenizer = ElmoTokenizer(20)
        config = tiny_config(num_labels=3, task_lstm_dim=5, concat_token_representation=True, mix_layer_norm=True)
        model = {
            "bytes": lambda: ElmoModel(tiny_config()),
            "sequence": lambda: ElmoForSequenceClassification(config),
            "token": lambda: ElmoForTokenClassification(config),
        }[kind]()
    with torch.no_grad():  # every weight random, so that a misplaced bias or scalar mix shows
        for parameter in model.parameters():
            parameter.normal_(0.0, 0.5)
    model.eval().save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    return model, tokenizer


# The models `exported` exports; a test that applies to some of them alone asks for those (indirect parametrization).
EXPORTED_KINDS = ("bytes", "learned", "sequence")


@pytest.fixture(scope="module")
def exports(tmp_path_factory):
    """`kind -> (model, tokenizer, exported folder)`, each kind exported once in the module: a test parametrized
    indirectly (`exported` by case) gets a fixture instance per case, and an export takes seconds. The bytes model is
    exported by `hf-elmo export --format onnx`."""
    made = {}

    def export(kind: str):
        if kind not in made:
            root = tmp_path_factory.mktemp(kind)
            model, tokenizer = build(kind, root / "model")
            if kind == "bytes":
                args = ["export", "--format", "onnx", "--model-dir", str(root / "model"), "--output-dir"]
                assert main([*args, str(root / "onnx")]) == 0
            else:
                export_onnx(root / "model", root / "onnx")
            made[kind] = model, tokenizer, root / "onnx"
        return made[kind]

    return export


@pytest.fixture(scope="module", params=EXPORTED_KINDS)
def exported(request, exports):
    """`(model, tokenizer, exported folder)` of one kind (`exports`)."""
    return exports(request.param)


def pytorch_outputs(model, encoding) -> dict[str, np.ndarray]:
    """What PyTorch computes (its fast inference path), under the names of the exported outputs."""
    with torch.no_grad():
        output = model(**encoding, output_hidden_states=True)
    if isinstance(model, ElmoModel):
        return {"last_hidden_state": output.last_hidden_state, "hidden_states": torch.stack(output.hidden_states)}
    return {"logits": output.logits}


def test_onnx_runtime_matches_pytorch_on_unseen_batch_sizes_and_lengths(exported):
    model, tokenizer, folder = exported
    session = ElmoOnnxSession(folder)
    for batch in BATCHES:
        encoding = tokenizer(batch, is_split_into_words=True, padding=True, return_tensors="pt")
        expected = pytorch_outputs(model, encoding)
        outputs = session(**{name: encoding[name].numpy() for name in session.input_names})
        assert list(outputs) == list(expected)
        for name, value in expected.items():
            assert outputs[name].shape == tuple(value.shape), name
            np.testing.assert_allclose(outputs[name], value.numpy(), rtol=0, atol=FLOAT32_TOLERANCE, err_msg=name)


def test_a_classifier_with_word_vectors_exports_their_ids_as_an_input(tmp_path):
    model, tokenizer = build("word_vectors", tmp_path / "model")
    export_onnx(tmp_path / "model", tmp_path / "onnx")
    session = ElmoOnnxSession(tmp_path / "onnx")
    assert session.input_names == ["input_ids", "attention_mask", "word_vector_ids"]
    assert ElmoTokenizer.from_pretrained(tmp_path / "onnx").word_vector_ids  # the export's tokenizer gives them
    for batch in BATCHES:
        encoding = tokenizer(batch, is_split_into_words=True, padding=True, return_tensors="pt")
        expected = pytorch_outputs(model, encoding)["logits"]
        logits = session(**{name: encoding[name].numpy() for name in session.input_names})["logits"]
        np.testing.assert_allclose(logits, expected.numpy(), rtol=0, atol=FLOAT32_TOLERANCE)
    with pytest.raises(ValueError, match="^this graph also takes word_vector_ids"):
        session(encoding["input_ids"], encoding["attention_mask"])


def test_every_recurrence_is_one_scan_over_positions(exported):
    import onnx

    model, _, folder = exported
    graph = onnx.load(folder / ONNX_FILE).graph
    scans = [node for node in graph.node if node.op_type == "Scan"]
    task_lstm_directions = 0 if isinstance(model, ElmoModel) else 2
    assert len(scans) == 2 * model.config.n_layers + task_lstm_directions
    inputs = {
        value.name: [d.dim_param or d.dim_value for d in value.type.tensor_type.shape.dim] for value in graph.input
    }
    assert inputs["input_ids"] == ["batch", "positions", model.config.max_characters_per_token]
    assert inputs["attention_mask"] == ["batch", "positions"]


def test_the_folder_holds_the_config_and_tokenizer_beside_the_graph(exported):
    model, tokenizer, folder = exported
    assert (folder / ONNX_FILE).is_file() and (folder / "config.json").is_file()
    assert not any(path.suffix == ".safetensors" for path in folder.iterdir())
    assert not list(folder.parent.glob(f".{folder.name}.*")), "a staging folder was left behind"
    reloaded = ElmoTokenizer.from_pretrained(folder)
    encoding, again = (t(BATCHES[1], is_split_into_words=True, padding=True) for t in (tokenizer, reloaded))
    assert dict(encoding) == dict(again)
    config = json.loads((folder / "config.json").read_text(encoding="utf-8"))
    assert config["architectures"] == [type(model).__name__]


# Checked on the byte biLM alone: the folder copy and the quantiser are the same for every graph.
@pytest.mark.parametrize("exported", ["bytes"], indirect=True)
def test_int8_quantisation_keeps_the_folder_and_the_direction_of_the_outputs(exported, tmp_path):
    _, tokenizer, folder = exported
    quantized = quantize_int8(folder, tmp_path / "int8")
    assert sorted(path.name for path in quantized.iterdir()) == sorted(path.name for path in folder.iterdir())
    encoding = tokenizer(BATCHES[2], is_split_into_words=True, padding=True, return_tensors="np")
    float32_session, int8_session = ElmoOnnxSession(folder), ElmoOnnxSession(quantized)
    inputs = {name: encoding[name] for name in float32_session.input_names}
    expected, outputs = float32_session(**inputs), int8_session(**inputs)
    top, expected_top = outputs["last_hidden_state"], expected["last_hidden_state"]
    assert not np.allclose(top, expected_top, rtol=0, atol=FLOAT32_TOLERANCE)  # quantised indeed
    # Tiny layers of large random weights quantise coarsely (int8 steps of max |w| / 127 over 8 to 16 inputs): the
    # vectors keep their direction, not their digits. A graph computing something else is far below this.
    mask = torch.from_numpy(encoding["attention_mask"].astype(bool))
    assert min_cosine(torch.from_numpy(top), torch.from_numpy(expected_top), mask) > 0.99


@pytest.mark.parametrize(
    "kind, config",
    [
        ("bytes", dict(cell_clip=None, proj_clip=None, use_skip_connections=False)),
        ("bytes", dict(projection_dim=16, cell_dim=16)),  # no projection, so no projection clip
        ("sequence", dict(pair_classification=True, pooling="max")),
        ("sequence", dict(task_lstm_dim=0, concat_token_representation=False, mix_weights=[0.2, 0.3, 0.5])),
        ("token", dict(task_lstm_dim=3)),
        ("token", dict(use_crf=True)),  # logits are the CRF's emissions
    ],
)
def test_the_export_formulation_equals_the_model(kind, config, monkeypatch):
    """The formulation that is traced, run eagerly: each option of the config computed as the model computes it."""
    torch.manual_seed(1)
    full = dict(num_labels=2, **config) if kind != "bytes" else config
    model_class = {"bytes": ElmoModel, "sequence": ElmoForSequenceClassification, "token": ElmoForTokenClassification}
    model = model_class[kind](tiny_config(**full)).eval()
    with torch.no_grad():
        for parameter in model.parameters():
            parameter.normal_(0.0, 0.5)
    tokenizer = ElmoTokenizer(20)
    forward = ElmoForOnnx(model).eval()
    scan_compiled_afresh()  # the graph's code is run eagerly below
    for batch in BATCHES[1:]:
        encoding = tokenizer(batch, is_split_into_words=True, padding=True, return_tensors="pt")
        inputs = {name: encoding[name] for name in forward.input_names if name in encoding}
        if "token_type_ids" in forward.input_names:  # the second half of each row as a second sentence
            positions = torch.arange(encoding["attention_mask"].shape[1])
            inputs["token_type_ids"] = (positions >= encoding["attention_mask"].sum(1, keepdim=True) // 2).long()
        with torch.no_grad():
            with monkeypatch.context() as tracing:  # as while torch.export traces: every LSTM as a scan
                tracing.setattr(torch.compiler, "is_exporting", lambda: True)
                ours = dict(zip(forward.output_names, forward(**inputs)))
            expected = pytorch_outputs(model, inputs)
        for name, value in expected.items():
            torch.testing.assert_close(ours[name], value, rtol=0, atol=FLOAT32_TOLERANCE)


@pytest.mark.parametrize(
    "model_class, exported_class, output_names",
    [
        (ElmoModel, ElmoModel, ["last_hidden_state", "hidden_states"]),
        (ElmoForPreTraining, ElmoModel, ["last_hidden_state", "hidden_states"]),
        (ElmoForSequenceClassification, ElmoForSequenceClassification, ["logits"]),
        (ElmoForTokenClassification, ElmoForTokenClassification, ["logits"]),
    ],
)
def test_the_folder_architecture_picks_the_graph(tmp_path, model_class, exported_class, output_names):
    model_class(tiny_config(word_vocab_size=10, num_labels=2)).save_pretrained(tmp_path)
    forward, tokenizer = load_for_export(tmp_path)
    assert type(forward.model) is exported_class and forward.output_names == output_names
    assert tokenizer.max_characters_per_token == 20  # a folder without tokenizer files: the config's width


@pytest.mark.parametrize(
    "model_class, overrides, input_names",
    [
        (ElmoModel, {}, ["input_ids", "attention_mask"]),
        (
            ElmoForSequenceClassification,
            {"pair_classification": True},
            ["input_ids", "attention_mask", "token_type_ids"],
        ),
        (
            ElmoForQuestionAnswering,
            {"word_vector_dim": 2, "word_vector_vocab_size": 5},
            ["input_ids", "attention_mask", "word_vector_ids", "token_type_ids"],
        ),
    ],
)
def test_the_wrapper_takes_exactly_the_inputs_the_model_declares(model_class, overrides, input_names):
    """`ElmoForOnnx.forward`'s signature, which `torch.export` binds the graph's inputs by, is the model's
    `graph_input_names` (its classes' `graph_inputs` that its config reads), and its outputs its `graph_outputs`."""
    model = model_class(tiny_config(**overrides))
    forward = ElmoForOnnx(model)
    assert list(inspect.signature(forward.forward).parameters) == model.graph_input_names == input_names
    assert forward.output_names == list(model_class.graph_outputs)
    with pytest.raises(TypeError, match="missing a required argument: 'attention_mask'"):
        forward(torch.zeros(1, 2, 20, dtype=torch.long))


# -- bad input --------------------------------------------------------------------------------------------------------


BAD_INPUTS = [
    (lambda e: {**e, "input_ids": e["input_ids"][0]}, r"input_ids must have shape \(batch, positions, 20\)"),
    (lambda e: {**e, "input_ids": e["input_ids"][..., :10]}, r"input_ids must have shape"),
    (lambda e: {k: v[:0] for k, v in e.items()}, "cannot run on an empty batch"),
    (lambda e: {**e, "attention_mask": e["attention_mask"][:, :-1]}, "attention_mask must have shape"),
    (lambda e: {**e, "attention_mask": e["attention_mask"][:, ::-1]}, "right padding"),
    (lambda e: {**e, "token_type_ids": e["attention_mask"]}, "token_type_ids is not one of them"),
    (lambda e: {**e, "input_ids": e["input_ids"] + 1000}, r"input_ids holds ids from 1000 to \d+, but this model's"),
    (lambda e: {**e, "input_ids": e["input_ids"] - 1}, r"input_ids holds ids from -1 to"),
]
# Only the learned model's graph takes word_input_ids.
WITHOUT_WORD_INPUT_IDS = (lambda e: {k: v for k, v in e.items() if k != "word_input_ids"}, "also takes word_input_ids")


@pytest.mark.parametrize(
    "exported, change, message",
    [(kind, *case) for kind in EXPORTED_KINDS for case in BAD_INPUTS] + [("learned", *WITHOUT_WORD_INPUT_IDS)],
    indirect=["exported"],
)
def test_bad_input_to_the_session_gets_one_line(exported, change, message):
    _, tokenizer, folder = exported
    session = ElmoOnnxSession(folder)
    encoding = tokenizer(BATCHES[1], is_split_into_words=True, padding=True, return_tensors="np")
    encoding = {name: encoding[name] for name in session.input_names}
    with pytest.raises(ValueError, match=message) as error:
        session(**change(encoding))
    assert "\n" not in str(error.value)


def test_a_folder_without_a_graph_is_refused(tmp_path):
    with pytest.raises(ValueError, match="holds no model.onnx; write it with: hf-elmo export --format onnx"):
        ElmoOnnxSession(tmp_path)


def cli_error(capsys, *args) -> tuple[int, str]:
    capsys.readouterr()
    code = main(["export", "--format", "onnx", *map(str, args)])
    err = capsys.readouterr().err.strip()
    assert "\n" not in err, err
    return code, err


def test_bad_model_folders_get_one_line_and_no_output(tmp_path, capsys):
    (tmp_path / "bert").mkdir()
    (tmp_path / "bert" / "config.json").write_text('{"model_type": "bert"}', encoding="utf-8")
    for model_dir, message in [
        (tmp_path / "missing", "no such model folder"),
        (tmp_path / "bert", "not an hf_elmo model folder (model_type 'bert')"),
    ]:
        code, err = cli_error(capsys, "--model-dir", model_dir, "--output-dir", tmp_path / "onnx")
        assert code == 1 and message in err
        assert not (tmp_path / "onnx").exists()


def test_an_existing_folder_is_kept_and_a_failed_export_writes_nothing(tmp_path, capsys, monkeypatch):
    build("bytes", tmp_path / "model")
    (tmp_path / "taken").mkdir()
    (tmp_path / "taken" / "mine.txt").write_text("keep", encoding="utf-8")
    code, err = cli_error(capsys, "--model-dir", tmp_path / "model", "--output-dir", tmp_path / "taken")
    assert code == 1 and "exists and is not empty (pass --overwrite" in err
    assert [path.name for path in (tmp_path / "taken").iterdir()] == ["mine.txt"]

    def failing_export(*args, **kwargs):
        raise RuntimeError("the exporter broke\nwith details on many lines")

    monkeypatch.setattr(torch.onnx, "export", failing_export)
    code, err = cli_error(capsys, "--model-dir", tmp_path / "model", "--output-dir", tmp_path / "onnx")
    assert code == 1 and err.endswith(
        "torch.onnx.export failed on " + str(tmp_path / "model") + ": the exporter broke"
    )
    assert sorted(path.name for path in tmp_path.iterdir()) == ["model", "taken"]
