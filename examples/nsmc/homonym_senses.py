"""Do a biLM's layers tell a Korean homonym's senses apart? Leave-one-out nearest-neighbour sense accuracy per layer.

    OMP_NUM_THREADS=1 python examples/nsmc/homonym_senses.py --model ko-nsmc
    OMP_NUM_THREADS=1 python examples/nsmc/homonym_senses.py --compare ko-nsmc outputs/nsmc/elmo-ko-v10

`homonyms.tsv` (beside this script) holds sentences written for this test: for each homonym (배: belly, boat, pear;
눈: eye, snow; ...) at least 6 sentences per sense, the homonym always in the same whitespace word (the `target`,
e.g. 배를 in every sentence of 배, whatever the sense), so that only the context can tell the senses apart. Each
sentence gives one vector per layer: the target word's, the mean of its positions, pooled by
`tokenization_elmo.pool_to_words` (one position for a word without punctuation under the whitespace pre-tokenizers,
found through the units' offsets; its morphemes under `korean_morphemes`, found through the batch's `word_ids()`).

The score of a sentence is whether its nearest neighbour by cosine, among the other sentences of the same homonym, has
its sense. **Ties**: every neighbour within `hf_elmo.quickstart.TIE` (1e-6) of the best cosine is a nearest neighbour,
and the sentence scores the share of them with its sense, the expected score of breaking the tie at random. **Chance**
is the expected score of a random neighbour: `(n_sense - 1) / (n_homonym - 1)` for a sentence of a sense with `n_sense`
of its homonym's `n_homonym` sentences. A layer that gives the target one vector in every sentence (the context-free
character CNN, layer 0, on identical words) ties all neighbours, so it scores exactly chance by construction. Each
homonym's sentences are encoded in one batch. Prints the accuracies (averaged over all sentences, then per homonym) as
markdown tables; `main` returns them.

`--compare A B` scores two biLMs on the same sentences and prints B's mean score minus A's, at each one's best
contextual layer (chosen on the whole test, as the single-model table reports it) and at each layer both have, with
a 95% interval from the paired bootstrap over the sentences: whether B is shown better, worse, or neither.
"""

import argparse
import bisect
import csv
import re
import sys
from pathlib import Path

import torch
from transformers.utils import logging

from hf_elmo import ElmoModel, ElmoTokenizer
from hf_elmo.errors import run_entry_point
from hf_elmo.loading import load_model_and_tokenizer
from hf_elmo.quickstart import chance_scores, nearest_sense_scores
from hf_elmo.tokenization_elmo import pool_to_words

DATA = Path(__file__).resolve().parent / "homonyms.tsv"
COLUMNS = ["homonym", "sense", "target", "sentence"]


def read_homonyms(path: Path) -> dict[str, list[dict]]:
    """
    The rows of a homonym file grouped by homonym, in file order; a `ValueError` when a homonym has fewer than two
    senses, a target that differs between its rows, or a sentence without exactly one whitespace word equal to it.
    """
    with open(path, newline="", encoding="utf-8") as handle:
        reader = csv.DictReader(handle, delimiter="\t", quoting=csv.QUOTE_NONE)
        if reader.fieldnames != COLUMNS:
            raise ValueError(f"{path}: the columns must be {', '.join(COLUMNS)} (tab-separated)")
        rows = list(reader)
    groups: dict[str, list[dict]] = {}
    for row in rows:
        groups.setdefault(row["homonym"], []).append(row)
    for homonym, group in groups.items():
        targets = {row["target"] for row in group}
        if len(targets) != 1:
            raise ValueError(f"{path}: {homonym} has several targets ({', '.join(sorted(targets))}); give it one")
        for row in group:
            if row["sentence"].split().count(row["target"]) != 1:
                raise ValueError(f"{path}: the word {row['target']} is not once in: {row['sentence']}")
        if len({row["sense"] for row in group}) < 2:
            raise ValueError(f"{path}: {homonym} has one sense; a homonym needs two or more")
    return groups


def whitespace_words(text: str, word_ids: list[int | None], offsets: list, morphemes: bool) -> list[int | None]:
    """
    The whitespace word (its index in `text.split()`) of each position of `text`'s row, None at `<S>`, `</S>` and
    padding: the morpheme tokenizer's `word_ids()` as they are; for other pre-tokenizers, whose units are words split
    further at punctuation, the word holding each unit's first character (its `offsets`).
    """
    if morphemes:
        return word_ids
    starts = [word.start() for word in re.finditer(r"\S+", text)]
    return [
        None if unit is None else bisect.bisect_right(starts, start) - 1 for unit, (start, _) in zip(word_ids, offsets)
    ]


@torch.inference_mode()
def target_vectors(model: ElmoModel, tokenizer: ElmoTokenizer, sentences: list[str], targets: list[str]):
    """`(n_layers + 1, len(sentences), hidden_size)`: each layer's vector of each sentence's target word."""
    batch = tokenizer(sentences, padding=True, return_offsets_mapping=True, return_tensors="pt")
    offsets = batch.pop("offset_mapping").tolist()
    layers = torch.stack(model(**batch, output_hidden_states=True).hidden_states)
    morphemes = tokenizer.pre_tokenizer == "korean_morphemes"
    only_target = []  # the positions of each sentence's target word, marked 0, every other position None
    for row, (text, target) in enumerate(zip(sentences, targets)):
        index = text.split().index(target)
        words = whitespace_words(text, batch.word_ids(row), offsets[row], morphemes)
        only_target.append([0 if word == index else None for word in words])
    pooled, word_mask = pool_to_words(layers.float(), only_target)
    if pooled.shape[-2] != 1 or not word_mask.all():
        raise ValueError("a target word has no position of its own in the tokenizer's units")
    return pooled[..., 0, :]


def nearest_neighbour_scores(vectors: torch.Tensor, senses: list[str]) -> torch.Tensor:
    """Each sentence's leave-one-out 1-nearest-neighbour score by cosine (ties: the share of tied neighbours), as the
    quickstart scores its sentences (`hf_elmo.quickstart.nearest_sense_scores`)."""
    unit = torch.nn.functional.normalize(vectors.double(), dim=-1)
    return nearest_sense_scores(unit @ unit.T, senses)


def sentence_scores(model: ElmoModel, tokenizer: ElmoTokenizer, groups: dict[str, list[dict]]) -> dict:
    """
    `{"chance" or a layer's name: (sentences,)}`: each sentence's score (see the module's doc), in the homonyms'
    order and each homonym's file order, for every layer and the average of the layers.
    """
    layer_names = [f"layer {number}" for number in range(model.config.n_layers + 1)] + ["average of layers"]
    scores = {name: [] for name in ["chance", *layer_names]}
    for group in groups.values():
        senses = [row["sense"] for row in group]
        vectors = target_vectors(
            model, tokenizer, [row["sentence"] for row in group], [row["target"] for row in group]
        )
        vectors = torch.cat([vectors, vectors.mean(0, keepdim=True)])
        scores["chance"].append(chance_scores(senses))
        for name, layer_vectors in zip(layer_names, vectors):
            scores[name].append(nearest_neighbour_scores(layer_vectors, senses))
    return {name: torch.cat(values) for name, values in scores.items()}


def best_layer(scores: dict[str, torch.Tensor]) -> str:
    """The name of the contextual vectors (an LSTM layer or the average) with the highest mean score."""
    return max((name for name in scores if name not in ("chance", "layer 0")), key=lambda name: scores[name].mean())


def paired_bootstrap(first: torch.Tensor, second: torch.Tensor, resamples: int = 10_000, seed: int = 0):
    """
    `second - first` in mean score over the same sentences `(sentences,)`, and its 95% interval by the paired
    bootstrap: the sentences drawn with replacement `resamples` times, each draw scoring both models on the same
    sentences, the interval the 2.5th and 97.5th percentiles of the differences.
    """
    generator = torch.Generator().manual_seed(seed)
    draws = torch.randint(len(first), (resamples, len(first)), generator=generator)
    differences = (second[draws] - first[draws]).mean(-1)
    low, high = torch.quantile(differences, torch.tensor([0.025, 0.975], dtype=differences.dtype)).tolist()
    return (second - first).mean().item(), low, high


def load(name: str, parser: argparse.ArgumentParser):
    """The biLM and tokenizer of `name` in float32; a one-line usage error where they cannot be loaded."""
    try:
        return load_model_and_tokenizer(name, ElmoModel, dtype=torch.float32)
    except ValueError as error:
        parser.error(str(error))


def compare(names: list[str], groups: dict[str, list[dict]], parser: argparse.ArgumentParser) -> dict:
    """`--compare A B`: B's score minus A's at each one's best contextual layer and at each layer both have, with
    the paired bootstrap's 95% interval; printed as a markdown table."""
    scores = [sentence_scores(*load(name, parser), groups) for name in names]
    rows = {"best layer of each": (best_layer(scores[0]), best_layer(scores[1]))}
    rows.update({name: (name, name) for name in scores[0] if name in scores[1] and name != "chance"})
    print(f"{names[1]} minus {names[0]}: {len(scores[0]['chance'])} sentences, paired bootstrap (10,000 draws)\n")
    print(f"| vectors | {names[0]} | {names[1]} | difference | 95% interval |\n| --- | ---: | ---: | ---: | --- |")
    results = {}
    for row, (first, second) in rows.items():
        difference, low, high = paired_bootstrap(scores[0][first], scores[1][second])
        results[row] = {"first": first, "second": second, "difference": difference, "interval": (low, high)}
        first_score, second_score = scores[0][first].mean().item(), scores[1][second].mean().item()
        labels = f" ({first}; {second})" if row == "best layer of each" else ""
        print(
            f"| {row}{labels} | {first_score:.3f} | {second_score:.3f} | {difference:+.3f} | "
            f"[{low:+.3f}, {high:+.3f}] |"
        )
    return results


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], allow_abbrev=False)
    models = parser.add_mutually_exclusive_group(required=True)
    models.add_argument("--model", help="a biLM folder or a bundled model's name")
    models.add_argument(
        "--compare",
        nargs=2,
        metavar=("A", "B"),
        help="two biLMs (folders or bundled names): B's score minus A's, with a paired bootstrap's 95%% interval",
    )
    parser.add_argument("--data", default=str(DATA), help="a homonym file (homonym, sense, target, sentence)")
    args = parser.parse_args(argv)
    torch.set_num_threads(1)
    logging.disable_progress_bar()
    try:
        groups = read_homonyms(Path(args.data))
    except ValueError as error:
        parser.error(str(error))
    if args.compare:
        return compare(args.compare, groups, parser)
    model, tokenizer = load(args.model, parser)
    scores = sentence_scores(model, tokenizer, groups)
    layer_names = [name for name in scores if name != "chance"]
    per_homonym, start = {}, 0
    for homonym, group in groups.items():
        senses = [row["sense"] for row in group]
        per_homonym[homonym] = {
            "target": group[0]["target"],
            "senses": {sense: senses.count(sense) for sense in dict.fromkeys(senses)},
            **{name: values[start : start + len(group)].mean().item() for name, values in scores.items()},
        }
        start += len(group)
    overall = {name: values.mean().item() for name, values in scores.items()}

    print(f"{args.model}: {len(groups)} homonyms, {start} sentences; leave-one-out 1-NN sense accuracy by cosine\n")
    print("| vectors | accuracy |\n| --- | ---: |")
    for name in [*layer_names, "chance"]:
        print(f"| {name} | {overall[name]:.3f} |")
    print(f"\n| homonym (target: senses) | {' | '.join(layer_names)} | chance |")
    print("| --- |" + " ---: |" * (len(layer_names) + 1))
    for homonym, result in per_homonym.items():
        senses = ", ".join(f"{sense} {count}" for sense, count in result["senses"].items())
        values = " | ".join(f"{result[name]:.3f}" for name in [*layer_names, "chance"])
        print(f"| {homonym} ({result['target']}: {senses}) | {values} |")
    return {"overall": overall, "homonyms": per_homonym}


if __name__ == "__main__":
    sys.exit(run_entry_point(main))
