"""Pre-training from scratch: ElmoForPreTraining's losses, the word vocabulary, and the Trainer script end to end."""

import errno
import json
import logging
import math
import os
import platform
import random
import subprocess
import sys
from collections import Counter
from pathlib import Path

import pytest
import torch
from transformers import EvalPrediction
from utils import FLOAT32_TOLERANCE, GRADIENT_TOLERANCE, assert_gradients_match, require, tiny_config, torch_threads

from hf_elmo import (
    ElmoForSequenceClassification,
    ElmoModel,
    ElmoTokenizer,
    kernels_cpu_products,
    kernels_elmo,
    modeling_elmo,
)
from hf_elmo.folders import lock_output
from hf_elmo.modeling_elmo import ElmoForPreTraining
from hf_elmo.pretraining import (
    NEGATIVE_SAMPLES,
    ElmoPreTrainingCollator,
    LineDataset,
    SplitText,
    build_word_vocab,
    count_unknown_words,
    describe_run,
    direction_nll_sums,
    main,
    perplexity_metrics,
)
from hf_elmo.sentence_weighting import WordCounts

WORDS = [f"w{i}" for i in range(24)]


def structured_text(path: Path, n_sentences: int, seed: int) -> list[list[str]]:
    """Sentences that walk the 24 words in steps of 3 from a random start: each word fixes its neighbours."""
    rng = random.Random(seed)
    sentences = []
    for _ in range(n_sentences):
        start, length = rng.randrange(len(WORDS)), rng.randint(3, 5)
        sentences.append([WORDS[(start + 3 * k) % len(WORDS)] for k in range(length)])
    path.write_text("".join(" ".join(s) + "\n" for s in sentences), encoding="utf-8")
    return sentences


def pretraining_args(tmp_path: Path, output_dir: Path, max_steps: int) -> list[str]:
    return [
        "--train-file",
        str(tmp_path / "train.txt"),
        "--validation-file",
        str(tmp_path / "valid.txt"),
        "--output-dir",
        str(output_dir),
        "--preset",
        "tiny",
        "--projection-dim",
        "16",
        "--cell-dim",
        "32",
        "--max-characters-per-token",
        "20",
        "--n-negative-samples",
        "8",
        "--min-count",
        "1",
        "--batch-size",
        "8",
        "--learning-rate",
        "1e-2",
        "--max-steps",
        str(max_steps),
        "--eval-steps",
        str(max_steps),
        "--save-steps",
        str(max_steps),
        "--logging-steps",
        str(max_steps),
    ]


@pytest.fixture
def vocab_tokenizer(tmp_path) -> ElmoTokenizer:
    """A tiny tokenizer with a word vocabulary of the 24 structured words."""
    vocab_file = tmp_path / "word_vocab.json"
    build_word_vocab([" ".join(WORDS)]).save(str(vocab_file))
    return ElmoTokenizer(max_characters_per_token=20, vocab_file=str(vocab_file))


def labelled_batch(tokenizer: ElmoTokenizer, sentences: list[list[str]]):
    """`sentences` (lists of words) padded into one batch of tensors, with word labels."""
    return tokenizer(sentences, is_split_into_words=True, padding=True, return_word_labels=True, return_tensors="pt")


def uneven_batch(tokenizer: ElmoTokenizer, rng: random.Random, rows: int):
    """`rows` sentences of 1 to 9 random words, padded, with word labels."""
    return labelled_batch(tokenizer, [[rng.choice(WORDS) for _ in range(rng.randint(1, 9))] for _ in range(rows)])


# Two sentences of uneven lengths for the sampled loss.
SAMPLED_LOSS_SENTENCES = [["w0", "w3", "w6", "w9"], ["w1", "w4"]]


def tiny_pretraining_model(vocab_size: int, n_negative_samples: int = 8, seed: int = 0) -> ElmoForPreTraining:
    torch.manual_seed(seed)
    return ElmoForPreTraining(tiny_config(word_vocab_size=vocab_size, n_negative_samples=n_negative_samples))


# -- the model --------------------------------------------------------------------------------------------------------


def test_loss_is_the_mean_nll_of_next_and_previous_words(vocab_tokenizer):
    model = tiny_pretraining_model(vocab_tokenizer.word_vocab_size).eval()
    batch = labelled_batch(vocab_tokenizer, [["w0", "w3", "w6"], ["w9"]])
    output = model(**batch)
    forward_lp, backward_lp = model.word_log_probs(batch["input_ids"], batch["attention_mask"])
    forward_nll, backward_nll = [], []
    for row, length in enumerate(batch["attention_mask"].sum(dim=1).tolist()):
        labels = batch["labels"][row]
        forward_nll += [-forward_lp[row, t, labels[t + 1]] for t in range(length - 1)]
        backward_nll += [-backward_lp[row, t, labels[t - 1]] for t in range(1, length)]
    expected_forward, expected_backward = torch.stack(forward_nll).mean(), torch.stack(backward_nll).mean()
    torch.testing.assert_close(output.forward_loss, expected_forward)
    torch.testing.assert_close(output.backward_loss, expected_backward)
    torch.testing.assert_close(output.loss, (expected_forward + expected_backward) / 2)


@pytest.mark.parametrize(
    "device",
    [
        "cpu",
        pytest.param(
            "cuda",
            marks=[pytest.mark.gpu, pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")],
        ),
    ],
)
def test_fast_training_path_gives_the_reference_loss_and_gradients(vocab_tokenizer, monkeypatch, device):
    """
    A training step's sampled loss and every gradient (character CNN, biLM, softmax) on sentences of uneven lengths:
    the default path (recurrence on the valid positions, hand-written backward) against autograd through the
    reference code, with the same negatives. (The recurrence alone is also checked in float64 in
    test_kernels_lstm_training.)
    """
    model = tiny_pretraining_model(vocab_tokenizer.word_vocab_size).train().to(device)
    batch = uneven_batch(vocab_tokenizer, random.Random(0), 7).to(device)
    fast_calls = []
    handwritten = kernels_elmo.ALL_RECURRENCES["training"]
    monkeypatch.setitem(
        kernels_elmo.ALL_RECURRENCES, "training", lambda *args: fast_calls.append(1) or handwritten(*args)
    )
    results = {}
    for implementation in ("reference", "auto"):
        monkeypatch.setattr(model.config, "recurrence_implementation", implementation)
        torch.manual_seed(1)  # the same sampled negatives
        loss = model(**batch).loss
        parameters = dict(model.named_parameters())
        results[implementation] = (
            loss.item(),
            dict(zip(parameters, torch.autograd.grad(loss, list(parameters.values())))),
        )
    assert len(fast_calls) == model.config.n_layers  # each layer's two directions at once, on the default path only
    (fast_loss, fast_gradients), (exact_loss, exact_gradients) = results["auto"], results["reference"]
    assert abs(fast_loss - exact_loss) <= FLOAT32_TOLERANCE
    assert_gradients_match(fast_gradients, exact_gradients, **GRADIENT_TOLERANCE)


@pytest.mark.skipif(not torch.backends.mkldnn.is_available(), reason="needs a torch built with oneDNN")
def test_fast_training_path_follows_the_trainers_fused_optimizer(vocab_tokenizer, monkeypatch):
    """
    Several steps of the Trainer's default optimizer (fused AdamW, which writes the weights without bumping their
    version counter) give the reference path's losses: the recurrence never reads a stale prepacked copy of a kernel.
    """
    rng = random.Random(0)
    batches = [uneven_batch(vocab_tokenizer, rng, 6) for _ in range(3)]
    losses = {}
    for implementation in ("reference", "auto"):
        model = tiny_pretraining_model(vocab_tokenizer.word_vocab_size).train()
        model.config.recurrence_implementation = implementation
        monkeypatch.setattr(kernels_cpu_products, "fastest_library", lambda *shape: "onednn")
        optimizer = torch.optim.AdamW(model.parameters(), lr=0.05, fused=True)
        losses[implementation] = []
        for step, batch in enumerate(batches):
            torch.manual_seed(step)  # the same sampled negatives
            loss = model(**batch).loss
            loss.backward()
            optimizer.step()
            optimizer.zero_grad()
            losses[implementation].append(loss.item())
    assert losses["auto"] == pytest.approx(losses["reference"], abs=FLOAT32_TOLERANCE)


def test_forward_lm_never_sees_the_word_it_predicts(vocab_tokenizer):
    model = tiny_pretraining_model(vocab_tokenizer.word_vocab_size).eval()
    words = ["w0", "w3", "w6", "w9", "w12"]
    perturbed_position = 3  # position of "w6" (<S> is position 0)
    perturbed = list(words)
    perturbed[perturbed_position - 1] = "w21"
    batch = vocab_tokenizer([words, perturbed], is_split_into_words=True, padding=True, return_tensors="pt")
    forward_lp, backward_lp = model.word_log_probs(batch["input_ids"], batch["attention_mask"])
    # The forward LM predicts the word at t + 1 from positions <= t; the backward LM the word at t - 1 from >= t.
    torch.testing.assert_close(forward_lp[0, :perturbed_position], forward_lp[1, :perturbed_position], rtol=0, atol=0)
    torch.testing.assert_close(
        backward_lp[0, perturbed_position + 1 :], backward_lp[1, perturbed_position + 1 :], rtol=0, atol=0
    )
    assert not torch.allclose(forward_lp[0, perturbed_position], forward_lp[1, perturbed_position])
    assert not torch.allclose(backward_lp[0, perturbed_position], backward_lp[1, perturbed_position])


def test_lstm_dropout_drops_each_layers_input_and_the_top_before_the_softmax(vocab_tokenizer):
    """
    bilm-tf's placement: in training, each LSTM layer and its skip connection read the dropped-out layer below, and
    the softmax the dropped-out top layer; the returned layers are those the LSTMs wrote. Eval mode and a frozen biLM
    drop nothing.
    """
    vocab_size = vocab_tokenizer.word_vocab_size
    plain = tiny_pretraining_model(vocab_size)
    dropped = ElmoForPreTraining(tiny_config(word_vocab_size=vocab_size, n_negative_samples=8, lstm_dropout=0.5))
    dropped.load_state_dict(plain.state_dict())
    batch = uneven_batch(vocab_tokenizer, random.Random(0), rows=4)
    with torch.no_grad():
        torch.testing.assert_close(dropped.eval()(**batch).loss, plain.eval()(**batch).loss, rtol=0, atol=0)

    seen = {"input": [], "top": []}  # (what a dropout module was given, what it returned), call by call
    for name, module in (("input", dropped.elmo.bilm.input_dropout), ("top", dropped.output_dropout)):
        module.register_forward_hook(lambda _, inputs, output, name=name: seen[name].append((inputs[0], output)))
    with torch.no_grad():
        layers = dropped.train()(**batch, output_hidden_states=True).hidden_states
    mask, dim = batch["attention_mask"].bool(), dropped.config.projection_dim
    lengths = mask.sum(1)
    hidden, memory = torch.zeros(2, len(mask), dim), torch.zeros(2, len(mask), dropped.config.cell_dim)
    assert len(seen["input"]) == dropped.config.n_layers and len(seen["top"]) == 1
    for index, (given, read) in enumerate(seen["input"]):
        torch.testing.assert_close(given, layers[index], rtol=0, atol=0)
        assert (read == 0).any() and not torch.equal(read, given)
        with torch.no_grad():
            (forward, backward), _, _ = dropped.elmo.bilm.run_layer(
                index,
                read[..., :dim],
                modeling_elmo.reverse_valid_steps(read[..., dim:], lengths),
                mask,
                hidden,
                memory,
            )
        expected = torch.cat([forward, modeling_elmo.reverse_valid_steps(backward, lengths)], dim=-1)
        torch.testing.assert_close(layers[index + 1], expected, rtol=FLOAT32_TOLERANCE, atol=FLOAT32_TOLERANCE)
    given, read = seen["top"][0]
    torch.testing.assert_close(given, layers[-1], rtol=0, atol=0)
    assert (read == 0).any() and not torch.equal(read, given)

    # A frozen biLM (a head's `freeze_bilm`) reads its layers undropped, in training mode too.
    dropped.elmo.requires_grad_(False)
    with torch.no_grad():
        frozen = dropped.elmo(batch["input_ids"], batch["attention_mask"], output_hidden_states=True).hidden_states
        expected = plain.eval().elmo(batch["input_ids"], batch["attention_mask"], output_hidden_states=True)
    assert dropped.training and len(seen["input"]) == dropped.config.n_layers
    for ours, theirs in zip(frozen, expected.hidden_states, strict=True):
        torch.testing.assert_close(ours, theirs, rtol=0, atol=0)


def test_sampled_loss_agrees_with_the_full_loss_in_expectation(vocab_tokenizer):
    model = tiny_pretraining_model(vocab_tokenizer.word_vocab_size, n_negative_samples=100)
    with torch.no_grad():  # a spread of logits, so that the sampled estimate is not trivially exact
        model.softmax.weight.mul_(4.0)
    batch = labelled_batch(vocab_tokenizer, SAMPLED_LOSS_SENTENCES)
    with torch.no_grad():
        full = model.eval()(**batch)
        biLM_output = model.elmo(batch["input_ids"], batch["attention_mask"], return_dict=True)
        model.elmo.forward = lambda *args, **kwargs: biLM_output  # the biLM is deterministic: run it once
        model.train()
        torch.manual_seed(1)
        draws = torch.stack(
            [torch.stack([o.forward_loss, o.backward_loss]) for o in (model(**batch) for _ in range(500))]
        )
    full_losses = torch.stack([full.forward_loss, full.backward_loss])
    print(
        f"full softmax losses {full_losses.tolist()}, mean of 500 sampled {draws.mean(0).tolist()}, "
        f"std of one draw {draws.std(0).tolist()}"
    )
    assert (draws.std(0) > 1e-2).all()  # the training loss is sampled, not the full one
    # Within three standard errors of the mean of 500 draws (the seed is fixed: the draws are the same on any CPU).
    standard_errors = (draws.mean(0) - full_losses).abs() / (draws.std(0) / math.sqrt(len(draws)))
    assert (standard_errors <= 3).all(), standard_errors


def test_sampled_loss_by_hand_leaves_out_negatives_equal_to_the_target(vocab_tokenizer, monkeypatch):
    """
    The sampled loss computed by hand from the negatives drawn: at each position, the target's logit against every
    negative's logit less `log(n * Q(k))`, where a negative equal to that position's target adds nothing (it is the
    target, not a negative). 200 draws from 27 words draw the frequent targets several times each.
    """
    vocab_size, num_sampled = vocab_tokenizer.word_vocab_size, 200
    model = tiny_pretraining_model(vocab_size, n_negative_samples=num_sampled).train()
    with torch.no_grad():
        model.softmax.bias.normal_()  # initialised to zero, where a bias dropped or of the wrong sign would not show
    drawn, sample_log_uniform = [], modeling_elmo.sample_log_uniform
    monkeypatch.setattr(
        modeling_elmo, "sample_log_uniform", lambda *args: drawn.append(sample_log_uniform(*args)) or drawn[-1]
    )
    batch = labelled_batch(vocab_tokenizer, SAMPLED_LOSS_SENTENCES)
    torch.manual_seed(1)
    with torch.no_grad():
        output = model(**batch)
        top = model.elmo(batch["input_ids"], batch["attention_mask"]).last_hidden_state.double()
    (negatives,) = drawn
    weight, bias = model.softmax.weight.double(), model.softmax.bias.double()
    # The log-uniform distribution's probabilities, from its formula.
    log_expected = (torch.log((negatives + 2.0) / (negatives + 1.0)) / math.log(vocab_size + 1) * num_sampled).log()
    dim, targets_drawn = model.config.projection_dim, 0

    def position_loss(state, target):
        nonlocal targets_drawn
        logits = weight @ state + bias
        others = negatives != target
        targets_drawn += int((~others).sum())
        scores = torch.cat([logits[target, None], (logits[negatives] - log_expected)[others]])
        return torch.logsumexp(scores, 0) - logits[target]

    forward_losses, backward_losses = [], []
    for row, length in enumerate(batch["attention_mask"].sum(dim=1).tolist()):
        labels = batch["labels"][row]
        forward_losses += [position_loss(top[row, t, :dim], labels[t + 1]) for t in range(length - 1)]
        backward_losses += [position_loss(top[row, t, dim:], labels[t - 1]) for t in range(1, length)]
    assert targets_drawn > 0  # the rule under test was exercised
    for loss, by_hand in ((output.forward_loss, forward_losses), (output.backward_loss, backward_losses)):
        torch.testing.assert_close(loss.double(), torch.stack(by_hand).mean(), rtol=0, atol=FLOAT32_TOLERANCE)


def test_rejects_labels_of_the_wrong_shape_or_range(vocab_tokenizer):
    model = tiny_pretraining_model(vocab_tokenizer.word_vocab_size).eval()
    batch = vocab_tokenizer(["w0 w3"], padding=True, return_tensors="pt")
    with pytest.raises(ValueError, match="labels must have shape"):
        model(**batch, labels=torch.zeros(1, 3, dtype=torch.long))
    with pytest.raises(ValueError, match="word ids"):
        model(**batch, labels=torch.full((1, 4), vocab_tokenizer.word_vocab_size))
    with pytest.raises(ValueError, match="word_vocab_size"):
        ElmoForPreTraining(tiny_config())
    with pytest.raises(ValueError, match="^labels leave no word to predict$"):
        model(**batch, labels=torch.full((1, 4), -100))


def test_one_word_to_predict_in_each_direction_is_its_loss(vocab_tokenizer):
    """Labels of one word alone, predicted by the forward LM from `<S>` and by the backward LM from the next word."""
    model = tiny_pretraining_model(vocab_tokenizer.word_vocab_size).eval()
    batch = vocab_tokenizer(["w0 w3"], return_tensors="pt")
    word = vocab_tokenizer.word_to_id("w0")
    output = model(**batch, labels=torch.tensor([[-100, word, -100, -100]]))
    forward_lp, backward_lp = model.word_log_probs(batch["input_ids"], batch["attention_mask"])
    torch.testing.assert_close(output.forward_loss, -forward_lp[0, 0, word])
    torch.testing.assert_close(output.backward_loss, -backward_lp[0, 2, word])


def test_negatives_are_drawn_from_the_log_uniform_distribution():
    """
    Each id's count among 200,000 draws within four standard errors of `n * P(k)`, `P(k) = log((k + 2) / (k + 1)) /
    log(V + 1)`, every id in the vocabulary, and the correction `log_expected_counts` equal to `log(n * P(k))`.
    """
    vocab_size, draws = 30, 200_000
    torch.manual_seed(0)
    ids = modeling_elmo.sample_log_uniform(draws, vocab_size, "cpu")
    assert ids.min() >= 0 and ids.max() < vocab_size
    k = torch.arange(vocab_size, dtype=torch.float64)
    probabilities = torch.log((k + 2) / (k + 1)) / math.log(vocab_size + 1)
    expected = draws * probabilities
    counts = torch.bincount(ids, minlength=vocab_size).double()
    standard_errors = (counts - expected).abs() / (expected * (1 - probabilities)).sqrt()
    assert (standard_errors <= 4).all(), standard_errors
    corrections = modeling_elmo.log_expected_counts(k.long(), vocab_size, draws)
    torch.testing.assert_close(corrections, expected.log().float())


# -- the word vocabulary ----------------------------------------------------------------------------------------------


FREED_MEMORY_SCRIPT = """
import ctypes, json, sys, torch
class MallocInfo(ctypes.Structure):  # glibc's struct mallinfo2 (malloc.h), all size_t
    _fields_ = [(name, ctypes.c_size_t) for name in
                "arena ordblks smblks hblks hblkhd usmblks fsmblks uordblks fordblks keepcost".split()]
libc = ctypes.CDLL(None)
libc.mallinfo2.restype = MallocInfo
if sys.argv[1] == "keep":  # hf_elmo.pretraining (and transformers' Trainer) imported only where it is used
    from hf_elmo.pretraining import keep_freed_memory
    keep_freed_memory()
steps = []
for _ in range(3):  # a step allocates, writes and frees 96 MiB of temporaries
    mapped_before = libc.mallinfo2().hblkhd
    tensors = [torch.ones(6 << 20) for _ in range(4)]
    mapped = libc.mallinfo2().hblkhd - mapped_before
    del tensors
    info = libc.mallinfo2()
    steps.append({"mapped": mapped, "heap": info.arena, "kept_free": info.fordblks})
print(json.dumps(steps))
"""


@pytest.mark.skipif(
    platform.libc_ver()[0] != "glibc" or tuple(map(int, platform.libc_ver()[1].split("."))) < (2, 33),
    reason="tunes glibc's malloc; counted by mallinfo2 (glibc 2.33)",
)
def test_keep_freed_memory_lets_each_step_reuse_the_memory_of_the_last():
    """
    Where a step's temporaries come from and what is kept when they are freed, in a fresh process each way (the
    setting is the whole process's), as glibc counts it (`mallinfo2`): page faults, what the setting saves, depend on
    the kernel's huge pages and are not asserted.
    """
    step_bytes, tensor_bytes = 96 << 20, 24 << 20
    steps = {
        mode: json.loads(
            subprocess.run(
                [sys.executable, "-c", FREED_MEMORY_SCRIPT, mode], capture_output=True, text=True, check=True
            ).stdout
        )
        for mode in ("keep", "default")
    }
    kept = steps["keep"]
    assert all(step["mapped"] < tensor_bytes for step in kept), steps  # from the heap, not mapped anew
    assert all(step["kept_free"] >= step_bytes for step in kept), steps  # kept when freed
    assert kept[-1]["heap"] - kept[0]["heap"] < step_bytes, steps  # so later steps do not take a step's memory again
    first_by_default = steps["default"][0]
    assert first_by_default["mapped"] >= step_bytes and first_by_default["kept_free"] < step_bytes, steps


def test_word_vocabulary_counts_caps_and_round_trips(tmp_path):
    lines = ["a a a b b c", "a b d"]
    vocab = build_word_vocab(lines, min_count=2)
    assert vocab.get_vocab() == {"<S>": 0, "</S>": 1, "<UNK>": 2, "a": 3, "b": 4}
    assert build_word_vocab(lines, max_size=4).get_vocab_size() == 4
    assert build_word_vocab(lines, min_count=4).get_vocab() == {"<S>": 0, "</S>": 1, "<UNK>": 2, "a": 3}
    with pytest.raises(ValueError, match="no word of the text is seen 5 times or more"):
        build_word_vocab(lines, min_count=5)
    vocab.save(str(tmp_path / "vocab.json"))
    tokenizer = ElmoTokenizer(max_characters_per_token=20, vocab_file=str(tmp_path / "vocab.json"))
    plain = ElmoTokenizer(max_characters_per_token=20)

    encoded = tokenizer(["a c b", "b"], padding=True, return_word_labels=True)
    assert encoded["labels"] == [[0, 3, 2, 4, 1], [0, 4, 1, -100, -100]]
    assert encoded["input_ids"] == plain(["a c b", "b"], padding=True)["input_ids"]
    assert "labels" not in tokenizer(["a c b"])

    tokenizer.save_pretrained(tmp_path / "saved")
    reloaded = ElmoTokenizer.from_pretrained(tmp_path / "saved")
    assert reloaded.word_vocab_size == 5
    assert reloaded(["d a"], return_word_labels=True)["labels"] == [[0, 2, 3, 1]]
    plain.save_pretrained(tmp_path / "plain")
    assert not (tmp_path / "plain" / "word_vocab.json").exists()
    assert ElmoTokenizer.from_pretrained(tmp_path / "plain").word_vocab_size is None
    with pytest.raises(ValueError, match="word vocabulary"):
        plain(["a"], return_word_labels=True)


MIXED_TEXT = ["배를 타고 여행을 가다.", "w1 w2, w3 (w4) w1", "배가 고프다!", "w1 w5 w5 w6 배를 w2"]


@pytest.mark.parametrize("pre_tokenizer", ["whitespace_split", "whitespace", "bert", "korean_morphemes"])
def test_text_split_once_reads_as_the_tokenizer_splits_it(pre_tokenizer, tmp_path):
    if pre_tokenizer == "korean_morphemes":
        require("kiwipiepy", reason="korean_morphemes needs the korean extra")
    (tmp_path / "text.txt").write_text("\n".join(MIXED_TEXT) + "\n\n", encoding="utf-8")
    text = SplitText([tmp_path / "text.txt"], pre_tokenizer)
    vocab = build_word_vocab(text, min_count=2, pre_tokenizer=pre_tokenizer)
    assert vocab.get_vocab() == build_word_vocab(MIXED_TEXT, min_count=2, pre_tokenizer=pre_tokenizer).get_vocab()
    vocab.save(str(tmp_path / "word_vocab.json"))
    tokenizer = ElmoTokenizer(
        max_characters_per_token=20, pre_tokenizer=pre_tokenizer, vocab_file=str(tmp_path / "word_vocab.json")
    )
    assert text.sentences == [tokenizer.split_words(line) for line in MIXED_TEXT]
    assert list(SplitText([tmp_path / "text.txt"], pre_tokenizer, in_memory=False)) == text.sentences

    # A batch of split sentences is the batch of their text: the same characters and labels, cut alike.
    collate = ElmoPreTrainingCollator(tokenizer, max_length=6)
    batch = collate([LineDataset(text)[i] for i in range(len(MIXED_TEXT))])
    expected = tokenizer(
        MIXED_TEXT, padding=True, truncation=True, max_length=6, return_word_labels=True, return_tensors="pt"
    )
    assert set(batch) == set(expected)
    assert all(torch.equal(batch[name], expected[name]) for name in batch)

    # The <UNK> rate and the SIF counts of the split text are those of the labels the tokenizer gives the text.
    labels = tokenizer(MIXED_TEXT, return_word_labels=True)["labels"]
    words = [label for row in labels for label in row[1:-1]]
    assert count_unknown_words(tokenizer, text) == (len(words), words.count(tokenizer.word_to_id("<UNK>")))
    counts = WordCounts.of_sentences(tokenizer, text)
    assert counts.counts.tolist() == WordCounts.of_text(tokenizer, [tmp_path / "text.txt"]).counts.tolist()
    assert counts.words == len(words) and counts.counts[3] == Counter(words)[3] > 1


def test_text_without_sentences_is_refused(tmp_path):
    (tmp_path / "empty.txt").write_text("\n  \n", encoding="utf-8")
    with pytest.raises(ValueError, match="hold no sentence"):
        SplitText([tmp_path / "empty.txt"], "whitespace")
    with pytest.raises(ValueError, match="pre_tokenizer must be one of"):
        SplitText([tmp_path / "empty.txt"], "spaces")


# -- the Trainer script -----------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def pretrained_folder(tmp_path_factory):
    """A tiny biLM trained by `main` for 300 steps on structured text; its folder and final metrics."""
    folder = tmp_path_factory.mktemp("pretraining")
    train = structured_text(folder / "train.txt", 400, seed=0)
    valid = structured_text(folder / "valid.txt", 40, seed=1)
    with torch_threads(1):  # tiny matrices: threads only add overhead
        metrics = main(pretraining_args(folder, folder / "model", max_steps=300))
    return folder / "model", metrics, train, valid


def unigram_perplexity(train: list[list[str]], valid: list[list[str]]) -> float:
    """Perplexity of the validation words and `</S>` under the training text's unigram distribution."""
    counts = Counter(word for sentence in train for word in sentence + ["</S>"])
    total = sum(counts.values())
    targets = [word for sentence in valid for word in sentence + ["</S>"]]
    return math.exp(-sum(math.log(counts[word] / total) for word in targets) / len(targets))


def test_pretraining_drives_perplexity_well_below_unigram(pretrained_folder):
    _, metrics, train, valid = pretrained_folder
    unigram = unigram_perplexity(train, valid)
    print(
        f"unigram perplexity {unigram:.2f}; biLM forward {metrics['eval_forward_perplexity']:.2f}, "
        f"backward {metrics['eval_backward_perplexity']:.2f}"
    )
    assert metrics["eval_forward_perplexity"] < unigram / 2
    assert metrics["eval_backward_perplexity"] < unigram / 2
    assert metrics["eval_loss"] == pytest.approx(math.log(metrics["eval_perplexity"]), rel=0.05)


def test_finished_run_keeps_the_model_and_a_card_not_the_checkpoints(pretrained_folder):
    folder, metrics, _, _ = pretrained_folder
    assert not list(folder.glob("checkpoint-*"))  # one was saved at step 300
    card = (folder / "README.md").read_text(encoding="utf-8")
    assert "- Steps: 300." in card and "hf-elmo pretrain --train-file" in card
    assert f"| {metrics['eval_forward_perplexity']:.2f} | {metrics['eval_backward_perplexity']:.2f} | " in card
    assert metrics["eval_unk_rate"] == metrics["train_unk_rate"] == 0.0  # min count 1: every word is in


def test_finished_run_saves_the_word_counts_of_its_training_text(pretrained_folder):
    """`word_counts.json`, the SIF weights of the folder's sentence vectors: the training words by vocabulary id."""
    folder, _, train, _ = pretrained_folder
    counts = WordCounts.from_pretrained(folder)
    vocab = ElmoTokenizer.from_pretrained(folder).word_tokenizer.get_vocab()
    seen = Counter(word for sentence in train for word in sentence)
    assert {word: int(counts.counts[i]) for word, i in vocab.items()} == {"<S>": 0, "</S>": 0, "<UNK>": 0, **seen}
    assert counts.words == sum(seen.values())


def test_the_run_says_when_the_vocabulary_caps_the_negatives_asked_or_the_default():
    model = ElmoForPreTraining(tiny_config(word_vocab_size=8, n_negative_samples=8))
    rates = {"train_unk_rate": 0.0, "eval_unk_rate": 0.0}
    for asked in (NEGATIVE_SAMPLES, 100):
        assert describe_run(model, asked, rates).splitlines()[-1] == (
            f"negative samples per batch: 8 ({asked:,} capped at the vocabulary size)"
        )
    assert describe_run(model, 8, rates).splitlines()[-1] == "negative samples per batch: 8"


def test_metrics_count_unk_words():
    """Two rows: 3 words (one <UNK>) and 1 word; <S> (0), </S> (1) and padding (-100) are not words."""
    labels = torch.tensor([[0, 5, 2, 6, 1], [0, 7, 1, -100, -100]])
    sums = direction_nll_sums((torch.tensor(2.0), torch.tensor(3.0)), labels)
    assert sums[0].tolist() == [2.0 * 6, 3.0 * 6, 6, 4, 1] and not sums[1:].any()  # 4 + 2 targets
    metrics = perplexity_metrics(EvalPrediction(predictions=sums.numpy(), label_ids=labels.numpy()))
    assert metrics["unk_rate"] == 0.25
    assert metrics["forward_perplexity"] == pytest.approx(math.exp(2.0))
    assert metrics["perplexity"] == pytest.approx(math.exp(2.5))


def test_pretrained_folder_loads_exports_and_reloads_identically(pretrained_folder, tmp_path):
    from hf_elmo.conversion_original import export_original, load_original

    folder = pretrained_folder[0]
    pretraining = ElmoForPreTraining.from_pretrained(folder).eval()
    model = ElmoModel.from_pretrained(folder).eval()
    classifier = ElmoForSequenceClassification.from_pretrained(folder, num_labels=2).eval()
    tokenizer = ElmoTokenizer.from_pretrained(folder)
    export_original(folder, tmp_path / "original")
    reloaded = load_original(tmp_path / "original" / "options.json", tmp_path / "original" / "weights.hdf5")

    batch = tokenizer(["w0 w3 w6", "w9 w12 w15 w18 w21"], padding=True, return_tensors="pt")
    with torch.no_grad():
        expected = pretraining.elmo(**batch, output_hidden_states=True).hidden_states
        for candidate in (model, reloaded, classifier.elmo):
            for ours, theirs in zip(expected, candidate(**batch, output_hidden_states=True).hidden_states):
                torch.testing.assert_close(ours, theirs, rtol=0, atol=0)


def test_pretraining_goes_on_from_a_trained_model(pretrained_folder, tmp_path):
    """
    `--model-name-or-path` trains the folder's model further, with its tokenizer and negatives, and with the dropout
    asked: at learning rate 0 the weights come out as they went in. An option that would shape a new model is refused.
    """
    folder = pretrained_folder[0]
    text = [str(folder.parent / "train.txt"), str(folder.parent / "valid.txt")]
    data = ["--train-file", text[0], "--validation-file", text[1], "--model-name-or-path", str(folder)]
    options = ["--batch-size", "8", "--max-steps", "2", "--learning-rate", "0", "--report-to", "none"]
    with torch_threads(1):
        main([*data, *options, "--output-dir", str(tmp_path / "further"), "--lstm-dropout", "0.1"])
    trained, further = (ElmoForPreTraining.from_pretrained(path) for path in (folder, tmp_path / "further"))
    assert further.config.n_negative_samples == trained.config.n_negative_samples == 8
    assert (trained.config.lstm_dropout, further.config.lstm_dropout) == (0.0, 0.1)
    for (name, weight), (_, kept) in zip(trained.state_dict().items(), further.state_dict().items(), strict=True):
        torch.testing.assert_close(kept, weight, rtol=0, atol=0, msg=name)
    assert (tmp_path / "further" / "word_vocab.json").read_text() == (folder / "word_vocab.json").read_text()
    with pytest.raises(ValueError, match="--projection-dim shapes a new model"):
        main([*data, *options, "--output-dir", str(tmp_path / "refused"), "--projection-dim", "32"])
    assert not (tmp_path / "refused").exists()


@pytest.mark.slow
def test_pretraining_runs_under_torchrun_with_two_processes(tmp_path):
    structured_text(tmp_path / "train.txt", 64, seed=0)
    structured_text(tmp_path / "valid.txt", 16, seed=1)
    env = dict(os.environ, OMP_NUM_THREADS="1", PYTHONPATH=str(Path(__file__).resolve().parents[1]))
    command = [
        sys.executable,
        "-m",
        "torch.distributed.run",
        "--nproc_per_node",
        "2",
        "-m",
        "hf_elmo.cli",
        "pretrain",
        *pretraining_args(tmp_path, tmp_path / "model", max_steps=4),
    ]
    result = subprocess.run(command, env=env, capture_output=True, text=True, timeout=300)
    assert result.returncode != 0 and "on CPU pass --use_cpu" in result.stderr  # each would train alone
    result = subprocess.run([*command, "--use_cpu"], env=env, capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr[-4000:]
    assert (tmp_path / "model" / "model.safetensors").is_file()
    assert "eval_forward_perplexity" in result.stdout + result.stderr


def test_streaming_run_resumes_from_its_last_checkpoint(tmp_path):
    """A streamed run finished at step 4 with its checkpoints kept continues to step 6 from checkpoint-4, asked for
    more steps, instead of starting over."""
    import json

    structured_text(tmp_path / "train.txt", 64, seed=0)
    structured_text(tmp_path / "valid.txt", 8, seed=1)
    output = tmp_path / "model"
    with torch_threads(1):
        # Checkpoints kept (a finished run removes them), so that --resume can continue from them.
        main(
            [
                *pretraining_args(tmp_path, output, max_steps=4),
                "--streaming",
                "--save-steps",
                "2",
                "--save-total-limit",
                "10",
                "--keep-checkpoints",
            ]
        )
        first_vocab = (output / "word_vocab.json").read_text()
        early_checkpoint = (output / "checkpoint-2" / "trainer_state.json").stat().st_mtime_ns
        main(
            [
                *pretraining_args(tmp_path, output, max_steps=6),
                "--streaming",
                "--save-steps",
                "2",
                "--save-total-limit",
                "10",
                "--keep-checkpoints",
                "--resume",
            ]
        )
    assert json.loads((output / "checkpoint-6" / "trainer_state.json").read_text())["global_step"] == 6
    # A run that started over would have saved checkpoint-2 again.
    assert (output / "checkpoint-2" / "trainer_state.json").stat().st_mtime_ns == early_checkpoint
    assert (output / "word_vocab.json").read_text() == first_vocab  # resuming keeps the vocabulary
    assert ElmoModel.from_pretrained(output).config.word_vocab_size is not None


def test_pretraining_on_learned_characters(tmp_path):
    """`--char-vocab learned`: the tokenizer and the model's character table are the training files' characters."""
    text = ["한국어 를 배웁니다", "나는 한국어 를 배웁니다", "abc 한국"] * 8
    (tmp_path / "train.txt").write_text("\n".join(text) + "\n", encoding="utf-8")
    (tmp_path / "valid.txt").write_text("\n".join(text[:4]) + "\n", encoding="utf-8")
    output = tmp_path / "model"
    main([*pretraining_args(tmp_path, output, max_steps=2), "--char-vocab", "learned"])
    tokenizer, model = ElmoTokenizer.from_pretrained(output), ElmoModel.from_pretrained(output)
    characters = set("".join(text)) - {" "}
    assert tokenizer.alphabet.learned and set(tokenizer.alphabet.symbols) == characters | {
        "<bos>",
        "<eos>",
        "<bow>",
        "<eow>",
        "<pad>",
        "<oov>",
    }
    assert model.char_encoder.char_embedding.num_embeddings == len(characters) + 6 + 1
    row = tokenizer(["배웁니다"], is_split_into_words=True)["input_ids"][1]
    assert tokenizer.decode(row) == "배웁니다"


def test_bilm_loads_quietly_from_a_pretraining_folder(tmp_path):
    """The documented path, `ElmoModel.from_pretrained(<pretrain output>)`: the word softmax is left out silently."""
    torch.manual_seed(0)
    pretrained = ElmoForPreTraining(tiny_config(word_vocab_size=20, n_negative_samples=4))
    pretrained.save_pretrained(tmp_path)
    warnings = []
    handler = logging.Handler(logging.WARNING)
    handler.emit = lambda record: warnings.append(record.getMessage())
    logging.getLogger("transformers").addHandler(handler)
    try:
        model = ElmoModel.from_pretrained(tmp_path)
    finally:
        logging.getLogger("transformers").removeHandler(handler)
    assert not [message for message in warnings if "LOAD REPORT" in message], warnings
    for name, value in model.state_dict().items():
        assert torch.equal(value, pretrained.elmo.state_dict()[name]), name


# -- the output folder: complete or absent, never overwritten unasked, resumable --------------------------------------


def short_run(tmp_path: Path, output: Path, *extra: str) -> list[str]:
    """The arguments of a 4-step run on 64 structured sentences, a checkpoint every 2 steps."""
    if not (tmp_path / "train.txt").exists():
        structured_text(tmp_path / "train.txt", 64, seed=0)
        structured_text(tmp_path / "valid.txt", 8, seed=1)
    return [*pretraining_args(tmp_path, output, max_steps=4), "--save-steps", "2", "--dataloader-workers", "0", *extra]


def command(argv: list[str], capsys) -> tuple[int, str]:
    """`hf-elmo pretrain ARGV` as the console script runs it: its exit status and what it wrote on stderr. (A new
    model's weights are drawn before the Trainer seeds torch: seeded here, every run starts from the same ones.)"""
    from hf_elmo.cli import run

    capsys.readouterr()
    torch.manual_seed(0)
    with torch_threads(1):
        code = run("pretrain", argv)
    return code, capsys.readouterr().err


def stop_while_saving(monkeypatch, argv: list[str], step: int) -> None:
    """Runs `main(argv)` and stops it as a kill does while it saves the checkpoint of `step`: before the Trainer
    writes that checkpoint's `trainer_state.json`, which it writes last."""
    from transformers import TrainerState

    save = TrainerState.save_to_json

    def killed_at_step(state, path):
        if state.global_step == step:
            raise KeyboardInterrupt
        save(state, path)

    with monkeypatch.context() as patch, torch_threads(1):
        patch.setattr(TrainerState, "save_to_json", killed_at_step)
        torch.manual_seed(0)  # as `command` seeds
        with pytest.raises(KeyboardInterrupt):
            main(argv)


def weights(folder: Path) -> dict[str, torch.Tensor]:
    return ElmoForPreTraining.from_pretrained(folder).state_dict()


def folder_files(folder: Path) -> dict[str, bytes]:
    return {str(path.relative_to(folder)): path.read_bytes() for path in folder.rglob("*") if path.is_file()}


def test_an_output_folder_that_holds_anything_is_refused_in_one_line(tmp_path, monkeypatch, capsys):
    """
    A folder holding a model (or anything) is not replaced without --overwrite_output_dir, nor a stopped run's
    `OUTPUT.parts/` started over without it: one line naming the flag, exit status 2, nothing touched.
    """
    output, parts = tmp_path / "model", tmp_path / "model.parts"
    output.mkdir()
    (output / "model.safetensors").write_bytes(b"a trained morpheme biLM")
    before = folder_files(output)
    code, err = command(short_run(tmp_path, output), capsys)
    assert code == 2
    assert err == f"hf-elmo: error: {output} exists and is not empty: pass --overwrite_output_dir to replace it\n"
    (parts / "checkpoint-2").mkdir(parents=True)
    (parts / "word_vocab.json").write_text("{}", encoding="utf-8")
    code, err = command(short_run(tmp_path, output), capsys)
    assert code == 2 and err == (
        f"hf-elmo: error: {parts} holds a stopped run of {output}: pass --resume to continue it, or "
        "--overwrite_output_dir to start over\n"
    )
    # Continued, the stopped run would replace the folder when it finishes.
    code, err = command(short_run(tmp_path, output, "--resume"), capsys)
    assert code == 2
    assert err == f"hf-elmo: error: {output} exists and is not empty: pass --overwrite_output_dir to replace it\n"
    # Replacing the folder would delete the training text inside it.
    (output / "train.txt").write_text("w0 w3 w6\n", encoding="utf-8")
    argv = short_run(tmp_path, output, "--overwrite_output_dir", "--train-file", str(output / "train.txt"))
    code, err = command(argv, capsys)
    assert (code, err.count("\n")) == (2, 1) and f"{output / 'train.txt'} is inside {output}" in err
    assert folder_files(output) == {**before, "train.txt": b"w0 w3 w6\n"}
    assert sorted(path.name for path in tmp_path.iterdir()) == ["model", "model.parts", "train.txt", "valid.txt"]
    assert sorted(folder_files(parts)) == ["word_vocab.json"] and (parts / "checkpoint-2").is_dir()
    # Run from inside the folder, replacing it would delete what the user keeps there.
    monkeypatch.chdir(output)
    code, err = command(short_run(tmp_path, output, "--overwrite_output_dir"), capsys)
    assert (code, err) == (
        2,
        f"hf-elmo: error: {output} holds the folder this command runs in, and the finished run replaces it whole: "
        "write elsewhere\n",
    )
    assert folder_files(output) == {**before, "train.txt": b"w0 w3 w6\n"}


def test_a_second_run_on_the_same_output_is_refused_while_the_first_lives(tmp_path, capsys):
    """
    Two runs in one folder would both train and write it (one finished without its word counts): while the lock of
    the output is held (here by this process, as another run's process holds it: `test_folders` has the second
    process), a run is refused in one line, exit status 1, before it looks at the folder, and writes nothing. A
    stopped run's `OUTPUT.parts/` is then never one a live run works in.
    """
    output, parts = tmp_path / "model", tmp_path / "model.parts"
    (parts / "checkpoint-2").mkdir(parents=True)
    (parts / "word_vocab.json").write_text("{}", encoding="utf-8")
    with lock_output(output):
        for extra in ([], ["--resume"]):
            code, err = command(short_run(tmp_path, output, *extra), capsys)
            assert (code, err) == (
                1,
                f"hf-elmo: error: another run (process {os.getpid()}) is writing {output}; wait for it to end, or "
                "stop it first\n",
            )
    assert sorted(path.name for path in tmp_path.iterdir()) == ["model.parts", "train.txt", "valid.txt"]
    assert sorted(folder_files(parts)) == ["word_vocab.json"]


def test_overwrite_output_dir_leaves_nothing_stale(tmp_path, capsys):
    """--overwrite_output_dir replaces the folder with the new run's alone, and starts over from a stopped run."""
    output = tmp_path / "model"
    (output / "checkpoint-10").mkdir(parents=True)
    (output / "eval_results.json").write_text('{"eval_accuracy": 0.72}', encoding="utf-8")
    (tmp_path / "model.parts" / "checkpoint-8").mkdir(parents=True)
    assert command(short_run(tmp_path, output, "--overwrite_output_dir"), capsys)[0] == 0
    fresh = tmp_path / "fresh"
    assert command(short_run(tmp_path, fresh), capsys)[0] == 0
    assert sorted(folder_files(output)) == sorted(folder_files(fresh))  # no checkpoint-10, no eval_results.json
    assert not (tmp_path / "model.parts").exists()
    for name, weight in weights(fresh).items():
        torch.testing.assert_close(weights(output)[name], weight, rtol=0, atol=0, msg=name)


def test_a_missing_or_unreadable_text_file_is_one_line_before_anything_loads(tmp_path, capsys, monkeypatch):
    from hf_elmo import pretraining

    monkeypatch.setattr(pretraining, "load_pretrained", lambda *_: pytest.fail("a model was loaded"))
    monkeypatch.setattr(pretraining, "SplitText", lambda *_, **__: pytest.fail("the text was read"))
    structured_text(tmp_path / "valid.txt", 8, seed=1)
    argv = ["--train-file", str(tmp_path / "nope.txt"), "--validation-file", str(tmp_path / "valid.txt")]
    argv += ["--output-dir", str(tmp_path / "model"), "--model-name-or-path", "ko-nsmc"]
    code, err = command(argv, capsys)
    assert code == 2
    assert err == f"hf-elmo: error: cannot read --train-file {tmp_path / 'nope.txt'}: No such file or directory\n"
    argv = ["--train-file", str(tmp_path / "valid.txt"), "--validation-file", str(tmp_path)]
    code, err = command([*argv, "--output-dir", str(tmp_path / "model")], capsys)
    assert code == 2 and err == f"hf-elmo: error: cannot read --validation-file {tmp_path}: Is a directory\n"
    assert sorted(path.name for path in tmp_path.iterdir()) == ["valid.txt"]


def test_text_holding_a_nul_byte_is_refused_as_embed_refuses_it(tmp_path, capsys):
    """One rule wherever text is read (`text_files`): a line holding NUL is not text, for pre-training as for embed,
    which refused it while pre-training trained on it. One line, exit status 2, nothing written."""
    structured_text(tmp_path / "train.txt", 64, seed=0)
    structured_text(tmp_path / "valid.txt", 8, seed=1)
    with open(tmp_path / "train.txt", "ab") as handle:
        handle.write(b"w0 w3\x00 w6\n")
    code, err = command(short_run(tmp_path, tmp_path / "model"), capsys)
    assert (code, err) == (
        2,
        f"hf-elmo: error: {tmp_path / 'train.txt'} line 65: not text (control character U+0000 at character 5, as in "
        "binary and UTF-16 files)\n",
    )
    assert sorted(path.name for path in tmp_path.iterdir()) == ["train.txt", "valid.txt"]


def test_an_empty_argument_to_main_is_refused_before_anything_is_read(tmp_path, monkeypatch):
    """`main` as a function refuses what the command line refuses (`command_line.empty_argument`): an empty
    --output-dir is the working folder."""
    monkeypatch.chdir(tmp_path)
    argv = short_run(tmp_path, tmp_path / "model")
    argv[argv.index("--output-dir") + 1] = ""
    with pytest.raises(ValueError, match=r"^an empty argument \(after --output-dir; a variable that is not set\?\)"):
        main(argv)
    assert sorted(path.name for path in tmp_path.iterdir()) == ["train.txt", "valid.txt"]


def test_text_where_no_word_reaches_min_count_is_refused_before_anything_is_written(tmp_path, capsys):
    """A vocabulary of the special words alone would make every word `<UNK>`: one line, exit status 2, no folder."""
    argv = short_run(tmp_path, tmp_path / "model")
    argv[argv.index("--min-count") + 1] = "1000"
    code, err = command(argv, capsys)
    assert (code, err) == (
        2,
        "hf-elmo: error: no word of the text is seen 1000 times or more (min_count, --min-count): every word would be "
        "<UNK>; lower it or give more text\n",
    )
    assert sorted(path.name for path in tmp_path.iterdir()) == ["train.txt", "valid.txt"]


def test_a_stopped_run_leaves_no_model_folder_and_resumes_past_a_half_written_checkpoint(
    tmp_path, monkeypatch, capsys
):
    """
    Killed while saving checkpoint-4: no `--output-dir` (complete or absent), the run in `OUTPUT.parts/`.
    `--resume` continues from checkpoint-2, the last complete one, says so and removes checkpoint-4, and ends with the
    model an uninterrupted run gives.
    """
    output, parts = tmp_path / "model", tmp_path / "model.parts"
    stop_while_saving(monkeypatch, short_run(tmp_path, output), step=4)
    assert not output.exists()
    assert (parts / "checkpoint-2" / "trainer_state.json").is_file()
    assert not (parts / "checkpoint-4" / "trainer_state.json").exists()
    assert {"tokenizer_config.json", "word_vocab.json", "word_counts.json"} <= set(folder_files(parts))

    code, err = command(short_run(tmp_path, output, "--resume"), capsys)
    assert code == 0
    assert (
        f"resuming from {parts / 'checkpoint-2'} (checkpoint-4: incomplete, without trainer_state.json, stopped while "
        "being saved; removed)\n" in err
    )
    assert not parts.exists() and not list(output.glob("checkpoint-*"))
    assert [path.name for path in tmp_path.iterdir() if path.name.startswith(".")] == []  # no staging left
    assert command(short_run(tmp_path, tmp_path / "uninterrupted"), capsys)[0] == 0
    for name, weight in weights(tmp_path / "uninterrupted").items():
        torch.testing.assert_close(weights(output)[name], weight, rtol=0, atol=0, msg=name)


def test_a_resumed_run_logs_evaluates_and_saves_as_its_command_says(tmp_path, monkeypatch, capsys):
    """Resumed with other logging, evaluation and save steps than its checkpoint recorded, a run takes the command's
    (the Trainer alone would keep the checkpoint's): its last checkpoint's state records them, and the steps logged
    are the command's."""
    output = tmp_path / "model"
    stop_while_saving(monkeypatch, short_run(tmp_path, output, "--logging-steps", "2", "--eval-steps", "4"), step=4)
    resumed = ["--resume", "--keep-checkpoints", "--logging-steps", "1", "--eval-steps", "3", "--save-steps", "1"]
    code, _ = command(short_run(tmp_path, output, *resumed), capsys)
    assert code == 0
    state = json.loads((output / "checkpoint-4" / "trainer_state.json").read_text())
    assert (state["logging_steps"], state["eval_steps"], state["save_steps"]) == (1, 3, 1)
    assert [entry["step"] for entry in state["log_history"] if "loss" in entry] == [2, 3, 4]
    # (the last step is evaluated, whatever the steps)
    assert [entry["step"] for entry in state["log_history"] if "eval_loss" in entry] == [3, 4]


def test_resume_on_other_text_is_refused_in_one_line_naming_the_file(tmp_path, monkeypatch, capsys):
    """
    A run resumed on other text would keep the vocabulary and word counts of the first: the run records its text
    files (path, size, SHA-256) beside its checkpoints, and `--resume` with another file, or the same file edited, is
    refused in one line naming the file, exit status 2, changing nothing.
    """
    output, parts = tmp_path / "model", tmp_path / "model.parts"
    stop_while_saving(monkeypatch, short_run(tmp_path, output), step=4)
    before = folder_files(parts)
    train = tmp_path / "train.txt"
    advice = "; resume with the files it started with, or pass --overwrite_output_dir without --resume to start over"
    other = tmp_path / "other.txt"
    structured_text(other, 64, seed=5)
    code, err = command(short_run(tmp_path, output, "--resume", "--train-file", str(other)), capsys)
    assert (code, err) == (
        2,
        f"hf-elmo: error: cannot resume {parts}: --train-file {other} is not the text its run started with (not "
        f"{train}: {other.stat().st_size:,} bytes against {train.stat().st_size:,}, or other bytes){advice}\n",
    )
    size = train.stat().st_size
    train.write_text(train.read_text(encoding="utf-8").replace("w0", "w1"), encoding="utf-8")  # the same size
    code, err = command(short_run(tmp_path, output, "--resume"), capsys)
    assert (code, err) == (
        2,
        f"hf-elmo: error: cannot resume {parts}: --train-file {train} is not the text its run started with (edited "
        f"since: {size:,} bytes against {size:,}, or other bytes){advice}\n",
    )
    assert folder_files(parts) == before and not output.exists()


def test_resume_without_a_complete_checkpoint_starts_over_with_the_vocabulary(tmp_path, monkeypatch, capsys):
    """
    Killed while saving its first checkpoint: nothing to continue from, which `--resume` says in one line. (The run
    was replacing an older model, which --overwrite_output_dir lets the resumed run replace too, leaving none of it.)
    """
    output, parts = tmp_path / "model", tmp_path / "model.parts"
    output.mkdir()
    (output / "eval_results.json").write_text('{"eval_accuracy": 0.72}', encoding="utf-8")
    stop_while_saving(monkeypatch, short_run(tmp_path, output, "--overwrite_output_dir"), step=2)
    assert sorted(folder_files(output)) == ["eval_results.json"]  # untouched until the run finishes
    vocabulary = (parts / "word_vocab.json").read_bytes()
    code, err = command(short_run(tmp_path, output, "--resume", "--overwrite_output_dir"), capsys)
    assert code == 0 and not (output / "eval_results.json").exists()
    assert (
        f"{parts} holds no complete checkpoint (checkpoint-2: incomplete, without trainer_state.json, stopped while "
        "being saved; removed): training starts at step 0 with its vocabulary\n" in err
    )
    assert (output / "word_vocab.json").read_bytes() == vocabulary
    assert "- Steps: 4." in (output / "README.md").read_text(encoding="utf-8")


def test_resume_on_a_finished_folder_says_it_is_finished_and_changes_nothing(tmp_path, capsys):
    """
    A finished model is not trained again from step 0: `--resume` says in one line that it is finished (exit status
    2), also where its checkpoints were kept and no more steps are asked for.
    """
    for output, kept in ((tmp_path / "model", []), (tmp_path / "kept", ["--keep-checkpoints"])):
        assert command(short_run(tmp_path, output, *kept), capsys)[0] == 0
        before = folder_files(output)
        code, err = command(short_run(tmp_path, output, *kept, "--resume"), capsys)
        assert code == 2
        assert err == (
            f"hf-elmo: error: {output} holds a finished model: nothing to resume (--model-name-or-path {output} "
            "trains it further, --overwrite_output_dir without --resume trains a new one in its place)\n"
        )
        assert folder_files(output) == before
    assert (tmp_path / "kept" / "checkpoint-4" / "trainer_state.json").is_file()


def test_a_full_disk_or_a_read_only_folder_is_one_line(tmp_path, monkeypatch, capsys):
    """
    A write that fails (simulated: the system's own errors, raised where the run writes) is one line: at the start
    nothing is left behind; while saving a checkpoint the complete ones stay for `--resume`.
    """
    output, parts = tmp_path / "model", tmp_path / "model.parts"
    with monkeypatch.context() as patch:
        read_only = OSError(errno.EROFS, os.strerror(errno.EROFS))
        patch.setattr(ElmoTokenizer, "save_pretrained", lambda *_, **__: (_ for _ in ()).throw(read_only))
        code, err = command(short_run(tmp_path, output), capsys)
    assert code == 1 and err.startswith(f"hf-elmo: error: cannot write {parts}: Read-only file system")
    assert err.count("\n") == 1
    assert sorted(path.name for path in tmp_path.iterdir()) == ["train.txt", "valid.txt"]

    save = torch.save

    def disk_full_at_step_4(obj, path, *args, **kwargs):
        if "checkpoint-4" in str(path):
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        save(obj, path, *args, **kwargs)

    with monkeypatch.context() as patch:
        patch.setattr(torch, "save", disk_full_at_step_4)
        # No progress bar: its line, left open by the failure, would run into the error's.
        code, err = command(short_run(tmp_path, output, "--save-total-limit", "10", "--disable_tqdm", "true"), capsys)
    assert code == 1 and "Traceback" not in err and err.count("error") == 1
    assert (
        f"\nhf-elmo: error: cannot write {parts}: No space left on device; once it can be written, --resume continues "
        f"from the last complete checkpoint in {parts}\n" in err
    )
    assert not output.exists() and (parts / "checkpoint-2" / "trainer_state.json").is_file()
    assert command(short_run(tmp_path, output, "--resume"), capsys)[0] == 0
    assert ElmoModel.from_pretrained(output).config.word_vocab_size is not None


def test_resume_from_a_checkpoint_whose_weights_are_cut_short_is_one_line(tmp_path, monkeypatch, capsys):
    """A checkpoint's `model.safetensors` cut in half (its `trainer_state.json` intact: it was complete once) is
    refused in one line naming it before anything trains, where safetensors' error came as a traceback."""
    output, parts = tmp_path / "model", tmp_path / "model.parts"
    stop_while_saving(monkeypatch, short_run(tmp_path, output), step=4)
    weights_file = parts / "checkpoint-2" / "model.safetensors"
    weights_file.write_bytes(weights_file.read_bytes()[: weights_file.stat().st_size // 2])
    # What the resumed run keeps: all but the incomplete checkpoint-4, which it removes as it says.
    before = {name: data for name, data in folder_files(parts).items() if not name.startswith("checkpoint-4/")}
    code, err = command(short_run(tmp_path, output, "--resume"), capsys)
    assert code == 1 and err.count("\n") == 2  # the resumption's line and the error
    assert err.endswith(
        f"\nhf-elmo: error: cannot resume from {parts / 'checkpoint-2'}: model.safetensors is cut short or corrupt "
        "(Error while deserializing header: incomplete metadata, file not fully covered); remove checkpoint-2 to "
        "resume from the checkpoint before it (or from step 0), or start over with --overwrite_output_dir instead of "
        "--resume\n"
    )
    assert folder_files(parts) == before and not output.exists()


def test_resume_refuses_a_random_state_that_weights_only_refuses_in_one_line(tmp_path, monkeypatch, capsys):
    """A pickle in the checkpoint that the Trainer's `torch.load(weights_only=True)` would refuse, or a damaged one,
    is one line naming it before anything trains."""
    import argparse

    output, parts = tmp_path / "model", tmp_path / "model.parts"
    stop_while_saving(monkeypatch, short_run(tmp_path, output), step=4)
    random_states = parts / "checkpoint-2" / "rng_state.pth"
    intact = random_states.read_bytes()
    torch.save({"python": argparse.Namespace(state=1)}, random_states)
    code, err = command(short_run(tmp_path, output, "--resume"), capsys)
    assert code == 1
    assert err.endswith(
        f"\nhf-elmo: error: cannot resume from {parts / 'checkpoint-2'}: the Trainer's torch.load(weights_only=True) "
        "refuses rng_state.pth, which holds argparse.Namespace; remove rng_state.pth to resume without it, or start "
        "over with --overwrite_output_dir instead of --resume\n"
    )
    assert "parameters:" not in err and not output.exists()  # refused before the model was made
    random_states.write_bytes(intact[:100])
    code, err = command(short_run(tmp_path, output, "--resume"), capsys)
    assert code == 1 and err.count("\n") == 2  # the resumption's line and the error
    assert f"cannot resume from {parts / 'checkpoint-2'}: rng_state.pth is no file torch.save wrote (" in err
    random_states.write_bytes(intact)
    assert command(short_run(tmp_path, output, "--resume"), capsys)[0] == 0


# -- files read before a resume, and links where the run writes (issue 50) --------------------------------------------


def test_a_damaged_trainer_state_or_record_of_the_text_is_one_line_naming_the_field(tmp_path, monkeypatch, capsys):
    """`checkpoint-2/trainer_state.json` as `{"global_step": "forty", "log_history": 7}` (the Trainer's TypeError),
    then a record of the text of other types: `--resume` is refused in one line naming the file and the field,
    changing nothing; a state cut short is a checkpoint stopped while being saved, taken for one as before."""
    output, parts = tmp_path / "model", tmp_path / "model.parts"
    stop_while_saving(monkeypatch, short_run(tmp_path, output), step=4)
    state_file = parts / "checkpoint-2" / "trainer_state.json"
    intact = state_file.read_text()
    state_file.write_text('{"global_step": "forty", "log_history": 7}')
    before = folder_files(parts)
    code, err = command(short_run(tmp_path, output, "--resume"), capsys)
    assert (code, err) == (
        1,
        f'hf-elmo: error: {state_file}: global_step is the string "forty", not an integer; remove checkpoint-2 to '
        "resume from the checkpoint before it (or from step 0), or start over with --overwrite_output_dir instead of "
        "--resume\n",
    )
    damaged = json.loads(intact)
    damaged["stateful_callbacks"]["TrainerControl"]["args"]["should_save"] = "yes"
    state_file.write_text(json.dumps(damaged))
    code, err = command(short_run(tmp_path, output, "--resume"), capsys)
    assert code == 1 and "stateful_callbacks.TrainerControl.args.should_save is the string" in err
    assert folder_files(parts) == {**before, "checkpoint-2/trainer_state.json": state_file.read_bytes()}

    state_file.write_text(intact)
    text_record = parts / "hf_elmo_pretrain_text.json"
    recorded = text_record.read_text()
    text_record.write_text('{"train_file": "train.txt", "validation_file": []}')
    code, err = command(short_run(tmp_path, output, "--resume"), capsys)
    assert (code, err) == (
        2,
        f'hf-elmo: error: {text_record}: train_file is the string "train.txt", not a list; pass '
        "--overwrite_output_dir without --resume to start over\n",
    )
    text_record.write_text(recorded)
    state_file.write_text(intact[: len(intact) // 2])  # cut short: incomplete, removed; the run starts over
    code, err = command(short_run(tmp_path, output, "--resume"), capsys)
    assert code == 0 and "checkpoint-2, checkpoint-4: incomplete" in err


@pytest.mark.parametrize("name", [".model.lock", "model.parts"])
def test_a_link_where_the_run_writes_its_own_files_is_refused_and_not_followed(tmp_path, capsys, name):
    """`ln -s mine .model.lock` (or `model.parts`, the run's folder): the run is refused in one line before anything
    is written, and what the link names keeps its bytes."""
    mine = tmp_path / "mine"
    mine.mkdir()
    (mine / "keep.txt").write_text("kept")
    link = tmp_path / name
    link.symlink_to(mine / "keep.txt" if name.endswith(".lock") else mine)
    code, err = command(short_run(tmp_path, tmp_path / "model", "--resume"), capsys)
    what = "lock file" if name.endswith(".lock") else "run folder"
    assert code == 1 and err.startswith("hf-elmo: error: ") and err.count("\n") == 1
    assert f"{link} is a link (to {link.readlink()}) where hf_elmo makes its {what}; it was not followed" in err
    assert [path.name for path in mine.iterdir()] == ["keep.txt"] and (mine / "keep.txt").read_text() == "kept"
    assert link.is_symlink() and not (tmp_path / "model").exists()


def test_a_named_pipe_as_text_is_refused_by_its_true_cause_without_waiting(tmp_path, capsys):
    """A FIFO as `--train-file`: opening it to check it would wait for a writer; it is refused unopened, one line,
    exit status 2, naming what it is."""
    fifo = tmp_path / "train.fifo"
    os.mkfifo(fifo)
    structured_text(tmp_path / "valid.txt", 8, seed=1)
    argv = ["--train-file", str(fifo), "--validation-file", str(tmp_path / "valid.txt")]
    code, err = command([*argv, "--output-dir", str(tmp_path / "model")], capsys)
    assert (code, err) == (
        2,
        f"hf-elmo: error: cannot read --train-file {fifo}: it is a named pipe (FIFO), not a file, and its lines are "
        "read more than once: write them to a file first\n",
    )
    assert sorted(path.name for path in tmp_path.iterdir()) == ["train.fifo", "valid.txt"]
