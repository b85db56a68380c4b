"""Builds a bundled model folder (`hf_elmo/bundled/NAME`) from a training output: fp16 weights, tokenizer, card.

    python examples/nsmc/bundle.py --model outputs/nsmc/elmo-ko --name ko-nsmc --bilm-only \
        --check-text outputs/nsmc/data/pretrain_validation.txt --count-text outputs/nsmc/data/pretrain_train.txt
    python examples/nsmc/bundle.py --model outputs/nsmc/classifier-ko --name ko-nsmc-sentiment \
        --check-csv outputs/nsmc/data/test.csv

The model (the class named in its config) is saved with `save_pretrained`, without the code files and the `auto_map`
naming them that it writes for `trust_remote_code`: a bundled folder loads through the classes `import hf_elmo`
registers, so it needs no re-bundling when the code changes (a copy saved from it gets both back). Weights are stored
in float16 (half the size) while `config.dtype` stays float32, so `from_pretrained` computes in float32. The card is
`examples/nsmc/cards/NAME.md`, written as `README.md`. The word counts (`word_counts.json`, the SIF weights of the
sentence vectors) are those of `--model`, or the words of `--count-text` counted with the folder's word vocabulary.
The sentence-transformers settings (`sentence_bert_config.json`) are those of `--model`, or, with
`--sentence-reference-text`, the stored model's: the layer weights and SIF `a` given, and the mean and first
`--sentence-directions` principal directions of that text's sentence vectors (all-but-the-top, taken out of every
vector; `sentence_weighting.reference_directions`). The sense counts the quickstart quotes (`sense_counts.json`,
written by `sense_counts.py` over the biLM's training text) are `--sense-counts`' or those of `--model`.
The stored model is checked against the float32 original: on `--check-text` lines, the cosine similarity of every
layer's vectors; on `--check-csv`, the classifier's accuracy both ways. The folder is written beside its final place
and renamed, so it is complete or absent.
"""

import argparse
import csv
import json
import shutil
import sys
import tempfile
from pathlib import Path

import torch

import hf_elmo
from hf_elmo.errors import run_entry_point
from hf_elmo.folder_layout import ENCODER_CONFIG_FILE, SIF_A
from hf_elmo.loading import load_model_and_tokenizer
from hf_elmo.model_card import write_model_card
from hf_elmo.quickstart import SENSE_COUNTS_FILE
from hf_elmo.sentence_weighting import WordCounts, reference_directions, weighted_encoding

BUNDLED_DIR = Path(hf_elmo.__file__).resolve().parent / "bundled"
CARDS_DIR = Path(__file__).resolve().parent / "cards"


def load(folder: str | Path, bilm_only: bool = False):
    """The model of `folder` (the class its config names, or `ElmoModel` when `bilm_only`) and its tokenizer, through
    the package's one loader (its checks of the tokenizer files against the config)."""
    config = hf_elmo.ElmoConfig.from_pretrained(folder)
    model_class = hf_elmo.ElmoModel if bilm_only else getattr(hf_elmo, (config.architectures or ["ElmoModel"])[0])
    model, tokenizer = load_model_and_tokenizer(folder, model_class, hub=False, dtype=torch.float32)
    return model.eval(), tokenizer


@torch.inference_mode()
def layer_cosines(original, stored, tokenizer, texts: list[str]) -> dict[str, list[float]]:
    """Per layer, the mean and the lowest cosine similarity between the two models' vectors over valid positions."""
    sums, lowest = None, None
    count = 0
    for start in range(0, len(texts), 64):
        batch = tokenizer(texts[start : start + 64], padding=True, truncation=True, max_length=64, return_tensors="pt")
        mask = batch["attention_mask"].bool()
        first = original.base_model(**batch, output_hidden_states=True).hidden_states
        second = stored.base_model(**batch, output_hidden_states=True).hidden_states
        cosines = torch.stack(
            [torch.nn.functional.cosine_similarity(a, b, dim=-1)[mask] for a, b in zip(first, second)]
        )
        sums = cosines.sum(dim=1) if sums is None else sums + cosines.sum(dim=1)
        lowest = cosines.amin(dim=1) if lowest is None else torch.minimum(lowest, cosines.amin(dim=1))
        count += int(mask.sum())
    return {"mean": (sums / count).tolist(), "lowest": lowest.tolist()}


@torch.inference_mode()
def accuracy(model, tokenizer, path: str, names: dict[str, str]) -> float:
    """The share of the csv's rows whose label (renamed by `names`) the classifier predicts."""
    with open(path, newline="", encoding="utf-8") as handle:
        rows = list(csv.DictReader(handle))
    correct = 0
    for start in range(0, len(rows), 128):
        chunk = rows[start : start + 128]
        batch = tokenizer(
            [row["text"] for row in chunk], padding=True, truncation=True, max_length=64, return_tensors="pt"
        )
        predicted = model(**batch).logits.argmax(-1).tolist()
        correct += sum(
            model.config.id2label[p] == names.get(row["label"], row["label"]) for p, row in zip(predicted, chunk)
        )
    return correct / len(rows)


@torch.inference_mode()
def sentence_settings(model, tokenizer, counts: WordCounts, texts: list[str], args) -> dict:
    """`sentence_bert_config.json` with the reference statistics of `texts`, their sentence vectors made as the
    sentence-transformers module makes them (SIF weights of `counts`, no truncation) before anything is taken out."""
    vectors = []
    for start in range(0, len(texts), 64):
        batch = weighted_encoding(tokenizer, texts[start : start + 64], counts, args.sentence_sif_a)
        vectors.append(model.sentence_embedding(**batch, layer_weights=args.sentence_layer_weights))
    mean, directions = reference_directions(torch.cat(vectors).double(), args.sentence_directions)
    return {
        "layer_weights": args.sentence_layer_weights,
        "max_seq_length": None,
        "sif_a": args.sentence_sif_a,
        "common_component": directions.tolist(),
        "reference_mean": mean.tolist(),
    }


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], allow_abbrev=False)
    parser.add_argument("--model", required=True, help="the training output folder")
    parser.add_argument("--name", required=True, choices=hf_elmo.BUNDLED_MODELS)
    parser.add_argument("--check-text", help="text file, one sentence per line: compare the biLM's layers")
    parser.add_argument("--check-csv", help="csv file with text,label: compare the classifier's accuracy")
    parser.add_argument("--check-lines", type=int, default=500, help="lines of --check-text used")
    parser.add_argument(
        "--label-names", nargs="+", help="names of a classifier's labels, by id (e.g. negative positive)"
    )
    parser.add_argument(
        "--bilm-only", action="store_true", help="store the biLM (ElmoModel) without a pre-training output's softmax"
    )
    parser.add_argument(
        "--count-text",
        nargs="+",
        help="the biLM's pre-training text: word_counts.json from its words (default: the --model folder's, if any)",
    )
    parser.add_argument(
        "--sense-counts", help=f"sense_counts.py's JSON of the training text, kept as {SENSE_COUNTS_FILE}"
    )
    parser.add_argument(
        "--sentence-reference-text",
        nargs="+",
        help="text files, one sentence per line: the reference statistics of the vectors",
    )
    parser.add_argument("--sentence-reference-lines", type=int, default=2000, help="lines of each file used")
    parser.add_argument("--sentence-directions", type=int, default=20, help="principal directions taken out")
    parser.add_argument("--sentence-layer-weights", type=float, nargs="+", help="one per layer (default: the average)")
    parser.add_argument("--sentence-sif-a", type=float, default=SIF_A, help="SIF's a for the sentence vectors")
    args = parser.parse_args(argv)

    original, tokenizer = load(args.model, args.bilm_only)
    target = BUNDLED_DIR / args.name
    with tempfile.TemporaryDirectory(dir=BUNDLED_DIR) as temporary:
        folder = Path(temporary) / args.name
        stored = load(args.model, args.bilm_only)[0].to(torch.float16)
        if args.label_names:
            if len(args.label_names) != stored.config.num_labels:
                raise ValueError(f"--label-names needs {stored.config.num_labels} names, got {len(args.label_names)}")
            # The data's labels (e.g. "0", "1") become names; the ids, and so the weights, stay as trained.
            renamed = dict(zip((stored.config.id2label[i] for i in range(len(args.label_names))), args.label_names))
            stored.config.id2label = dict(enumerate(args.label_names))
            stored.config.label2id = {name: i for i, name in enumerate(args.label_names)}
        stored.save_pretrained(folder)
        tokenizer.save_pretrained(folder)
        counts = (
            WordCounts.of_text(tokenizer, args.count_text)
            if args.count_text
            else WordCounts.from_pretrained(args.model)
        )
        if counts is not None:
            counts.save_pretrained(folder)
        if args.sentence_reference_text:
            if counts is None:
                raise ValueError("--sentence-reference-text needs word counts (--count-text) for the SIF weights")
            lines = [
                line
                for path in args.sentence_reference_text
                for line in Path(path).read_text(encoding="utf-8").splitlines()[: args.sentence_reference_lines]
            ]
            settings = sentence_settings(load(folder)[0], tokenizer, counts, lines, args)
            (folder / ENCODER_CONFIG_FILE).write_text(json.dumps(settings, indent=2) + "\n", encoding="utf-8")
        elif (Path(args.model) / ENCODER_CONFIG_FILE).is_file():
            shutil.copyfile(Path(args.model) / ENCODER_CONFIG_FILE, folder / ENCODER_CONFIG_FILE)
        sense_counts = Path(args.sense_counts) if args.sense_counts else Path(args.model) / SENSE_COUNTS_FILE
        if sense_counts.is_file():
            shutil.copyfile(sense_counts, folder / SENSE_COUNTS_FILE)
        for code_file in folder.glob("*.py"):
            code_file.unlink()
        for name in ("config.json", "tokenizer_config.json"):
            path = folder / name
            saved = json.loads(path.read_text(encoding="utf-8"))
            del saved["auto_map"]  # it would name the code files just removed
            if name == "config.json":
                saved["dtype"] = "float32"  # computed in float32; only the stored weights are float16
            path.write_text(json.dumps(saved, indent=2, sort_keys=True, ensure_ascii=False) + "\n", encoding="utf-8")
        write_model_card(folder, (CARDS_DIR / f"{args.name}.md").read_text(encoding="utf-8"))

        reloaded = load(folder)[0]
        checks = {
            "weights_mb": round((folder / "model.safetensors").stat().st_size / 1e6, 2),
            "folder_mb": round(sum(f.stat().st_size for f in folder.iterdir()) / 1e6, 2),
        }
        if counts is not None:
            # A vocabulary built from the counted text lists its words by decreasing count after <S>, </S> and <UNK>
            # (pretraining.build_word_vocab): the counts of another text would seldom keep that order.
            checks["words_counted"] = counts.words
            checks["vocabulary_in_count_order"] = bool((counts.counts[3:-1] >= counts.counts[4:]).all())
        if args.check_text:
            lines = Path(args.check_text).read_text(encoding="utf-8").splitlines()[: args.check_lines]
            checks["layer_cosines"] = layer_cosines(original, reloaded, tokenizer, lines)
        if args.check_csv:
            checks["accuracy_float32"] = accuracy(original, tokenizer, args.check_csv, {})
            names = renamed if args.label_names else {}
            checks["accuracy_stored"] = accuracy(reloaded, tokenizer, args.check_csv, names)
        if target.exists():
            shutil.rmtree(target)
        folder.rename(target)
    print(json.dumps({"folder": str(target), **checks}, indent=2))
    return checks


if __name__ == "__main__":
    sys.exit(run_entry_point(main))
