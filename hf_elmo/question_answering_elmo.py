"""
Extractive question answering with `ElmoForQuestionAnswering`: the best answer spans of a window's scores
([`best_spans`]) and the `question-answering` pipeline ([`ElmoQuestionAnsweringPipeline`]).

transformers 5 has no question-answering pipeline of its own: `pipeline("question-answering", ...)` reaches this one
through a folder's `config.custom_pipelines`, which `ElmoForQuestionAnswering.save_pretrained` writes beside a copy of
this file (`folder_layout`), so that `pipeline("question-answering", model=folder, trust_remote_code=True)` answers;
`import hf_elmo` also registers it with `PIPELINE_REGISTRY`. This file imports nothing from hf_elmo: a saved folder
carries it alone.

A context longer than the model takes is read in windows (the tokenizer's `return_overflowing_tokens` with
`truncation="only_second"`); an answer is a span of the context's units (Korean morphemes with `korean_morphemes`),
from its first unit's start to its last unit's end in the context string, so that an answer may end inside a
whitespace word (`1397년` of `1397년에`), and contracted morphemes, whose spans overlap, give whole characters.
"""

import torch
from transformers import Pipeline


def best_spans(
    start_logits: torch.Tensor, end_logits: torch.Tensor, max_answer_length: int, top_k: int = 1
) -> list[tuple[float, int, int]]:
    """
    The `top_k` best answers of one window, best first, as `(probability, start position, end position)`: the spans
    `start <= end < start + max_answer_length` scored by `p(start) * p(end)`, each a softmax of `start_logits` and
    `end_logits` `(positions,)` over the window. A position whose logit is the lowest of its dtype (off the context,
    as `ElmoForQuestionAnswering` scores it) is never part of an answer: fewer than `top_k` may come back.
    """
    if max_answer_length < 1:
        raise ValueError(f"max_answer_length must be at least 1, got {max_answer_length}")
    start_logits, end_logits = start_logits.float(), end_logits.float()
    off_context = torch.finfo(torch.float32).min / 2
    scores = start_logits.log_softmax(-1)[:, None] + end_logits.log_softmax(-1)[None, :]  # (start, end)
    positions = torch.arange(len(scores), device=scores.device)
    length = positions[None, :] - positions[:, None]
    excluded = (length < 0) | (length >= max_answer_length)
    excluded |= (start_logits <= off_context)[:, None] | (end_logits <= off_context)[None, :]
    scores = scores.masked_fill(excluded, float("-inf"))
    best = scores.flatten().topk(min(top_k, scores.numel()))
    return [
        (score.exp().item(), divmod(index.item(), len(scores))[0], divmod(index.item(), len(scores))[1])
        for score, index in zip(best.values, best.indices)
        if score > float("-inf")
    ]


class ElmoQuestionAnsweringPipeline(Pipeline):
    """
    `question-answering` for `ElmoForQuestionAnswering`: `pipeline(question="...", context="...")` (or a dict, or a
    list of dicts with those keys) returns `{"answer", "score", "start", "end"}` with `answer ==
    context[start:end]` (a list of such for `top_k > 1` or several questions).

    Parameters (each also accepted at call time): `max_answer_length` (units, default 30), `max_length` (positions
    of a window, question included; default the tokenizer's `model_max_length`, capped at 384), `stride` (units
    two windows share, default a quarter of a window's context), `top_k` (default 1).
    """

    _load_processor = False
    _load_image_processor = False
    _load_feature_extractor = False
    _load_tokenizer = True

    def __call__(self, inputs=None, *, question: str | None = None, context: str | None = None, **kwargs):
        if inputs is None:
            if question is None or context is None:
                raise ValueError("question-answering needs a question and a context: qa(question=..., context=...)")
            inputs = {"question": question, "context": context}
        return super().__call__(inputs, **kwargs)

    def _sanitize_parameters(self, max_answer_length=None, max_length=None, stride=None, top_k=None, **kwargs):
        if kwargs:
            raise TypeError(f"the question-answering pipeline got unexpected arguments: {sorted(kwargs)}")
        preprocess = {key: value for key, value in (("max_length", max_length), ("stride", stride)) if value}
        postprocess = {"max_answer_length": max_answer_length or 30, "top_k": top_k or 1}
        return preprocess, {}, postprocess

    def preprocess(self, inputs: dict, max_length: int | None = None, stride: int | None = None) -> dict:
        if not isinstance(inputs, dict) or not {"question", "context"} <= set(inputs):
            raise ValueError("each question-answering input is a dict with a question and a context")
        question, context = inputs["question"], inputs["context"]
        if not question.strip() or not context.strip():
            raise ValueError("the question and the context must each hold a word")
        max_length = max_length or min(self.tokenizer.model_max_length, 384)
        question_units = len(self.tokenizer.split_words(question))
        context_room = max_length - question_units - 4
        if context_room < 2:
            raise ValueError(f"max_length={max_length} leaves no room for the context beside the question")
        stride = context_room // 4 if stride is None else stride
        encoding = self.tokenizer(
            question,
            context,
            truncation="only_second",
            max_length=max_length,
            stride=stride,
            return_overflowing_tokens=True,
            return_offsets_mapping=True,
            padding=True,
            return_tensors="pt",
        )
        inputs = {name: encoding[name] for name in self.model.graph_input_names}
        return {"inputs": inputs, "offsets": encoding["offset_mapping"].tolist(), "context": context}

    def _forward(self, model_inputs: dict) -> dict:
        output = self.model(**model_inputs["inputs"])
        return {
            "start_logits": output.start_logits,
            "end_logits": output.end_logits,
            "offsets": model_inputs["offsets"],
            "context": model_inputs["context"],
        }

    def postprocess(self, model_outputs: dict, max_answer_length: int = 30, top_k: int = 1):
        context, answers = model_outputs["context"], []
        windows = zip(model_outputs["start_logits"], model_outputs["end_logits"], model_outputs["offsets"])
        for start_logits, end_logits, offsets in windows:
            for score, start, end in best_spans(start_logits, end_logits, max_answer_length, top_k):
                first, last = offsets[start][0], max(offsets[start][1], offsets[end][1])
                answers.append({"score": score, "start": first, "end": last, "answer": context[first:last]})
        distinct, seen = [], set()
        for answer in sorted(answers, key=lambda answer: -answer["score"]):  # the best of each span seen in windows
            if (answer["start"], answer["end"]) not in seen:
                seen.add((answer["start"], answer["end"]))
                distinct.append(answer)
        return distinct[0] if top_k == 1 else distinct[:top_k]
