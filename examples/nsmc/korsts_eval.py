"""KorSTS dev: how well a biLM folder's sentence vectors rank sentence pairs, for each way of making them.

    OMP_NUM_THREADS=1 python examples/nsmc/korsts_eval.py --model hf_elmo/bundled/ko-nsmc \
        --reference-text outputs/nsmc/data/pretrain_validation.txt

The measure is the usual unsupervised one: the Spearman correlation (x 100) between the cosine of the two sentence
vectors of each of the 1,500 pairs and its gold score (../shared/data/korsts/README.md). Every vector is hf_elmo's
own, `sentence_vectors.sentence_vectors` (what `ElmoModel.sentence_embedding` returns) on the biLM's layers, run once:

- layers: each alone, the average of all (the default), the average of layers 0 and 1;
- word weights: the plain mean, and SIF's `a / (a + p(w))` for each `--a`, `p(w)` from the folder's
  `word_counts.json` (`sentence_weighting.WordCounts`; without it, the plain mean alone);
- what a reference text's vectors share, taken out: nothing; the first singular vector of the same vectors of
  `--reference-text` (text the model could ship it from: Arora et al.'s common component), removed; that text's mean
  vector and its first `k` principal directions for each `--directions` (Mu and Viswanath's all-but-the-top,
  `sentence_weighting.reference_directions`); and, as a diagnostic only, the common component of KorSTS's own
  sentences (Arora et al.'s setting, which makes a vector depend on the sentences compared: never saved with a model).

Settings chosen on dev flatter dev. So the pairs are also dealt into two halves (`--seed`), and each way above is
chosen on one half and scored on the other: the mean of the two held-out scores is a figure no choice has seen
(the diagnostic row takes no part). Then the folder's own vector in one call,
`ElmoSentenceEmbedder.from_pretrained(folder).encode` (what `SentenceTransformer(folder)` gives): on dev, and on
each half.

Also printed: the share of KorSTS's words outside the word vocabulary, and the char 1-4-gram TF-IDF baseline of the
data's README (scikit-learn, the `training` extra). KorSTS is for measuring only: nothing here trains on it.
"""

import argparse
import csv
import random
import sys
from pathlib import Path

import torch
from scipy.stats import spearmanr

from hf_elmo import ElmoModel, ElmoSentenceEmbedder, ElmoTokenizer
from hf_elmo.errors import run_entry_point
from hf_elmo.loading import load_model_and_tokenizer
from hf_elmo.modeling_elmo import valid_positions, word_positions
from hf_elmo.sentence_vectors import sentence_vectors
from hf_elmo.sentence_weighting import WordCounts, common_component, reference_directions

KORSTS = Path(__file__).resolve().parents[3] / "shared" / "data" / "korsts" / "sts-dev.tsv"


def read_pairs(path: Path) -> tuple[list[str], list[str], list[float]]:
    """The first sentences, second sentences and gold scores of a KorSTS file (quote marks are text)."""
    with open(path, newline="", encoding="utf-8") as handle:
        rows = list(csv.DictReader(handle, delimiter="\t", quoting=csv.QUOTE_NONE))
    return (
        [row["sentence1"] for row in rows],
        [row["sentence2"] for row in rows],
        [float(row["score"]) for row in rows],
    )


@torch.inference_mode()
def encoded_batches(model: ElmoModel, tokenizer: ElmoTokenizer, texts: list[str], counted: bool, batch_size: int = 64):
    """Per batch of `texts`: the biLM's layers, the word positions, and the word-vocabulary ids when `counted`."""
    batches = []
    for start in range(0, len(texts), batch_size):
        batch = tokenizer(
            texts[start : start + batch_size], padding=True, return_word_labels=counted, return_tensors="pt"
        )
        labels = batch.pop("labels", None)
        layers = model(**batch, output_hidden_states=True).hidden_states
        mask = valid_positions(batch["input_ids"], batch["attention_mask"])
        words = word_positions(batch["input_ids"], mask, model.config)
        batches.append((layers, words, labels))
    return batches


def vectors_of(
    batches, counts: WordCounts | None, layer_weights, a: float | None, component=None, mean=None
) -> torch.Tensor:
    """The sentence vectors `(texts, hidden_size)` of one variant over `encoded_batches`."""
    return torch.cat(
        [
            sentence_vectors(
                layers,
                words,
                layer_weights,
                None if a is None else counts.sif_weights(labels, a),
                component,
                mean,
            )
            for layers, words, labels in batches
        ]
    )


def spearman(first: torch.Tensor, second: torch.Tensor, gold: list[float], pairs: list[int] | None = None) -> float:
    """Spearman x 100 of the cosines of the pairs' vectors against the gold scores, over `pairs` (all by default)."""
    cosines = torch.nn.functional.cosine_similarity(first, second, dim=-1).numpy()
    pairs = list(range(len(gold))) if pairs is None else pairs
    return 100 * spearmanr(cosines[pairs], [gold[pair] for pair in pairs]).statistic


def halves(count: int, seed: int) -> tuple[list[int], list[int]]:
    """The pairs `0 .. count - 1` shuffled (`seed`) and dealt into two halves."""
    order = list(range(count))
    random.Random(seed).shuffle(order)
    return sorted(order[: count // 2]), sorted(order[count // 2 :])


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], allow_abbrev=False)
    parser.add_argument("--model", required=True, help="a biLM folder (word_counts.json beside it for SIF)")
    parser.add_argument("--data", default=str(KORSTS), help="KorSTS's sts-dev.tsv")
    parser.add_argument(
        "--reference-text", required=True, nargs="+", help="files of one sentence a line: the reference text"
    )
    parser.add_argument("--reference-lines", type=int, default=2000, help="lines of each --reference-text file used")
    parser.add_argument("--a", type=float, nargs="+", default=[1e-3, 1e-4, 1e-5, 1e-6], help="SIF's a values")
    parser.add_argument(
        "--directions", type=int, nargs="+", default=[5, 10, 20, 40], help="k values of all-but-the-top"
    )
    parser.add_argument("--seed", type=int, default=0, help="how the pairs are dealt into two halves")
    args = parser.parse_args(argv)

    torch.set_num_threads(1)
    model, tokenizer = load_model_and_tokenizer(args.model, ElmoModel)
    counts = WordCounts.from_pretrained(model.name_or_path)  # the folder the loader resolved the name to
    first, second, gold = read_pairs(Path(args.data))
    reference = [
        line
        for path in args.reference_text
        for line in Path(path).read_text(encoding="utf-8").splitlines()[: args.reference_lines]
    ]
    counted = counts is not None
    batches = {
        name: encoded_batches(model, tokenizer, texts, counted)
        for name, texts in (("first", first), ("second", second), ("reference", reference))
    }
    n_layers = model.config.num_representation_layers
    layer_choices = {f"layer {j}": [float(i == j) for i in range(n_layers)] for j in range(n_layers)}
    layer_choices["average (default)"] = None
    layer_choices["layers 0 and 1"] = [0.5, 0.5] + [0.0] * (n_layers - 2)
    weightings = [None] + (args.a if counted else [])

    columns = ["plain mean"] + [f"SIF a={a:g}" for a in weightings[1:]]
    print(f"| layers | taken out | {' | '.join(columns)} |")
    print("| --- | --- |" + " ---: |" * len(columns))
    table, by_half = {}, {}  # (layers, row) -> scores per weighting; (layers, row, weighting) -> (half 0, half 1)
    split = halves(len(gold), args.seed)
    for layer_name, layer_weights in layer_choices.items():
        rows = {"none": [], "reference text's": []}
        rows |= {f"reference text's mean and {k} directions": [] for k in args.directions}
        rows["KorSTS's own (diagnostic)"] = []
        for a in weightings:
            vectors = {name: vectors_of(encoded, counts, layer_weights, a) for name, encoded in batches.items()}
            compared = torch.cat([vectors["first"], vectors["second"]])
            removed = {  # row -> (common_component, reference_mean)
                "none": (None, None),
                "reference text's": (common_component(vectors["reference"]), None),
                "KorSTS's own (diagnostic)": (common_component(compared), None),
            }
            for k in args.directions:
                mean, directions = reference_directions(vectors["reference"], k)
                removed[f"reference text's mean and {k} directions"] = (directions, mean)
            for row, (component, mean) in removed.items():
                first_vectors, second_vectors = (
                    vectors_of(batches[side], counts, layer_weights, a, component, mean)
                    for side in ("first", "second")
                )
                rows[row].append(spearman(first_vectors, second_vectors, gold))
                if row != "KorSTS's own (diagnostic)":
                    by_half[(layer_name, row, columns[len(rows[row]) - 1])] = tuple(
                        spearman(first_vectors, second_vectors, gold, half) for half in split
                    )
        for row, scores in rows.items():
            table[(layer_name, row)] = scores
            print(f"| {layer_name} | {row} | {' | '.join(f'{score:.1f}' for score in scores)} |", flush=True)

    held_out = []
    for chosen_on, scored_on in ((0, 1), (1, 0)):
        best = max(by_half, key=lambda way: by_half[way][chosen_on])
        held_out.append(by_half[best][scored_on])
        print(
            f"\nchosen on half {chosen_on} ({by_half[best][chosen_on]:.1f}): {', '.join(best)}; "
            f"on half {scored_on}: {held_out[-1]:.1f}"
        )
    table["held out (mean of the halves)"] = sum(held_out) / 2
    print(f"the best way, chosen on one half and scored on the other: {table['held out (mean of the halves)']:.1f}")

    embedder = ElmoSentenceEmbedder.from_pretrained(args.model)
    first_vectors, second_vectors = embedder.encode(first), embedder.encode(second)
    own = table["folder's own"] = spearman(first_vectors, second_vectors, gold)
    folder_halves = [spearman(first_vectors, second_vectors, gold, half) for half in split]
    print(
        f"the folder's own vector (ElmoSentenceEmbedder.from_pretrained(folder).encode): {own:.1f} on dev; "
        f"{folder_halves[0]:.1f} / {folder_halves[1]:.1f} on the halves"
    )

    if counted:
        labels = torch.cat([label[words] for _, words, label in batches["first"] + batches["second"]])
        unknown = tokenizer.word_to_id("<UNK>")
        print(f"\nKorSTS words outside the word vocabulary: {(labels == unknown).float().mean().item():.1%}")
    try:
        from sklearn.feature_extraction.text import TfidfVectorizer
    except ImportError:
        print("char 1-4-gram TF-IDF baseline: needs scikit-learn (the training extra)")
    else:
        tfidf = TfidfVectorizer(analyzer="char_wb", ngram_range=(1, 4), sublinear_tf=True).fit(first + second)
        # Rows of unit length (TfidfVectorizer's default): their products are the cosines.
        cosines = tfidf.transform(first).multiply(tfidf.transform(second)).sum(axis=1).A1
        table["char 1-4-gram TF-IDF"] = 100 * spearmanr(cosines, gold).statistic
        print(f"char 1-4-gram TF-IDF (fitted on KorSTS's sentences): {table['char 1-4-gram TF-IDF']:.1f}")
    return table


if __name__ == "__main__":
    sys.exit(run_entry_point(main))
