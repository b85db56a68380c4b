"""What a frozen biLM knows about sentiment: every layer averaged over each review's words, then a logistic regression.

    python examples/nsmc/frozen_features.py --model outputs/nsmc/elmo-ko --data-dir outputs/nsmc/data

Each review is encoded by the frozen biLM; for each layer (the character CNN's, then each LSTM layer's) the vectors
of its words (not `<S>`, `</S>` or padding) are averaged, and the layers' averages are concatenated:
`(n_layers + 1) * 2 * projection_dim` features per review. scikit-learn's logistic regression, on features
standardised with the training split's mean and deviation, is trained on `--train-file`, its `C` chosen on the
validation split, and scored on the test split. Nothing of the biLM is trained, so this measures the biLM itself.
Prints and writes `frozen_features.json` in `--output-dir` (default: the model folder; here for a bundled name).
"""

import argparse
import csv
import json
import sys
from pathlib import Path

import numpy as np
import torch
from sklearn.linear_model import LogisticRegression
from sklearn.preprocessing import StandardScaler

from hf_elmo import ElmoModel
from hf_elmo.errors import run_entry_point
from hf_elmo.loading import load_model_and_tokenizer
from hf_elmo.modeling_elmo import masked_pool, word_positions


def read_split(path: Path) -> tuple[list[str], np.ndarray]:
    with open(path, newline="", encoding="utf-8") as handle:
        rows = list(csv.DictReader(handle))
    return [row["text"] for row in rows], np.array([int(row["label"]) for row in rows])


@torch.inference_mode()
def layer_means(model, tokenizer, texts: list[str], batch_size: int, max_length: int) -> np.ndarray:
    """`(len(texts), (n_layers + 1) * 2 * projection_dim)`: each layer's mean over the words, concatenated."""
    order = sorted(range(len(texts)), key=lambda i: len(texts[i]))  # similar lengths batched together
    features = np.zeros((len(texts), (model.config.n_layers + 1) * 2 * model.config.projection_dim), np.float32)
    for start in range(0, len(order), batch_size):
        rows = order[start : start + batch_size]
        batch = tokenizer(
            [texts[i] for i in rows], padding=True, truncation=True, max_length=max_length, return_tensors="pt"
        )
        layers = model(**batch, output_hidden_states=True).hidden_states
        positions = word_positions(batch["input_ids"], batch["attention_mask"].bool(), model.config)
        pooled = torch.cat([masked_pool(layer.float(), positions, "mean") for layer in layers], dim=-1)
        features[rows] = pooled.numpy()
    return features


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], allow_abbrev=False)
    parser.add_argument(
        "--model",
        required=True,
        help="an ElmoModel folder (or any folder holding the biLM), or a bundled model's name",
    )
    parser.add_argument("--data-dir", default="outputs/nsmc/data")
    parser.add_argument("--train-file", default="train.csv", help="labelled training file inside --data-dir")
    parser.add_argument(
        "--output-dir", help="where frozen_features.json goes (default: --model's folder, or here for a bundled name)"
    )
    parser.add_argument("--c-values", type=float, nargs="+", default=[0.001, 0.01, 0.1, 1.0])
    parser.add_argument("--batch-size", type=int, default=128)
    parser.add_argument("--max-length", type=int, default=64, help="positions per review, <S> and </S> included")
    args = parser.parse_args(argv)

    model, tokenizer = load_model_and_tokenizer(args.model, ElmoModel, dtype=torch.float32)
    data_dir = Path(args.data_dir)
    splits = {
        split: read_split(data_dir / (args.train_file if split == "train" else f"{split}.csv"))
        for split in ("train", "validation", "test")
    }
    features = {
        split: layer_means(model, tokenizer, texts, args.batch_size, args.max_length)
        for split, (texts, _) in splits.items()
    }
    scaler = StandardScaler().fit(features["train"])
    features = {split: scaler.transform(values) for split, values in features.items()}
    best = None
    for c in args.c_values:
        classifier = LogisticRegression(C=c, max_iter=2000).fit(features["train"], splits["train"][1])
        scores = {
            split: float((classifier.predict(features[split]) == splits[split][1]).mean())
            for split in ("validation", "test")
        }
        if best is None or scores["validation"] > best["validation_accuracy"]:
            best = {"C": c, "validation_accuracy": scores["validation"], "test_accuracy": scores["test"]}
    results = {
        "model": args.model,
        "train_file": args.train_file,
        "train_reviews": len(splits["train"][1]),
        "features": features["train"].shape[1],
        **best,
    }
    # Beside a model folder by default; never into the installed package for a bundled model's name.
    output_dir = Path(args.output_dir or (args.model if Path(args.model).expanduser().is_dir() else "."))
    output_dir.mkdir(parents=True, exist_ok=True)
    (output_dir / "frozen_features.json").write_text(json.dumps(results, indent=2) + "\n", encoding="utf-8")
    print(json.dumps(results, indent=2))
    return results


if __name__ == "__main__":
    sys.exit(run_entry_point(main))
