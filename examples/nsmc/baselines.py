"""Reference points for the NSMC figures: the majority class, and logistic regression on bags of words and of
character n-grams.

    python examples/nsmc/baselines.py --data-dir outputs/nsmc/data [--train-file train_100000.csv]

The majority class is the training split's most frequent label, predicted for every test review. The bag-of-words
model is a logistic regression (in torch) on the presence of whitespace-separated words seen at least twice in the
training reviews, trained with Adam for `--epochs` passes; the epoch with the best validation accuracy is reported
on the test split. The character n-gram model is scikit-learn's logistic regression on TF-IDF of the 1- to 4-grams
of characters inside each word (`char_wb`, sublinear tf, n-grams seen in at least 2 training reviews), its inverse
regularisation `C` chosen on the validation split: the strong baseline for Korean, whose words carry their
particles and endings. Prints and writes `baselines.json` (`baselines_<train file stem>.json` for another
`--train-file`) in `--data-dir`.
"""

import argparse
import csv
import json
import sys
from collections import Counter
from pathlib import Path

import torch
from sklearn.feature_extraction.text import TfidfVectorizer
from sklearn.linear_model import LogisticRegression

from hf_elmo.errors import run_entry_point


def accuracy_and_macro_f1(predicted: torch.Tensor, gold: torch.Tensor) -> dict[str, float]:
    """The metrics of `examples/run_classification.py`: accuracy, and F1 averaged over the classes seen."""
    scores = []
    for label in torch.cat([predicted, gold]).unique():
        true_positive = ((predicted == label) & (gold == label)).sum()
        scores.append(2 * true_positive / ((predicted == label).sum() + (gold == label).sum()))
    return {"accuracy": (predicted == gold).float().mean().item(), "macro_f1": torch.stack(scores).mean().item()}


def read_split(path: Path) -> tuple[list[list[str]], torch.Tensor]:
    with open(path, newline="", encoding="utf-8") as handle:
        rows = list(csv.DictReader(handle))
    return [row["text"].split() for row in rows], torch.tensor([int(row["label"]) for row in rows])


def bags(texts: list[list[str]], vocab: dict[str, int]) -> tuple[torch.Tensor, torch.Tensor]:
    """`EmbeddingBag` inputs: the ids of each review's distinct known words, flattened, and the offsets."""
    ids, offsets = [], []
    for words in texts:
        offsets.append(len(ids))
        ids.extend(sorted({vocab[w] for w in words if w in vocab}))
    return torch.tensor(ids, dtype=torch.long), torch.tensor(offsets, dtype=torch.long)


def char_ngram_baseline(splits: dict, c_values: list[float]) -> dict:
    """TF-IDF of in-word character 1-4-grams and a logistic regression; `C` is the best on validation."""
    vectorizer = TfidfVectorizer(analyzer="char_wb", ngram_range=(1, 4), sublinear_tf=True, min_df=2)
    features = {"train": vectorizer.fit_transform(" ".join(words) for words in splits["train"][0])}
    features.update(
        {
            split: vectorizer.transform(" ".join(words) for words in splits[split][0])
            for split in ("validation", "test")
        }
    )
    best = None
    for c in c_values:
        classifier = LogisticRegression(C=c, solver="liblinear", max_iter=1000)
        classifier.fit(features["train"], splits["train"][1].numpy())
        scores = {
            split: accuracy_and_macro_f1(torch.from_numpy(classifier.predict(features[split])), splits[split][1])
            for split in ("validation", "test")
        }
        if best is None or scores["validation"]["accuracy"] > best["validation"]["accuracy"]:
            best = {"C": c, **scores}
    return {"features": len(vectorizer.vocabulary_), **best}


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], allow_abbrev=False)
    parser.add_argument("--data-dir", default="outputs/nsmc/data")
    parser.add_argument("--train-file", default="train.csv", help="labelled training file inside --data-dir")
    parser.add_argument(
        "--char-c",
        type=float,
        nargs="+",
        default=[1.0, 4.0, 16.0],
        help="values of C tried for the character n-gram model",
    )
    parser.add_argument("--min-count", type=int, default=2)
    parser.add_argument("--epochs", type=int, default=5)
    parser.add_argument("--learning-rate", type=float, default=0.01)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    torch.manual_seed(args.seed)
    data_dir = Path(args.data_dir)
    splits = {
        split: read_split(data_dir / (args.train_file if split == "train" else f"{split}.csv"))
        for split in ("train", "validation", "test")
    }

    train_labels = splits["train"][1]
    majority = int(train_labels.bincount().argmax())
    test_labels = splits["test"][1]
    results = {
        "majority_class": {
            "label": majority,
            **accuracy_and_macro_f1(torch.full_like(test_labels, majority), test_labels),
        }
    }

    counts = Counter(w for words in splits["train"][0] for w in set(words))
    vocab = {w: i for i, w in enumerate(sorted(w for w, c in counts.items() if c >= args.min_count))}
    inputs = {split: bags(texts, vocab) for split, (texts, _) in splits.items()}
    model = torch.nn.EmbeddingBag(len(vocab), 2, mode="sum")
    torch.nn.init.zeros_(model.weight)
    bias = torch.nn.Parameter(torch.zeros(2))
    optimizer = torch.optim.Adam([*model.parameters(), bias], lr=args.learning_rate)
    n_train = len(train_labels)
    best = None
    for epoch in range(args.epochs):
        for batch in torch.randperm(n_train).split(64):
            texts = [splits["train"][0][i] for i in batch.tolist()]
            ids, offsets = bags(texts, vocab)
            loss = torch.nn.functional.cross_entropy(model(ids, offsets) + bias, train_labels[batch])
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
        with torch.no_grad():
            scores = {
                split: accuracy_and_macro_f1((model(*inputs[split]) + bias).argmax(-1), labels)
                for split, (_, labels) in splits.items()
                if split != "train"
            }
        if best is None or scores["validation"]["accuracy"] > best["validation"]["accuracy"]:
            best = {"epoch": epoch + 1, **scores}
    results["bag_of_words"] = {"vocabulary": len(vocab), **best}
    results["char_ngram_tfidf"] = char_ngram_baseline(splits, args.char_c)
    results["train_file"], results["train_reviews"] = args.train_file, n_train
    name = "baselines.json" if args.train_file == "train.csv" else f"baselines_{Path(args.train_file).stem}.json"
    (data_dir / name).write_text(json.dumps(results, indent=2) + "\n", encoding="utf-8")
    print(json.dumps(results, indent=2))
    return results


if __name__ == "__main__":
    sys.exit(run_entry_point(main))
