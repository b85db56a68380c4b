"""Splits the NSMC raw crawl BY MOVIE into labelled csv files and pre-training text.

    python examples/nsmc/prepare_nsmc.py --input ../shared/data/nsmc/reviews.tsv.gz --output-dir outputs/nsmc/data

Labels follow NSMC: ratings 1-4 are negative (0), 9-10 positive (1), 5-8 excluded from the labelled files. The
movies are shuffled and dealt into train / validation / test by `--movie-fractions`, so no movie is in two splits.
Writes `train.csv`, `validation.csv`, `test.csv` (columns `text,label`, reviews sampled from each split's movies)
and `pretrain_train.txt` (reviews of the TRAINING movies only, the unlabelled neutral ones included; one review per
line) plus `pretrain_validation.txt` (reviews of the validation movies) for `hf-elmo pretrain`, and `splits.json`
with the counts. `--pretrain-size 0` writes every review of the training movies.

`--extra-train-sizes 100000 0` also writes `train_100000.csv` and `train_all.csv` (0: every labelled review of the
training movies): prefixes of the same shuffle as `train.csv`, so each size holds the smaller ones and `train.csv`
is the first `--train-size` rows of them all. The other files do not change with this option.
"""

import argparse
import csv
import gzip
import json
import random
import sys
from collections import defaultdict
from pathlib import Path

from hf_elmo.errors import run_entry_point

SPLITS = ("train", "validation", "test")


def read_reviews(path: str) -> dict[str, list[tuple[str, int]]]:
    """`{movie_id: [(review, rating), ...]}`, whitespace normalised, in file order."""
    movies = defaultdict(list)
    with gzip.open(path, "rt", encoding="utf-8", newline="") as handle:
        reader = csv.DictReader(handle, delimiter="\t", quoting=csv.QUOTE_NONE)
        for row in reader:
            text = " ".join(row["review"].split())
            if text:
                movies[row["movie_id"]].append((text, int(row["rating"])))
    if not movies:
        raise ValueError(f"{path} holds no review")
    return movies


def label_of(rating: int) -> int | None:
    """NSMC's rule: 1-4 negative (0), 9-10 positive (1), 5-8 no label."""
    if not 1 <= rating <= 10:
        raise ValueError(f"a rating must be 1 to 10, got {rating}")
    return 0 if rating <= 4 else 1 if rating >= 9 else None


def split_movies(movie_ids: list[str], fractions: list[float], seed: int) -> dict[str, list[str]]:
    """The movies shuffled and dealt into the three splits by `fractions` of the movies."""
    if len(fractions) != 3 or any(f <= 0 for f in fractions) or abs(sum(fractions) - 1) > 1e-6:
        raise ValueError(f"--movie-fractions must be three positive numbers summing to 1, got {fractions}")
    movie_ids = sorted(movie_ids)
    random.Random(seed).shuffle(movie_ids)
    first = round(fractions[0] * len(movie_ids))
    second = first + round(fractions[1] * len(movie_ids))
    return dict(zip(SPLITS, (movie_ids[:first], movie_ids[first:second], movie_ids[second:])))


def sample(items: list, size: int | None, rng: random.Random) -> list:
    """`size` items drawn without replacement (all of them, shuffled, when `size` is None, 0 or too large)."""
    items = list(items)
    rng.shuffle(items)
    return items[:size] if size else items


def write_labelled(path: Path, rows: list[tuple[str, int]]) -> None:
    with open(path, "w", newline="", encoding="utf-8") as handle:
        writer = csv.writer(handle)
        writer.writerow(["text", "label"])
        writer.writerows(rows)


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], allow_abbrev=False)
    parser.add_argument("--input", default="../shared/data/nsmc/reviews.tsv.gz")
    parser.add_argument("--output-dir", default="outputs/nsmc/data")
    parser.add_argument(
        "--movie-fractions",
        type=float,
        nargs=3,
        default=[0.8, 0.1, 0.1],
        help="share of the movies in train, validation, test",
    )
    parser.add_argument("--train-size", type=int, default=20000, help="labelled training reviews")
    parser.add_argument("--validation-size", type=int, default=2000, help="labelled validation reviews")
    parser.add_argument("--test-size", type=int, default=10000, help="labelled test reviews")
    parser.add_argument(
        "--extra-train-sizes",
        type=int,
        nargs="*",
        default=[],
        help="also write train_N.csv for each N (0: train_all.csv, every labelled training review)",
    )
    parser.add_argument(
        "--pretrain-size",
        type=int,
        default=200000,
        help="pre-training reviews from the training movies (any rating; 0: all of them)",
    )
    parser.add_argument(
        "--pretrain-validation-size",
        type=int,
        default=2000,
        help="pre-training validation reviews from the validation movies",
    )
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)

    movies = read_reviews(args.input)
    split_ids = split_movies(list(movies), args.movie_fractions, args.seed)
    rng = random.Random(args.seed)
    output_dir = Path(args.output_dir)
    output_dir.mkdir(parents=True, exist_ok=True)
    sizes = {"train": args.train_size, "validation": args.validation_size, "test": args.test_size}
    summary = {"movies": {split: len(ids) for split, ids in split_ids.items()}, "labelled": {}}
    for split, ids in split_ids.items():
        labelled = [
            (text, label_of(rating)) for movie in ids for text, rating in movies[movie] if label_of(rating) is not None
        ]
        shuffled = sample(labelled, None, rng)
        chosen = shuffled[: sizes[split]]
        write_labelled(output_dir / f"{split}.csv", chosen)
        summary["labelled"][split] = {
            "available": len(labelled),
            "written": len(chosen),
            "positive": sum(label for _, label in chosen),
        }
        if split == "train":
            for size in args.extra_train_sizes:
                rows = shuffled[:size] if size else shuffled
                write_labelled(output_dir / f"train_{size or 'all'}.csv", rows)
                summary["labelled"][f"train_{size or 'all'}"] = {
                    "written": len(rows),
                    "positive": sum(label for _, label in rows),
                }

    for split, size in (("train", args.pretrain_size), ("validation", args.pretrain_validation_size)):
        texts = [text for movie in split_ids[split] for text, _ in movies[movie]]
        chosen = sample(texts, size, rng)
        (output_dir / f"pretrain_{split}.txt").write_text("".join(t + "\n" for t in chosen), encoding="utf-8")
        summary[f"pretrain_{split}"] = {"available": len(texts), "written": len(chosen)}
    (output_dir / "splits.json").write_text(json.dumps(summary, indent=2) + "\n", encoding="utf-8")
    print(json.dumps(summary, indent=2))
    return summary


if __name__ == "__main__":
    sys.exit(run_entry_point(main))
