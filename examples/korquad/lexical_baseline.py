"""A lexical sliding-window baseline for KorQuAD: what matching the question's words alone finds, without a model.

    python examples/korquad/lexical_baseline.py --test-file outputs/korquad/test.json

Every span of one to `--max-words` whitespace words of the context is a candidate, unless each of its words is also
in the question (an answer rarely repeats the question). A context word matches the question when it shares its
first two characters with a question word (a Korean stem with another particle), and a candidate scores the matches
of the `--window` words on each side, each weighted `1 / distance`. The best candidate, its punctuation stripped, is
the answer, its punctuation and a trailing particle (`PARTICLES`, the longest that leaves a character) stripped: a
KorQuAD answer ends before the particle of its whitespace word (`1397년` in `1397년에`). Scored with
`examples/run_qa.py`'s KorQuAD measures (exact match and character F1, x 100).
"""

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # examples/: run_qa's reader and measures

from run_qa import korquad_scores, read_squad  # noqa: E402

from hf_elmo.errors import run_entry_point

PUNCTUATION = "\"'.,?!()《》<>〈〉‘’“”:;"
# Common Korean particles and endings that follow a noun inside its whitespace word, longest first.
PARTICLES = sorted(
    (
        "은 는 이 가 을 를 에 의 로 와 과 도 만 에서 으로 에게 까지 부터 이다 였다 이며 이고 라는 이라는 에는 에도 "
        "으로는 로는 과의 와의"
    ).split(),
    key=len,
    reverse=True,
)


def without_particle(word: str) -> str:
    """`word` less the longest particle it ends with, where a character is left."""
    return next((word[: -len(p)] for p in PARTICLES if word.endswith(p) and len(word) > len(p)), word)


def stem(word: str) -> str:
    """A word's first two characters, its punctuation stripped: the part a particle does not change."""
    return word.strip(PUNCTUATION)[:2]


def best_answer(question: str, context: str, max_words: int, window: int) -> str:
    """The candidate span of `context` whose neighbourhood matches `question` best (see the module's doc)."""
    asked = {stem(word) for word in question.split()} - {""}
    words = context.split()
    matches = [stem(word) in asked for word in words]
    best, answer = float("-inf"), ""
    for first in range(len(words)):
        for last in range(first, min(first + max_words, len(words))):
            if all(matches[first : last + 1]):
                continue
            score = sum(
                matches[position] / (first - position if position < first else position - last)
                for position in range(max(0, first - window), min(len(words), last + window + 1))
                if not first <= position <= last
            )
            if score > best:
                best, answer = score, without_particle(" ".join(words[first : last + 1]).strip(PUNCTUATION))
    return answer


def main(argv: list[str] | None = None) -> dict[str, float]:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0], allow_abbrev=False)
    parser.add_argument("--test-file", required=True, help="SQuAD-layout JSON (prepare_korquad.py's test.json)")
    parser.add_argument("--max-words", type=int, default=3, help="the most whitespace words a candidate spans")
    parser.add_argument("--window", type=int, default=8, help="words on each side of a candidate that are read")
    args = parser.parse_args(argv)
    questions = read_squad(args.test_file)
    predictions = {q.id: best_answer(q.question, q.context, args.max_words, args.window) for q in questions}
    scores = korquad_scores(predictions, questions)
    print(f"{len(questions)} questions: exact_match = {scores['exact_match']:.2f}, f1 = {scores['f1']:.2f}")
    return scores


if __name__ == "__main__":
    sys.exit(run_entry_point(main))
