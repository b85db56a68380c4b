"""KorQuAD 1.0's development set split by article into the training and test parts every figure here uses.

    python examples/korquad/prepare_korquad.py --input ../shared/data/korquad/KorQuAD_v1.0_dev.json \
        --output-dir outputs/korquad

An article belongs to the test part when `int(md5(title), 16) % 5 == 0` (../shared/data/korquad/README.md), else to
the training part: 111 articles and 4,762 questions to train on, 29 and 1,012 to test. Writes `train.json` and
`test.json` in SQuAD's layout, the articles unchanged, for `examples/run_qa.py` (kept under outputs/, never
published: the set's licence allows passing it on unchanged only).
"""

import argparse
import hashlib
import json
import sys
from pathlib import Path

from hf_elmo.errors import run_entry_point


def is_test_article(title: str) -> bool:
    """The split of ../shared/data/korquad/README.md, by article title."""
    return int(hashlib.md5(title.encode("utf-8")).hexdigest(), 16) % 5 == 0


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0], allow_abbrev=False)
    parser.add_argument("--input", required=True, help="KorQuAD_v1.0_dev.json")
    parser.add_argument("--output-dir", required=True, help="where train.json and test.json are written")
    args = parser.parse_args(argv)
    source = json.loads(Path(args.input).read_text(encoding="utf-8"))
    output = Path(args.output_dir)
    output.mkdir(parents=True, exist_ok=True)
    for name, wanted in (("train", False), ("test", True)):
        articles = [article for article in source["data"] if is_test_article(article["title"]) == wanted]
        questions = sum(len(paragraph["qas"]) for article in articles for paragraph in article["paragraphs"])
        part = {"version": source.get("version"), "data": articles}
        (output / f"{name}.json").write_text(json.dumps(part, ensure_ascii=False), encoding="utf-8")
        print(f"{name}: {len(articles)} articles, {questions} questions")


if __name__ == "__main__":
    sys.exit(run_entry_point(main))
