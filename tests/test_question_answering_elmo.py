"""`ElmoForQuestionAnswering` and its pipeline: shapes, the loss, positions outside the context never chosen, spans of
the context read in windows, a saved folder answering through `pipeline(..., trust_remote_code=True)`, ONNX parity."""

import pytest
import torch
from torch.nn import functional as F
from transformers import AutoModelForQuestionAnswering, pipeline
from utils import FLOAT32_TOLERANCE, require, tiny_config

from hf_elmo import ElmoForQuestionAnswering, ElmoQuestionAnsweringPipeline, ElmoTokenizer
from hf_elmo.modeling_elmo import second_sentence_positions
from hf_elmo.question_answering_elmo import best_spans

QUESTIONS = ["who sat on the mat ?", "where"]
CONTEXTS = ["the cat sat on the mat", "at home , in the small garden behind the house"]


def make_model(**overrides) -> ElmoForQuestionAnswering:
    torch.manual_seed(0)
    model = ElmoForQuestionAnswering(tiny_config(**overrides)).eval()
    with torch.no_grad():  # every weight random, so that a misplaced mask or bias shows
        for parameter in model.parameters():
            parameter.normal_(0.0, 0.5)
    return model


def context_words(encoding) -> torch.Tensor:
    """`(batch, positions)`: the positions of the context's units."""
    words = torch.tensor([[word is not None for word in encoding.word_ids(row)] for row in range(len(QUESTIONS))])
    return words & encoding["token_type_ids"].bool()


@pytest.mark.parametrize(
    "overrides",
    [{}, {"task_lstm_dim": 4}, {"question_attention": False}, {"question_attention": False, "task_lstm_dim": 3}],
)
def test_logits_cover_the_positions_and_only_the_context_can_be_chosen(overrides):
    model, tokenizer = make_model(**overrides), ElmoTokenizer(20)
    encoding = tokenizer(QUESTIONS, CONTEXTS, padding=True, return_tensors="pt")
    output = model(**encoding)
    context = context_words(encoding)
    lowest = torch.finfo(torch.float32).min
    for logits in (output.start_logits, output.end_logits):
        assert logits.shape == encoding["attention_mask"].shape
        assert torch.all(logits[~context] == lowest) and torch.all(logits[context] > lowest / 2)
    for row in range(len(QUESTIONS)):
        for _, start, end in best_spans(output.start_logits[row], output.end_logits[row], 30, top_k=50):
            assert context[row, start] and context[row, end] and start <= end


def test_the_loss_is_the_mean_of_both_cross_entropies_and_ignores_labels_off_the_context():
    model, tokenizer = make_model(task_lstm_dim=4), ElmoTokenizer(20)
    encoding = tokenizer(QUESTIONS, CONTEXTS, padding=True, return_tensors="pt")
    output = model(**encoding)
    starts, ends = torch.tensor([10, 7]), torch.tensor([11, 9])  # "cat sat"; "in the small"
    loss = model(**encoding, start_positions=starts, end_positions=ends).loss
    expected = (F.cross_entropy(output.start_logits, starts) + F.cross_entropy(output.end_logits, ends)) / 2
    torch.testing.assert_close(loss, expected)
    # A label on the question, or past the row, counts for nothing: only the second row's answer is left.
    off_context = model(**encoding, start_positions=torch.tensor([2, 7]), end_positions=torch.tensor([99, 9])).loss
    expected = (
        F.cross_entropy(output.start_logits[1:], starts[1:]) + F.cross_entropy(output.end_logits[1:], ends[1:])
    ) / 2
    torch.testing.assert_close(off_context, expected)
    loss.backward()
    assert model.qa_outputs.weight.grad is not None and model.elmo.bilm.forward_layers[0].input_kernel.grad is None


def test_without_token_type_ids_the_context_is_read_from_the_pairs_markers():
    """PEFT's question-answering model does not pass `token_type_ids` on: the pair's `</S>` says where the context
    starts, as the tokenizer's `token_type_ids` do (padded rows and windows of a long context alike)."""
    model, tokenizer = make_model(), ElmoTokenizer(20)
    for encoding in (
        tokenizer(QUESTIONS, CONTEXTS, padding=True, return_tensors="pt"),
        tokenizer(
            QUESTIONS[:1],
            CONTEXTS[:1],
            max_length=14,
            stride=2,
            truncation="only_second",
            return_overflowing_tokens=True,
            padding=True,
            return_tensors="pt",
        ),
    ):
        valid = encoding["attention_mask"].bool()  # the tokenizer's token_type_ids are 0 at padding
        derived = second_sentence_positions(encoding["input_ids"], model.config)
        assert torch.equal(derived[valid], encoding["token_type_ids"][valid])
        with torch.no_grad():
            inferred = model(encoding["input_ids"], encoding["attention_mask"])
            given = model(encoding["input_ids"], encoding["attention_mask"], encoding["token_type_ids"])
        assert torch.equal(inferred.start_logits, given.start_logits)
        assert torch.equal(inferred.end_logits, given.end_logits)


def test_best_spans_are_the_best_products_within_the_length():
    lowest = torch.finfo(torch.float32).min  # off the context, as the model scores it
    start = torch.tensor([0.0, 3.0, 1.0, lowest])
    end = torch.tensor([0.0, 0.0, 4.0, lowest])
    (probability, first, last), *others = best_spans(start, end, max_answer_length=2, top_k=3)
    assert (first, last) == (1, 2)  # position 3 is off the context; 1-2 is the best within 2 units
    expected = start.log_softmax(0)[1] + end.log_softmax(0)[2]
    assert abs(probability - expected.exp().item()) < 1e-6
    assert all(first <= last < first + 2 for _, first, last in others) and len(others) == 2
    assert best_spans(start, end, max_answer_length=1)[0][1:] == (2, 2)
    with pytest.raises(ValueError, match="max_answer_length"):
        best_spans(start, end, max_answer_length=0)


@pytest.fixture
def saved_folder(tmp_path):
    model, tokenizer = make_model(task_lstm_dim=4), ElmoTokenizer(20)
    model.save_pretrained(tmp_path)
    tokenizer.save_pretrained(tmp_path)
    return tmp_path


def test_a_saved_folder_answers_through_the_pipeline_with_remote_code(saved_folder):
    assert AutoModelForQuestionAnswering.from_pretrained(saved_folder).__class__ is ElmoForQuestionAnswering
    qa = pipeline("question-answering", model=str(saved_folder), trust_remote_code=True)
    assert qa.__class__.__module__.endswith("question_answering_elmo")  # the folder's own copy
    for question, context in zip(QUESTIONS, CONTEXTS):
        answer = qa(question=question, context=context)
        assert set(answer) == {"answer", "score", "start", "end"} and 0 < answer["score"] <= 1
        assert answer["answer"] == context[answer["start"] : answer["end"]] and answer["answer"].strip()
    answers = qa(question=QUESTIONS[0], context=CONTEXTS[1], top_k=3)
    assert len(answers) == 3 and answers[0]["score"] >= answers[1]["score"] >= answers[2]["score"]


def test_a_long_context_is_read_in_windows(monkeypatch):
    """The answer sits in the last window: the model scores one word alone, wherever its window places it."""
    model, tokenizer = make_model(), ElmoTokenizer(20)
    target = tokenizer.word_to_row("zebra")
    forward = ElmoForQuestionAnswering.forward

    def only_the_target(self, input_ids, *args, **kwargs):
        output = forward(self, input_ids, *args, **kwargs)
        is_target = (input_ids == torch.tensor(target)).all(dim=-1)
        output.start_logits = output.start_logits.masked_fill(is_target, 50.0)
        output.end_logits = output.end_logits.masked_fill(is_target, 50.0)
        return output

    monkeypatch.setattr(ElmoForQuestionAnswering, "forward", only_the_target)
    qa = ElmoQuestionAnsweringPipeline(model=model, tokenizer=tokenizer)
    context = " ".join(f"word{index}" for index in range(60)) + " a zebra ran , " + "x " * 5
    answer = qa(question="what ran ?", context=context, max_length=20, stride=4)
    assert answer["answer"] == "zebra" and context[answer["start"] : answer["end"]] == "zebra"
    assert answer["start"] == context.index("zebra") and answer["score"] > 0.99
    with pytest.raises(ValueError, match="no room for the context"):
        qa(question="what ran ?", context=context, max_length=8)


@pytest.mark.slow
def test_an_exported_graph_gives_the_models_logits(tmp_path, saved_folder):
    require("onnxruntime", reason='the ONNX tests need the onnx extra: pip install "hf_elmo[onnx]"')
    require("onnxscript", reason='the ONNX tests need the onnx extra: pip install "hf_elmo[onnx]"')
    from hf_elmo.onnx_elmo import ElmoOnnxSession, export_onnx

    export_onnx(saved_folder, tmp_path / "onnx")
    session = ElmoOnnxSession(tmp_path / "onnx")
    assert session.input_names == ["input_ids", "attention_mask", "token_type_ids"]
    assert session.output_names == ["start_logits", "end_logits"]
    model, tokenizer = ElmoForQuestionAnswering.from_pretrained(saved_folder).eval(), ElmoTokenizer(20)
    for questions, contexts in ((QUESTIONS[:1], CONTEXTS[1:]), (QUESTIONS * 2, CONTEXTS + [CONTEXTS[1] * 3] * 2)):
        encoding = tokenizer(questions, contexts, padding=True, return_tensors="pt")
        outputs = session(**{name: encoding[name].numpy() for name in session.input_names})
        with torch.no_grad():
            expected = model(**encoding)
        for name in ("start_logits", "end_logits"):
            torch.testing.assert_close(torch.from_numpy(outputs[name]), expected[name], rtol=0, atol=FLOAT32_TOLERANCE)
