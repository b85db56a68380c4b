"""How often each sense of a homonym occurs in a biLM's training text, estimated from the morphemes around it.

    OMP_NUM_THREADS=1 python examples/nsmc/sense_counts.py --json outputs/nsmc/sense_counts.json \
        outputs/nsmc/data/pretrain_train.txt outputs/nsmc/data/general_train.txt

No sense labels exist for this text, and kiwipiepy gives 배 one tag (NNG) whatever it means, so each occurrence of the
homonym as a common noun (NNG) is given a sense by cues:
`sense_cues.tsv` (beside this script, written before any count was made) lists for each sense morphemes that go with
it (`form/TAG`: 고프/VA for 배가 고프다, belly; 타/VV for 배를 타다, boat; `#number` for a number right before it,
배 of 두 배, "twice", which kiwipiepy tags NNG too). An occurrence counts for a sense when a cue of that sense, and
of no other, stands within `WINDOW` morphemes of it in the same line; it is "no cue" when none
does and "several" when cues of two senses do. The counts are an estimate, a lower bound on each sense (most
occurrences carry no cue), but their ratios show what the biLM read most. Each file is read once, in the order
given (pre-training named ko-general's lines three times: multiply its counts by three for what a run's epoch
read). Prints a markdown table and, with `--json`, writes the counts.
"""

import argparse
import csv
import json
import sys
from collections import Counter
from pathlib import Path

from hf_elmo.errors import run_entry_point
from hf_elmo.korean_morphemes import analyser

CUES = Path(__file__).resolve().parent / "sense_cues.tsv"
# Morphemes on each side of the homonym where a cue counts: the homonym, its particle, a verb stem and its ending.
WINDOW = 4
# The cue `#number`: right after digits, a numeral noun or a determiner that is a number (두 배, twice).
NUMBER_CUE = "#number"
NUMBER_TAGS = {"SN", "NR"}
NUMBER_DETERMINERS = {
    "두",
    "세",
    "네",
    "다섯",
    "여섯",
    "일곱",
    "여덟",
    "아홉",
    "열",
    "몇",
    "수십",
    "수백",
    "수천",
    "수만",
}


def read_cues(path: Path) -> dict[str, dict[str, set[tuple[str, str]]]]:
    """`{homonym: {sense: {(form, tag) or NUMBER_CUE, ...}}}` from a tab-separated file of homonym, sense and
    `form/TAG` (or `#number`) cues."""
    cues: dict[str, dict[str, set[tuple[str, str]]]] = {}
    with open(path, newline="", encoding="utf-8") as handle:
        for row in csv.DictReader(handle, delimiter="\t", quoting=csv.QUOTE_NONE):
            pairs = {cue if cue == NUMBER_CUE else tuple(cue.split("/")) for cue in row["cues"].split()}
            if any(pair != NUMBER_CUE and len(pair) != 2 for pair in pairs):
                raise ValueError(f"{path}: a cue of {row['homonym']} ({row['sense']}) is neither form/TAG nor #number")
            cues.setdefault(row["homonym"], {})[row["sense"]] = pairs
    return cues


def count_senses(lines, cues: dict[str, dict[str, set[tuple[str, str]]]]) -> dict[str, Counter]:
    """`{homonym: Counter({sense, "no cue" or "several": occurrences})}` over the text `lines`."""
    kiwi, match_options = analyser()
    counts = {homonym: Counter() for homonym in cues}
    for line in lines:
        present = [homonym for homonym in cues if homonym in line]
        if not present:  # most lines hold none: no analysis
            continue
        tokens = [(token.form, token.tag) for token in kiwi.tokenize(line, match_options=match_options)]
        for index, (form, tag) in enumerate(tokens):
            if form not in present or tag != "NNG":
                continue
            before = tokens[index - 1] if index else ("", "")
            after_number = before[1] in NUMBER_TAGS or (before[1] == "MM" and before[0] in NUMBER_DETERMINERS)
            around = {NUMBER_CUE} if after_number else set()
            around |= set(tokens[max(0, index - WINDOW) : index] + tokens[index + 1 : index + 1 + WINDOW])
            senses = [sense for sense, pairs in cues[form].items() if pairs & around]
            counts[form][senses[0] if len(senses) == 1 else "several" if senses else "no cue"] += 1
    return counts


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], allow_abbrev=False)
    parser.add_argument("files", nargs="+", help="text files, one sentence per line (the biLM's training text)")
    parser.add_argument("--cues", default=str(CUES), help="a cue file (homonym, sense, cues)")
    parser.add_argument("--json", help="also write the counts here, {file: {homonym: {sense: n}}}")
    args = parser.parse_args(argv)
    cues = read_cues(Path(args.cues))
    results = {}
    for path in args.files:
        with open(path, encoding="utf-8") as handle:
            counts = count_senses(handle, cues)
        results[path] = {homonym: {**dict.fromkeys(cues[homonym], 0), **found} for homonym, found in counts.items()}
    print("| file | homonym | senses, by cue | no cue | several |\n| --- | --- | --- | ---: | ---: |")
    for path, by_homonym in results.items():
        for homonym, counter in by_homonym.items():
            senses = ", ".join(f"{sense} {counter[sense]:,}" for sense in cues[homonym])
            print(f"| {path} | {homonym} | {senses} | {counter.get('no cue', 0):,} | {counter.get('several', 0):,} |")
    if args.json:
        Path(args.json).write_text(json.dumps(results, ensure_ascii=False, indent=2) + "\n", encoding="utf-8")
    return results


if __name__ == "__main__":
    sys.exit(run_entry_point(main))
