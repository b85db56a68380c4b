import copy
import json
import logging
import re
from pathlib import Path

import h5py
import numpy as np
import pytest
import torch
from utils import (
    FLOAT32_TOLERANCE,
    assert_clips_reached,
    assert_outputs_match,
    min_cosine,
    model_reaching_the_clips,
    random_batch,
    random_state,
    run_on_path,
    tiny_config,
)

from hf_elmo import (
    ElmoConfig,
    ElmoForPreTraining,
    ElmoForSequenceClassification,
    ElmoForTokenClassification,
    ElmoModel,
    ElmoTokenizer,
    bundled_model_path,
    kernels_elmo,
)
from hf_elmo.modeling_elmo import reverse_valid_steps


def fixture_batches(fixture_sentences):
    """The fixture's protocol: batch i is [sentences[0][i], sentences[1][i], sentences[2][i]]."""
    return [[fixture_sentences[k][i].split(" ") for k in range(3)] for i in range(10)]


def reference_top_layer(fixture_dir, k, i):
    with h5py.File(fixture_dir / f"lm_embeddings_{k}.hdf5", "r") as handle:
        halves = handle[str(i)][()]
    return np.concatenate([halves[0], halves[1]], axis=-1)


def max_diff_to_reference(fixture_dir, top_layer, batch, i) -> float:
    """Largest |diff| between our top layer (boundaries included) and bilm-tf's for batch i, over valid words."""
    return max(
        float(np.abs(top_layer[k, 1 : len(words) + 1].numpy() - reference_top_layer(fixture_dir, k, i)).max())
        for k, words in enumerate(batch)
    )


# The TensorFlow parity runs on every path `choose_path` names on a CPU (`kernels_elmo.PATHS`): the reference code, the
# inference and training kernels, and the code the exported and compiled graphs trace.
@pytest.mark.parametrize("path", kernels_elmo.PATHS)
def test_parity_with_tensorflow_with_state_carried(fixture_dir, fixture_model, fixture_sentences, path, monkeypatch):
    tokenizer = ElmoTokenizer()
    state, worst = None, 0.0
    for i, batch in enumerate(fixture_batches(fixture_sentences)):
        encoded = tokenizer(batch, is_split_into_words=True, padding=True, return_tensors="pt")
        output = run_on_path(fixture_model, path, monkeypatch, **encoded, initial_state=state, return_final_state=True)
        state = tuple(part.detach() for part in output.final_state)
        worst = max(worst, max_diff_to_reference(fixture_dir, output.last_hidden_state.detach(), batch, i))
    print(f"\nparity with bilm-tf on the {path} path, 30 sentences, state carried: max |diff| = {worst:.2e}")
    assert worst <= FLOAT32_TOLERANCE


def test_parity_first_batch_without_state(fixture_dir, fixture_model, fixture_sentences, monkeypatch):
    """The first batch, which needs no carried state, on each path in turn (one test: test_conftest.py runs it)."""
    batch = fixture_batches(fixture_sentences)[0]
    encoded = ElmoTokenizer()(batch, is_split_into_words=True, padding=True, return_tensors="pt")
    for path in kernels_elmo.PATHS:
        top = run_on_path(fixture_model, path, monkeypatch, **encoded).last_hidden_state.detach()
        worst = max_diff_to_reference(fixture_dir, top, batch, 0)
        print(f"\nparity with bilm-tf on the {path} path, batch 0 without state: max |diff| = {worst:.2e}")
        assert worst <= FLOAT32_TOLERANCE, path


@pytest.mark.slow
@pytest.mark.parametrize("tracer", ["export", "compile"])
def test_parity_of_the_traced_graphs(fixture_dir, fixture_model, fixture_sentences, tracer):
    """
    The graphs themselves of the exported and compiled paths, traced from the fixture checkpoint by `torch.export` and
    `torch.compile`, on the first batch: the runs above take their code eagerly. The compiled graph runs on
    `aot_eager` (traced and decomposed as for inductor, which compiling this checkpoint to C++ would take minutes
    here): inductor's code is compared with eager in `test_kernels_elmo.py`.
    """
    batch = fixture_batches(fixture_sentences)[0]
    encoded = ElmoTokenizer()(batch, is_split_into_words=True, padding=True, return_tensors="pt")
    inputs = dict(input_ids=encoded["input_ids"], attention_mask=encoded["attention_mask"])
    if tracer == "export":
        graph = torch.export.export(fixture_model, (), inputs).module()
    else:
        graph = torch.compile(fixture_model, backend="aot_eager")
    with torch.no_grad():
        top = graph(**inputs).last_hidden_state
    worst = max_diff_to_reference(fixture_dir, top, batch, 0)
    print(f"\nparity with bilm-tf, torch.{tracer}'s graph, batch 0 without state: max |diff| = {worst:.2e}")
    assert worst <= FLOAT32_TOLERANCE


def test_later_batches_differ_without_state(fixture_dir, fixture_model, fixture_sentences):
    """The reference really was computed with carried state: dropping it must show."""
    batch = fixture_batches(fixture_sentences)[1]
    encoded = ElmoTokenizer()(batch, is_split_into_words=True, padding=True, return_tensors="pt")
    with torch.no_grad():
        top = fixture_model(**encoded).last_hidden_state
    assert np.abs(top[0, 1:-1][: len(batch[0])].numpy() - reference_top_layer(fixture_dir, 0, 1)).max() > 1e-3


def test_character_encoder_matches_tensorflow(fixture_dir, fixture_model):
    words = (fixture_dir / "vocab_test.txt").read_text(encoding="utf-8").split("\n")
    tokenizer = ElmoTokenizer()
    char_ids = torch.tensor([tokenizer.word_to_row(word) for word in words])
    with torch.no_grad():
        ours = fixture_model.char_encoder(char_ids).numpy()
    with h5py.File(fixture_dir / "elmo_token_embeddings.hdf5", "r") as handle:
        reference = handle["embedding"][()]
    assert ours.shape == reference.shape
    worst = float(np.abs(ours - reference).max())
    print(f"\nparity with bilm-tf, character encoder, {len(words)} words: max |diff| = {worst:.2e}")
    assert worst <= FLOAT32_TOLERANCE


def test_embed_words_encodes_each_distinct_word_once_with_the_same_result(fixture_model):
    tokenizer = ElmoTokenizer()
    batch = tokenizer(
        [["the", "cat", "the", "dog"], ["dog", "the"]], is_split_into_words=True, padding=True, return_tensors="pt"
    )
    mask = batch["attention_mask"].bool()
    with torch.no_grad():
        fast = fixture_model.embed_words(batch["input_ids"], mask)
        exact = fixture_model.char_encoder(batch["input_ids"].view(-1, 50)).view(2, 6, -1) * mask[..., None]
    torch.testing.assert_close(fast, exact, rtol=0, atol=FLOAT32_TOLERANCE)
    assert fast[1, 4:].eq(0).all()


def lstm_equivalent(layer) -> torch.nn.LSTM:
    """`torch.nn.LSTM` with the weights of an unclipped `ElmoLstmLayer` (same i, f, g, o gate order)."""
    lstm = torch.nn.LSTM(
        layer.input_kernel.shape[0], layer.cell_dim, batch_first=True, proj_size=layer.projection_kernel.shape[1]
    )
    with torch.no_grad():  # nn.LSTM keeps its weights as (out, in)
        lstm.weight_ih_l0.copy_(layer.input_kernel.t())
        lstm.weight_hh_l0.copy_(layer.recurrent_kernel.t())
        bias = layer.bias.clone()
        bias[layer.cell_dim : 2 * layer.cell_dim] += layer.config.forget_bias
        lstm.bias_ih_l0.copy_(bias)
        lstm.bias_hh_l0.zero_()
        lstm.weight_hr_l0.copy_(layer.projection_kernel.t())
    return lstm


@pytest.mark.parametrize("recurrence_implementation", ["auto", "reference"])
@pytest.mark.parametrize("forget_bias", [1.0, 0.0])
def test_unclipped_bilm_equals_two_torch_lstm_stacks(forget_bias, recurrence_implementation):
    """
    An independent reference: without clipping or skips, each direction is a stack of nn.LSTM(proj_size=...), whose
    bias holds `config.forget_bias`; under autograd too (the hand-written backward's forward).
    """
    torch.manual_seed(1)
    config = tiny_config(
        cell_clip=None,
        proj_clip=None,
        use_skip_connections=False,
        forget_bias=forget_bias,
        recurrence_implementation=recurrence_implementation,
    )
    model = ElmoModel(config).eval()
    tokenizer = ElmoTokenizer(max_characters_per_token=20)
    words = ["Deep", "contextualized", "word", "representations", "."]
    encoded = tokenizer([words], is_split_into_words=True, return_tensors="pt")
    with torch.no_grad():
        outputs = [model(**encoded, output_hidden_states=True)]
    outputs.append(model(**encoded, output_hidden_states=True))  # under autograd
    with torch.no_grad():
        tokens = model.char_encoder(encoded["input_ids"][0])[None]
        forward, backward = tokens, tokens.flip(1)
        for index in range(model.config.n_layers):
            forward = lstm_equivalent(model.bilm.forward_layers[index])(forward)[0]
            backward = lstm_equivalent(model.bilm.backward_layers[index])(backward)[0]
            expected = torch.cat([forward, backward.flip(1)], dim=-1)
            for output in outputs:
                torch.testing.assert_close(
                    output.hidden_states[index + 1].detach(), expected, rtol=0, atol=FLOAT32_TOLERANCE
                )


@pytest.fixture
def tiny_batch(tiny_tokenizer):
    sentences = [["a", "short", "one"], ["a", "much", "longer", "sentence", "than", "the", "first"], ["x"]]
    return sentences, tiny_tokenizer(sentences, is_split_into_words=True, padding=True, return_tensors="pt")


def test_output_layout(tiny_model, tiny_batch):
    _, batch = tiny_batch
    with torch.no_grad():
        output = tiny_model(**batch, output_hidden_states=True, return_final_state=True)
    config = tiny_model.config
    assert output.last_hidden_state.shape == (3, 9, 2 * config.projection_dim)
    assert len(output.hidden_states) == config.n_layers + 1
    assert output.last_hidden_state is output.hidden_states[-1]
    token_layer = output.hidden_states[0]
    torch.testing.assert_close(token_layer[..., : config.projection_dim], token_layer[..., config.projection_dim :])
    mask = batch["attention_mask"].bool()
    for layer in output.hidden_states:
        assert layer[~mask].eq(0).all()
    hidden, memory = output.final_state
    assert hidden.shape == (config.n_layers, 2, 3, config.projection_dim)
    assert memory.shape == (config.n_layers, 2, 3, config.cell_dim)


def test_padding_and_batch_neighbours_change_nothing(tiny_model, tiny_tokenizer, tiny_batch):
    sentences, batch = tiny_batch
    with torch.no_grad():
        together = tiny_model(**batch, output_hidden_states=True, return_final_state=True)
        for row, words in enumerate(sentences):
            alone = tiny_model(
                **tiny_tokenizer([words], is_split_into_words=True, return_tensors="pt"),
                output_hidden_states=True,
                return_final_state=True,
            )
            n = len(words) + 2
            for layer_together, layer_alone in zip(together.hidden_states, alone.hidden_states):
                torch.testing.assert_close(layer_together[row, :n], layer_alone[0], rtol=0, atol=FLOAT32_TOLERANCE)
            for state_together, state_alone in zip(together.final_state, alone.final_state):
                torch.testing.assert_close(
                    state_together[:, :, row], state_alone[:, :, 0], rtol=0, atol=FLOAT32_TOLERANCE
                )


def test_same_input_same_output(tiny_model, tiny_batch):
    _, batch = tiny_batch
    with torch.no_grad():
        first = tiny_model(**batch).last_hidden_state
        tiny_model(**batch)  # a call in between must leave nothing behind
        second = tiny_model(**batch).last_hidden_state
    assert torch.equal(first, second)


def test_batch_composition_changes_outputs_only_within_float32_rounding(fixture_model, fixture_sentences):
    """Each of the fixture's 30 sentences alone, in its batch of 3 and in one batch of 30: every layer agrees within
    float32 rounding (GEMMs round differently with the batch shape and the CPU), and a repeat is bit-identical."""
    tokenizer = ElmoTokenizer()
    sentences = [words for batch in fixture_batches(fixture_sentences) for words in batch]

    def layers(group):
        encoded = tokenizer(group, is_split_into_words=True, padding=True, return_tensors="pt")
        with torch.no_grad():
            return fixture_model(**encoded, output_hidden_states=True).hidden_states

    alone = [layers([words]) for words in sentences]
    worst = 0.0
    for size in (3, len(sentences)):
        for start in range(0, len(sentences), size):
            together = layers(sentences[start : start + size])
            assert all(torch.equal(a, b) for a, b in zip(together, layers(sentences[start : start + size])))
            for row, words in enumerate(sentences[start : start + size]):
                for layer_together, layer_alone in zip(together, alone[start + row]):
                    diff = (layer_together[row, : len(words) + 2] - layer_alone[0]).abs().max().item()
                    worst = max(worst, diff)
    print(f"\nbatch composition, 30 sentences alone vs in batches of 3 and 30, all layers: max |diff| = {worst:.2e}")
    assert worst <= FLOAT32_TOLERANCE


def test_final_state_is_taken_at_each_rows_last_valid_position(tiny_model, tiny_tokenizer):
    """Feeding a sentence in two halves with the state carried equals feeding it whole (forward direction)."""
    words = ["one", "two", "three", "four", "five", "six"]

    def encode(w):
        return tiny_tokenizer([w], is_split_into_words=True, add_special_tokens=False, return_tensors="pt")

    half = 3
    with torch.no_grad():
        whole = tiny_model(**encode(words), return_final_state=True)
        first = tiny_model(**encode(words[:half]), return_final_state=True)
        second = tiny_model(**encode(words[half:]), initial_state=first.final_state, return_final_state=True)
    projection_dim = tiny_model.config.projection_dim
    torch.testing.assert_close(
        second.last_hidden_state[0, :, :projection_dim],
        whole.last_hidden_state[0, half:, :projection_dim],
        rtol=0,
        atol=FLOAT32_TOLERANCE,
    )
    torch.testing.assert_close(second.final_state[0][:, 0], whole.final_state[0][:, 0], rtol=0, atol=FLOAT32_TOLERANCE)


def test_reverse_valid_steps():
    x = torch.arange(8).view(2, 4, 1)
    reversed_x = reverse_valid_steps(x, torch.tensor([3, 4]))
    assert reversed_x[..., 0].tolist() == [[2, 1, 0, 3], [7, 6, 5, 4]]


@pytest.mark.parametrize(
    "overrides",
    [
        dict(use_skip_connections=False),
        dict(activation="tanh"),
        dict(n_highway=0),
        dict(n_characters=261),
        dict(max_characters_per_token=30),
        dict(projection_dim=16, cell_dim=16),
        dict(cell_clip=None, proj_clip=None),
        dict(n_layers=3),
    ],
    ids=lambda overrides: ",".join(f"{k}={v}" for k, v in overrides.items()),
)
def test_other_shapes_run_and_respect_padding(overrides):
    config = tiny_config(**overrides)
    model = ElmoModel(config).eval()
    tokenizer = ElmoTokenizer(max_characters_per_token=config.max_characters_per_token)
    batch = tokenizer([["a", "b", "c"], ["d"]], is_split_into_words=True, padding=True, return_tensors="pt")
    with torch.no_grad():
        output = model(**batch, output_hidden_states=True)
        alone = model(**tokenizer([["d"]], is_split_into_words=True, return_tensors="pt")).last_hidden_state
    assert len(output.hidden_states) == config.n_layers + 1
    assert torch.isfinite(output.last_hidden_state).all()
    torch.testing.assert_close(output.last_hidden_state[1, :3], alone[0], rtol=0, atol=FLOAT32_TOLERANCE)


def test_clipping_bounds_the_outputs():
    torch.manual_seed(0)
    model = ElmoModel(tiny_config(use_skip_connections=False, proj_clip=0.05)).eval()
    with torch.no_grad():
        for layer in list(model.bilm.forward_layers) + list(model.bilm.backward_layers):
            layer.projection_kernel.mul_(100.0)
    batch = ElmoTokenizer(max_characters_per_token=20)(
        [["a", "b", "c"]], is_split_into_words=True, return_tensors="pt"
    )
    with torch.no_grad():
        top = model(**batch).last_hidden_state
    assert top.abs().max() <= 0.05 + 1e-7 and top.abs().max() > 0.04


@pytest.mark.parametrize("path", kernels_elmo.PATHS)
def test_every_path_clips_as_the_reference_does(path, monkeypatch):
    """
    On weights whose memories and outputs reach the clips (`model_reaching_the_clips`), every path bounds the final
    memory by `cell_clip` and the first layer's outputs by `proj_clip`, reaches both, and gives the reference's
    layers and final state, from a random initial state on a padded batch.
    """
    config = tiny_config(cell_clip=1.0, proj_clip=0.5)
    model = model_reaching_the_clips(config)
    input_ids, mask = random_batch(config, [9, 4, 1, 9, 2])
    inputs = dict(input_ids=input_ids, attention_mask=mask, initial_state=random_state(config, 5))
    output = run_on_path(model, path, monkeypatch, **inputs, return_final_state=True, output_hidden_states=True)
    memory, outputs = output.final_state[1].detach(), output.hidden_states[1].detach()
    assert memory.abs().max() <= config.cell_clip and outputs.abs().max() <= config.proj_clip
    assert_clips_reached(model.bilm.forward_layers[0], memory, outputs)
    exact = run_on_path(model, "reference", monkeypatch, **inputs, return_final_state=True, output_hidden_states=True)
    assert_outputs_match(output, exact)


def test_bad_input_is_refused(tiny_model, tiny_batch):
    _, batch = tiny_batch
    ids, mask = batch["input_ids"], batch["attention_mask"]
    with pytest.raises(ValueError, match="shape"):
        tiny_model(ids[..., :10])
    with pytest.raises(ValueError, match="empty batch"):
        tiny_model(ids[:0])
    with pytest.raises(ValueError, match=r"^cannot run on an empty batch \(input_ids of shape \(3, 0, 20\)\)$"):
        tiny_model(ids[:, :0], attention_mask=mask[:, :0])
    with pytest.raises(TypeError, match=r"^input_ids must hold integer ids, got torch.float32$"):
        tiny_model(ids.float())
    with pytest.raises(TypeError, match=r"^input_ids must be a torch.Tensor, got list: tokenize with return_tensors"):
        tiny_model(ids.tolist())
    rows = tiny_model.config.alphabet.table_rows
    for bad in (rows, -1):
        wrong = ids.clone()
        wrong[0, 0, 0] = bad
        low, high = min(bad, 0), max(bad, int(ids.max()))
        with pytest.raises(ValueError) as raised:
            tiny_model(wrong, attention_mask=mask)
        assert str(raised.value) == (
            f"input_ids holds ids from {low} to {high}, but this model's table has {rows} rows (ids 0 to {rows - 1}): "
            "ids of another tokenizer?"
        )
    with pytest.raises(ValueError, match="does not match"):
        tiny_model(ids, attention_mask=mask[:, :3])
    with pytest.raises(ValueError, match="right padding"):
        tiny_model(ids, attention_mask=mask.flip(1))
    with pytest.raises(ValueError, match="initial_state"):
        tiny_model(ids, initial_state=(torch.zeros(1), torch.zeros(1)))
    with pytest.raises(TypeError, match="unexpected"):
        tiny_model(ids, labels=torch.zeros(3))


def test_word_input_ids_outside_the_word_table_are_one_line():
    """A word input's ids index its own table (`word_input_vocab_size` rows): one past it is refused by name, as the
    character ids are, not an `IndexError` from inside the lookup."""
    torch.manual_seed(0)
    model = ElmoModel(tiny_config(word_input_vocab_size=6, word_input_dim=4)).eval()
    input_ids = torch.randint(1, 50, (2, 3, 20))
    with torch.no_grad():
        model(input_ids=input_ids, word_input_ids=torch.tensor([[1, 5, 2], [1, 0, 2]]))
        with pytest.raises(ValueError) as raised:
            model(input_ids=input_ids, word_input_ids=torch.tensor([[1, 5, 2], [1, 6, 2]]))
    assert str(raised.value) == (
        "word_input_ids holds ids from 1 to 6, but this model's table has 6 rows (ids 0 to 5): ids of another "
        "tokenizer?"
    )


def test_gradients_reach_every_parameter(tiny_model, tiny_batch):
    _, batch = tiny_batch
    tiny_model.train()
    tiny_model(**batch).last_hidden_state.pow(2).sum().backward()
    missing = [name for name, p in tiny_model.named_parameters() if p.grad is None or not p.grad.abs().sum() > 0]
    assert missing == []


def test_initialisation_follows_bilm_tf():
    torch.manual_seed(0)
    model = ElmoModel(tiny_config())
    assert model.char_encoder.char_embedding.weight[0].eq(0).all()
    assert model.char_encoder.highways[0].gate_bias.eq(-2.0).all()
    assert model.bilm.forward_layers[0].bias.eq(0).all()
    assert model.bilm.forward_layers[0].input_kernel.std() > 0


def test_save_and_load_keep_outputs(tiny_model, tiny_batch, tmp_path):
    _, batch = tiny_batch
    tiny_model.save_pretrained(tmp_path)
    loaded = ElmoModel.from_pretrained(tmp_path).eval()
    with torch.no_grad():
        assert torch.equal(loaded(**batch).last_hidden_state, tiny_model(**batch).last_hidden_state)


@pytest.mark.parametrize("mode", ["bfloat16 weights", "float16 weights", "bfloat16 autocast"])
def test_reduced_precision_keeps_the_top_layer_direction(fixture_model, fixture_sentences, mode):
    """
    The reduced-precision bar of the speed goals: at every valid position, the top layer's cosine similarity with
    fp32 stays >= 0.999 (trained weights, the fixture's 30 sentences in one padded batch).
    """
    tokenizer = ElmoTokenizer(max_characters_per_token=fixture_model.config.max_characters_per_token)
    sentences = [sentence.split() for batch in fixture_sentences for sentence in batch]
    encoded = tokenizer(sentences, is_split_into_words=True, padding=True, return_tensors="pt")
    inputs = dict(input_ids=encoded["input_ids"], attention_mask=encoded["attention_mask"])
    with torch.inference_mode():
        reference = fixture_model(**inputs).last_hidden_state
        if mode == "bfloat16 autocast":
            with torch.autocast("cpu", dtype=torch.bfloat16):
                reduced = fixture_model(**inputs).last_hidden_state
        else:
            dtype = torch.bfloat16 if mode == "bfloat16 weights" else torch.float16
            reduced = copy.deepcopy(fixture_model).to(dtype)(**inputs).last_hidden_state
    # Reduced precision ran: in the weights' dtype, or under autocast with the products in bfloat16 and the state in
    # float32.
    assert reduced.dtype != torch.float32 if "weights" in mode else not torch.equal(reduced, reference)
    cosine = min_cosine(reduced, reference, encoded["attention_mask"])
    print(f"\n{mode}: top layer cosine with fp32, min {cosine:.5f}")
    assert cosine >= 0.999


def windowed_and_one_pass(model, input_ids, windows, mode, monkeypatch):
    """
    `windowed_hidden_states` of row 0 for each window size, on the path `mode` picks ("fast": no autograd;
    "autograd": the hand-written backward's forward; "exact": the reference paths), and one pass on the exact path.
    """
    monkeypatch.setattr(model.config, "recurrence_implementation", "reference")
    with torch.no_grad():
        one_pass = [layer[0] for layer in model(input_ids, output_hidden_states=True).hidden_states]
    monkeypatch.setattr(model.config, "recurrence_implementation", "reference" if mode == "exact" else "auto")
    with torch.set_grad_enabled(mode == "autograd"):
        windowed = {window: model.windowed_hidden_states(input_ids[0], window) for window in windows}
    return windowed, one_pass


@pytest.mark.parametrize("mode", ["fast", "autograd", "exact"])
@pytest.mark.parametrize("skip_connections", [True, False])
def test_windowed_hidden_states_equal_one_pass(skip_connections, mode, monkeypatch):
    torch.manual_seed(0)
    model = ElmoModel(tiny_config(n_layers=3, use_skip_connections=skip_connections)).eval()
    words = "the cat sat on the mat while a dog , far from the cat , barked at the moon".split() * 3
    input_ids = ElmoTokenizer(max_characters_per_token=20)([words], is_split_into_words=True, return_tensors="pt")[
        "input_ids"
    ]
    positions = input_ids.shape[1]
    windowed, one_pass = windowed_and_one_pass(
        model, input_ids, (1, 3, 8, positions, positions + 5), mode, monkeypatch
    )
    for layers in windowed.values():
        assert len(layers) == 4
        for got, want in zip(layers, one_pass):
            torch.testing.assert_close(got.detach(), want, atol=FLOAT32_TOLERANCE, rtol=0)


def test_windowed_hidden_states_on_the_original_checkpoint(fixture_model, fixture_sentences, monkeypatch):
    words = " ".join(fixture_sentences[0][:3]).split()
    tokenizer = ElmoTokenizer(max_characters_per_token=fixture_model.config.max_characters_per_token)
    input_ids = tokenizer([words], is_split_into_words=True, return_tensors="pt")["input_ids"]
    windowed, one_pass = windowed_and_one_pass(fixture_model, input_ids, (5,), "fast", monkeypatch)
    for got, want in zip(windowed[5], one_pass, strict=True):
        torch.testing.assert_close(got, want, atol=FLOAT32_TOLERANCE, rtol=0)


# -- loading: a biLM never runs on weights it did not load ---------------------------------------------------------


def saved_with_config(source, folder, **changes):
    """`folder`: the files of the model folder `source` (linked), with `changes` made to its `config.json`."""
    folder.mkdir()
    for path in source.iterdir():
        if path.name != "config.json":
            (folder / path.name).symlink_to(path)
    saved = json.loads((source / "config.json").read_text())
    (folder / "config.json").write_text(json.dumps({**saved, **changes}))
    return folder


HEAD_OPTIONS = {ElmoForPreTraining: dict(word_vocab_size=10), ElmoForSequenceClassification: dict(num_labels=2)}


@pytest.mark.parametrize(
    "saved, change, weights",
    [
        ({}, dict(n_layers=3), "missing"),
        ({}, dict(n_layers=1), "unexpected"),
        ({}, dict(projection_dim=4), "of another size"),
        ({}, dict(cell_dim=32), "of another size"),
        ({}, dict(n_highway=2), "missing"),
        ({}, dict(filters=[[1, 4], [2, 8], [3, 8], [4, 4]]), "missing: .*; of another size"),
        ({}, dict(filters=[[1, 4], [2, 8], [3, 4]]), "of another size"),
        ({}, dict(char_embedding_dim=6), "of another size"),
        (dict(filters=[[1, 4], [2, 4]]), dict(always_project=True), "missing"),  # 8 filters: no projection saved
    ],
)
@pytest.mark.parametrize("model_class", [ElmoModel, ElmoForPreTraining, ElmoForSequenceClassification])
def test_a_config_that_disagrees_with_the_bilm_weights_is_refused_naming_the_field(
    tmp_path, caplog, model_class, saved, change, weights
):
    ElmoModel(tiny_config(**saved)).save_pretrained(tmp_path / "bilm")
    folder = saved_with_config(tmp_path / "bilm", tmp_path / "changed", **change)
    ((field, value),) = change.items()
    held = getattr(tiny_config(**saved), field)
    message = (
        f"^{model_class.__name__} cannot load the biLM weights of {re.escape(str(folder))}: "
        f"{re.escape(f'{field} is {value!r} but the weights hold {held!r}')} "
        rf"\({weights}: [^()]+\); set {re.escape(f'{field}={held!r}')} in the config$"
    )
    # Not even when told to reinitialise weights of other sizes, and before transformers' load report.
    for ignore_mismatched_sizes in (False, True):
        with caplog.at_level(logging.WARNING), pytest.raises(ValueError, match=message):
            model_class.from_pretrained(
                folder, ignore_mismatched_sizes=ignore_mismatched_sizes, **HEAD_OPTIONS.get(model_class, {})
            )
    assert not caplog.records


def test_weights_the_config_has_no_place_for_are_counted_when_their_shapes_are_not_known(tmp_path):
    ElmoModel(tiny_config()).save_pretrained(tmp_path / "bilm")
    folder = saved_with_config(tmp_path / "bilm", tmp_path / "changed", filters=[[1, 4], [2, 8]])
    message = (
        r"^ElmoModel cannot load the biLM weights of .*: filters is \[\[1, 4\], \[2, 8\]\] but the weights hold 3 "
        r"convolutions \(unexpected: char_encoder.convolutions.2.bias, char_encoder.convolutions.2.weight; of another "
        r"size: .*\); make the config describe these weights$"
    )
    with pytest.raises(ValueError, match=message):
        ElmoModel.from_pretrained(folder)


def test_the_bundled_bilm_with_another_layer_count_is_refused(tmp_path):
    folder = saved_with_config(Path(bundled_model_path("ko-nsmc")), tmp_path / "bad", n_layers=3)
    message = (
        r"^ElmoModel cannot load the biLM weights of .*: n_layers is 3 but the weights hold 2 \(missing: "
        r"bilm.backward_layers.2.bias, bilm.backward_layers.2.input_kernel, bilm.backward_layers.2.projection_kernel "
        r"and 5 more\); set n_layers=2 in the config$"
    )
    with pytest.raises(ValueError, match=message):
        ElmoModel.from_pretrained(folder)
    shipped_width = ElmoConfig.from_pretrained(bundled_model_path("ko-nsmc")).projection_dim
    assert shipped_width != 64
    with pytest.raises(
        ValueError, match=rf"^ElmoModel cannot load .*: projection_dim is 64 but the weights hold {shipped_width} "
    ):
        ElmoModel.from_pretrained(
            saved_with_config(Path(bundled_model_path("ko-nsmc")), tmp_path / "narrow", projection_dim=64)
        )


def test_a_head_folder_whose_bilm_disagrees_is_refused_by_the_head_and_the_bilm(tmp_path):
    ElmoForSequenceClassification(tiny_config(num_labels=2)).save_pretrained(tmp_path / "head")
    folder = saved_with_config(tmp_path / "head", tmp_path / "changed", n_layers=1)
    with pytest.raises(
        ValueError, match=r"^ElmoForSequenceClassification cannot load .*: n_layers is 1 .*\(unexpected: elmo\.bilm\."
    ):
        ElmoForSequenceClassification.from_pretrained(folder)
    with pytest.raises(ValueError, match=r"^ElmoModel cannot load .*: n_layers is 1 .*\(unexpected: elmo\.bilm\."):
        ElmoModel.from_pretrained(folder)


def test_a_state_dict_that_disagrees_with_the_config_is_refused(tiny_model):
    state_dict = tiny_model.state_dict()
    message = r"^ElmoModel cannot load the biLM weights of the given state_dict: n_layers is 3 but the weights hold 2"
    with pytest.raises(ValueError, match=message):
        ElmoModel.from_pretrained(None, config=tiny_config(n_layers=3), state_dict=state_dict)
    loaded = ElmoModel.from_pretrained(None, config=tiny_config(), state_dict=state_dict)
    assert all(torch.equal(weight, state_dict[name]) for name, weight in loaded.state_dict().items())


def test_an_empty_state_dict_with_a_config_initialises_every_weight():
    """transformers' convention (`test_can_init_all_missing_weights`): no checkpoint, so nothing is refused."""
    torch.manual_seed(0)
    loaded = ElmoModel.from_pretrained(None, config=tiny_config(), state_dict={})
    torch.manual_seed(0)
    initialised = ElmoModel(tiny_config())
    assert loaded.state_dict().keys() == initialised.state_dict().keys()
    assert all(weight.isfinite().all() for weight in loaded.state_dict().values())
    assert loaded.bilm.forward_layers[0].bias.abs().max() == 0  # as `_init_weights` sets it


@pytest.mark.parametrize(
    "model_class, options, new_layers",
    [
        (ElmoForSequenceClassification, dict(num_labels=2), {"classifier", "task_encoder.mix"}),
        (
            ElmoForTokenClassification,
            dict(num_labels=3, use_crf=True, task_lstm_dim=4),
            {"classifier", "task_encoder.mix", "task_encoder.lstm", "crf"},
        ),
        (ElmoForPreTraining, dict(word_vocab_size=10), {"softmax"}),
    ],
)
def test_a_head_on_a_bilm_folder_loads_the_bilm_and_initialises_its_new_layers(
    tmp_path, model_class, options, new_layers
):
    bilm = ElmoModel(tiny_config())
    bilm.save_pretrained(tmp_path)
    model, loading_info = model_class.from_pretrained(tmp_path, output_loading_info=True, **options)
    assert {
        next(prefix for prefix in new_layers if key.startswith(prefix)) for key in loading_info["missing_keys"]
    } == new_layers
    assert not loading_info["unexpected_keys"] and not loading_info["mismatched_keys"]
    for name, weight in bilm.state_dict().items():
        assert torch.equal(model.elmo.state_dict()[name], weight), name


def test_the_bilm_loads_from_a_pre_training_folder_without_its_softmax_and_from_a_head_folder(tmp_path, caplog):
    pretraining = ElmoForPreTraining(tiny_config(word_vocab_size=10))
    pretraining.save_pretrained(tmp_path / "pretraining")
    with caplog.at_level(logging.WARNING):
        bilm, loading_info = ElmoModel.from_pretrained(tmp_path / "pretraining", output_loading_info=True)
    assert not any(loading_info.values()) and not caplog.records
    for name, weight in pretraining.elmo.state_dict().items():
        assert torch.equal(bilm.state_dict()[name], weight), name
    ElmoForSequenceClassification(tiny_config(num_labels=2)).save_pretrained(tmp_path / "head")
    _, loading_info = ElmoModel.from_pretrained(tmp_path / "head", output_loading_info=True)
    assert {key.split(".")[0] for key in loading_info["unexpected_keys"]} == {"classifier", "task_encoder"}
    assert not loading_info["missing_keys"]
