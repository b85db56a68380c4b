"""The quickstart, `hf-elmo quickstart`: contextual vectors of homonyms and sentiment, from the Korean ELMo shipped
inside the package; it runs offline and needs the `korean` extra (kiwipiepy).

The biLM `ko-nsmc` was pre-trained on Korean text on a 2-core CPU; `ko-nsmc-sentiment` is a sentiment classifier.
Each homonym of `HOMONYMS` comes with six sentences, two or three a sense, that all hold it with the same particle
(배가, 눈이, 바람이), so that nothing but the context tells the senses apart; ko-nsmc's units are morphemes, and the
vector compared is that of the unit itself (배, not its particle 가). Layer 0 (the character CNN) reads a unit alone
and gives it one vector everywhere; the LSTM layers read the sentence. For each homonym `run` prints each layer's
cosines, then says in one sentence, at the layer that tells the senses apart best, how many sentences have as their
nearest another sentence of their own sense (the measure of the project's homonym test, against a random
neighbour's), and whether the senses are cleanly apart (every pair of one sense nearer than any pair across senses)
or which pairs say they are not; then how often each sense stood in the biLM's training text, as far as cue words
tell (`sense_counts.json` of the folder, where it has one). With
matplotlib (the `plot` extra) it also draws the tables, a row of heatmaps per homonym, into a PNG.

`run(model=FOLDER, homonyms=[read_homonym(FILE, WORD)])` runs the same comparison on any biLM and sentences.
"""

import functools
import os
from dataclasses import dataclass
from pathlib import Path

import torch
from transformers import pipeline
from transformers.utils import logging

from .bundled import bundled_model_path
from .errors import JsonFields
from .folders import create_exclusively
from .loading import load_model_and_tokenizer
from .modeling_elmo import ElmoModel
from .tokenization_elmo import ElmoTokenizer

# What the folder's training text held of each sense (examples/nsmc/sense_counts.py), where the folder has it.
SENSE_COUNTS_FILE = "sense_counts.json"


@dataclass(frozen=True)
class Homonym:
    """A homonym of the demo: the `unit` compared, its name in Latin letters for a picture (many machines have no
    font with Hangul), its senses in words, and `(sentence, sense)` pairs that all hold the unit."""

    unit: str
    romanised: str
    senses: str
    sentences: tuple[tuple[str, str], ...]


# 배 and 눈, the homonyms of ELMo's idea for a Korean learner, and 바람, the one the project's homonym test
# (examples/nsmc/homonym_senses.py; its scores are in ko-nsmc's card) finds ko-nsmc best at. The sentences were
# written for this demo before they were run on any model, never changed to suit one, and none is in that test.
HOMONYMS = (
    Homonym(
        "배",
        "bae",
        "belly, boat or pear",
        (
            ("아침을 굶었더니 배가 너무 고프다", "belly"),
            ("상한 우유를 마셨더니 배가 아프다", "belly"),
            ("큰 배가 항구에 천천히 들어왔다", "boat"),
            ("바다 위에 배가 떠 있다", "boat"),
            ("가게에서 산 배가 달고 맛있다", "pear"),
            ("가을에 딴 배가 아주 시원하다", "pear"),
        ),
    ),
    Homonym(
        "눈",
        "nun",
        "eye or snow",
        (
            ("먼지가 들어가서 눈이 따갑다", "eye"),
            ("밤새 책을 읽었더니 눈이 피곤하다", "eye"),
            ("아기는 눈이 크고 까맣다", "eye"),
            ("밤사이 눈이 많이 쌓였다", "snow"),
            ("창밖에 하얀 눈이 펑펑 내린다", "snow"),
            ("봄이 오자 눈이 다 녹았다", "snow"),
        ),
    ),
    Homonym(
        "바람",
        "baram",
        "wind or wish",
        (
            ("창문을 열자 시원한 바람이 들어왔다", "wind"),
            ("바닷가에 차가운 바람이 세게 분다", "wind"),
            ("태풍이 와서 바람이 무척 강하다", "wind"),
            ("그의 오랜 바람이 마침내 이루어졌다", "wish"),
            ("가족이 건강한 것이 나의 유일한 바람이다", "wish"),
            ("부모님의 간절한 바람이 합격으로 이어졌다", "wish"),
        ),
    ),
)
REVIEWS = [
    "정말 재미있고 감동적인 영화였어요",
    "시간 낭비, 돈 아깝다",
    "배우들 연기가 최고다 또 보고 싶다",
    "지루하고 스토리도 엉망이다",
]


def read_homonym(path: str | os.PathLike, unit: str) -> Homonym:
    """A `Homonym` of `unit` from a text file of `sense<TAB>sentence` lines (blank lines and `#` lines skipped);
    a one-line `ValueError` naming the line where a line has no tab, and where there are fewer than two senses or
    fewer than two sentences of a sense (a sense's sentences need a pair to be compared)."""
    sentences = []
    for number, line in enumerate(Path(path).read_text(encoding="utf-8").splitlines(), start=1):
        if not line.strip() or line.startswith("#"):
            continue
        sense, tab, sentence = line.partition("\t")
        if not tab or not sense.strip() or not sentence.strip():
            raise ValueError(f"{path}, line {number}: write the sense, a tab, then the sentence")
        sentences.append((sentence.strip(), sense.strip()))
    senses = [sense for _, sense in sentences]
    if len(set(senses)) < 2 or min(senses.count(sense) for sense in senses) < 2:
        raise ValueError(f"{path}: give two senses or more, each in two sentences or more")
    return Homonym(unit, romanise(unit), " or ".join(dict.fromkeys(senses)), tuple(sentences))


def homonym_vectors(model: ElmoModel, tokenizer: ElmoTokenizer, homonym: Homonym) -> torch.Tensor:
    """The vector of the unit in each sentence at every layer, `(n_layers + 1, sentences, dim)`; a one-line
    `ValueError` naming a sentence whose units (as the tokenizer splits it) do not hold the unit."""
    texts = [text for text, _ in homonym.sentences]
    positions = []
    for text in texts:
        units = tokenizer.split_words(text)
        if homonym.unit not in units:
            raise ValueError(
                f"the tokenizer does not split {text!r} into a unit {homonym.unit!r}: {' / '.join(units)}"
            )
        # Position 0 is <S>: the unit at index i of split_words sits at position i + 1.
        positions.append(units.index(homonym.unit) + 1)
    batch = tokenizer(texts, padding=True, return_tensors="pt")
    with torch.inference_mode():
        # (layers, batch, positions, dim)
        layers = torch.stack(model(**batch, output_hidden_states=True).hidden_states)
    return layers[:, torch.arange(len(texts)), positions].float()


def similarity_tables(model: ElmoModel, tokenizer: ElmoTokenizer, homonym: Homonym) -> torch.Tensor:
    """The cosine similarities of the unit between the sentences at every layer, `(n_layers + 1, sentences,
    sentences)`."""
    vectors = torch.nn.functional.normalize(homonym_vectors(model, tokenizer, homonym), dim=-1)
    return vectors @ vectors.transpose(1, 2)


# Cosines within this of a sentence's best are all its nearest neighbours (a layer that gives the unit one vector
# everywhere ties them all).
TIE = 1e-6


def nearest_sense_scores(similarity: torch.Tensor, senses: list[str]) -> torch.Tensor:
    """
    Each sentence's leave-one-out nearest-neighbour score `(sentences,)` from the cosines `similarity` `(sentences,
    sentences)`: 1 where the other sentence nearest to it has its sense, 0 where it has another; where several are
    nearest (within `TIE`), the share of them with its sense, the expected score of breaking the tie at random.
    The homonym test (examples/nsmc/homonym_senses.py) scores a biLM so.
    """
    cosine = similarity.double().clone()
    cosine.fill_diagonal_(-float("inf"))
    nearest = cosine >= cosine.max(dim=-1, keepdim=True).values - TIE
    same = torch.tensor([[a == b for b in senses] for a in senses])
    return (nearest & same).sum(-1).double() / nearest.sum(-1).double()


def chance_scores(senses: list[str]) -> torch.Tensor:
    """Each sentence's expected nearest-neighbour score `(sentences,)` with a random neighbour among the others."""
    return torch.tensor([(senses.count(sense) - 1) / (len(senses) - 1) for sense in senses], dtype=torch.float64)


def separation(similarity: torch.Tensor, senses: list[str]) -> tuple[float, tuple[int, int], tuple[int, int]]:
    """The least similar pair of one sense minus the most similar pair across senses (above 0: each sense's pairs
    are nearer than any pair across senses), and those two pairs."""
    pairs = [(i, j) for i in range(len(senses)) for j in range(i + 1, len(senses))]
    same = min((pair for pair in pairs if senses[pair[0]] == senses[pair[1]]), key=lambda pair: similarity[pair])
    across = max((pair for pair in pairs if senses[pair[0]] != senses[pair[1]]), key=lambda pair: similarity[pair])
    return float(similarity[same] - similarity[across]), same, across


def print_similarities(similarities: torch.Tensor, tokenizer: ElmoTokenizer, homonym: Homonym) -> None:
    """Each layer's cosine table `(sentences, sentences)` of `similarities` `(layers, sentences, sentences)`, and for
    the LSTM layers how many sentences have a nearest neighbour of their sense and the pairs that decide the
    margin."""
    senses = [sense for _, sense in homonym.sentences]
    print(f"the unit {homonym.unit} in:")
    for index, (text, sense) in enumerate(homonym.sentences):
        print(f"  [{index}] {text}  ({sense}: {' / '.join(tokenizer.split_words(text))})")
    for number, similarity in enumerate(similarities):
        kind = "context-free character CNN" if number == 0 else f"LSTM layer {number}, contextual"
        print(f"\ncosine similarity, layer {number} ({kind}):")
        print("      " + "".join(f"{f'[{j}]':>7}" for j in range(len(senses))))
        for i, row in enumerate(similarity.tolist()):
            print(f"  [{i}] " + "".join(f"{value:7.3f}" for value in row))
        if number:
            nearest = nearest_sense_scores(similarity, senses).sum().item()
            margin, same, across = separation(similarity, senses)
            print(
                f"nearest neighbour of the same sense: {nearest:g} of {len(senses)} sentences; least similar pair of "
                f"one sense {same} {similarity[same]:.3f}, most similar pair across senses {across} "
                f"{similarity[across]:.3f}: margin {margin:+.3f}"
            )


@dataclass(frozen=True)
class Verdict:
    """What the tables say at the LSTM layer that tells the senses apart best (`layer`: the most sentences with a
    nearest neighbour of their sense, `nearest`, against `chance`; ties to the wider margin): its `margin` (see
    `separation`), the least similar pair of one sense (`same`) and the most similar across senses (`across`), and
    the verdict in a sentence and in the few words of a picture's title (senses, no Hangul)."""

    layer: int
    nearest: float
    chance: float
    margin: float
    same: tuple[int, int]
    across: tuple[int, int]
    sentence: str
    title: str

    @property
    def told_apart(self) -> bool:
        """Whether the senses are cleanly apart: every pair of one sense nearer than any pair across senses."""
        return self.margin > 0


def verdict(similarities: torch.Tensor, homonym: Homonym) -> Verdict:
    """The `Verdict` of `similarities` `(layers, sentences, sentences)` for `homonym`."""
    senses = [sense for _, sense in homonym.sentences]
    n = len(senses)
    chance = chance_scores(senses).mean().item()
    scored = [
        (nearest_sense_scores(similarity, senses).mean().item(), *separation(similarity, senses))
        for similarity in similarities[1:]
    ]
    best = 1 + max(range(len(scored)), key=lambda index: scored[index][:2])
    nearest, margin, same, across = scored[best - 1]
    similarity = similarities[best]
    leaning = (
        f"{nearest * n:g} of {n} sentences have as their nearest another sentence of their own sense (a random "
        f"neighbour: {chance * n:.1f} of {n})"
    )
    if margin > 0:
        sentence = (
            f"There it tells these senses apart: every pair of one sense is nearer than any pair across senses (by "
            f"{margin:.3f}), and {leaning}."
        )
        title = (
            f"layer {best} tells the senses apart (by {margin:.3f}); nearest of the same sense {nearest * n:g} of {n}"
        )
    else:
        sentence = (
            f"Even there it does not tell them cleanly apart: [{across[0]}] {senses[across[0]]} and [{across[1]}] "
            f"{senses[across[1]]} ({similarity[across]:.3f}) are nearer than [{same[0]}] and [{same[1]}], both "
            f"{senses[same[0]]} ({similarity[same]:.3f}); still, {leaning}."
        )
        title = (
            f"not cleanly apart even at layer {best}: [{across[0]}] {senses[across[0]]} and [{across[1]}] "
            f"{senses[across[1]]} {similarity[across]:.3f} > [{same[0]}] and [{same[1]}], both {senses[same[0]]}, "
            f"{similarity[same]:.3f}; nearest of the same sense {nearest * n:g} of {n} (chance {chance * n:.1f})"
        )
    return Verdict(best, nearest, chance, margin, same, across, sentence, title)


def read_sense_counts(folder: str | os.PathLike) -> dict[str, dict[str, int]]:
    """`{unit: {sense, "no cue" or "several": occurrences}}` summed over the training files the
    folder's `sense_counts.json` (`{file: {unit: {sense: occurrences}}}`) names; empty where it has none. A file of
    another shape is a one-line `FileContentError` naming the field."""
    path = Path(folder) / SENSE_COUNTS_FILE
    if not path.exists():
        return {}
    fix = "copy the model folder again, or count anew with examples/nsmc/sense_counts.py"
    by_file = JsonFields.of_file(path, fix)
    totals: dict[str, dict[str, int]] = {}
    for file in by_file.data:
        by_unit = JsonFields(by_file.take(file, dict), path, fix, where=by_file.name(file))
        for unit in by_unit.data:
            by_sense = JsonFields(by_unit.take(unit, dict), path, fix, where=by_unit.name(unit))
            for sense in by_sense.data:
                totals.setdefault(unit, {}).setdefault(sense, 0)
                totals[unit][sense] += by_sense.take(sense, int, minimum=0)
    return totals


def describe_counts(homonym: Homonym, counts: dict[str, int]) -> str:
    """One line: how often each sense of `homonym` stood beside a cue of its own in the training text."""
    shown = list(dict.fromkeys(sense for _, sense in homonym.sentences))
    others = [sense for sense in counts if sense not in (*shown, "no cue", "several")]
    cued = ", ".join(f"{sense} {counts.get(sense, 0):,}" for sense in shown)
    cued += (
        f" (senses not shown here: {', '.join(f'{sense} {counts[sense]:,}' for sense in others)})" if others else ""
    )
    return (
        f"In the biLM's training text (each line once), {homonym.unit} stood beside a word that marks one sense: "
        f"{cued}; "
        f"beside none: {counts.get('no cue', 0):,} (examples/nsmc/sense_counts.py). A sense read in few contexts is "
        "one the biLM could learn little of."
    )


# Revised Romanization's letters for the jamo of a Hangul syllable (initial, medial, final), letter by letter: a
# label to tell the sentences apart where no font draws Hangul, not a pronunciation.
INITIALS = "g kk n d tt r m b pp s ss - j jj ch k t p h".split()
MEDIALS = "a ae ya yae eo e yeo ye o wa wae oe yo u wo we wi yu eu ui i".split()
FINALS = ["", *"k k k n n n t l k m l l l p l m p p t t ng t t k t p t".split()]


def romanise(text: str) -> str:
    """`text` with each Hangul syllable written in Latin letters (`romanise("배가") == "baega"`)."""
    letters = []
    for character in text:
        offset = ord(character) - 0xAC00
        if 0 <= offset < 11172:
            initial, medial, final = offset // 588, offset % 588 // 28, offset % 28
            letters.append(INITIALS[initial].strip("-") + MEDIALS[medial] + FINALS[final])
        else:
            letters.append(character)
    return "".join(letters)


@functools.cache
def hangul_font() -> str | None:
    """The family name of an installed font that draws Hangul, as matplotlib finds it; None where there is none."""
    from matplotlib import font_manager, ft2font

    for font in font_manager.fontManager.ttflist:
        if font.name.startswith("Last Resort"):  # matplotlib's fallback: a box for every character it maps
            continue
        try:
            charmap = ft2font.FT2Font(font.fname).get_charmap()
        except (OSError, RuntimeError):
            continue
        if ord("가") in charmap and ord("배") in charmap:
            return font.name
    return None


def similarity_figure(tables: list[tuple[Homonym, torch.Tensor, Verdict]], model_name: str, font: str | None):
    """A matplotlib `Figure`: for each homonym a row of heatmaps, one a layer, each sentence labelled `[i] sense`,
    every cosine in its cell, the two pairs the verdict names boxed at its layer, the verdict above the row and a
    legend of the sentences below it (in Hangul with the font `font`, else romanised)."""
    from matplotlib.figure import Figure  # the plot extra; without pyplot, no backend or window is involved
    from matplotlib.patches import Rectangle

    columns = max(len(similarities) for _, similarities, _ in tables)
    figure = Figure(figsize=(4.4 * columns + 1, 6.6 * len(tables)), layout="constrained")
    rows = figure.subfigures(len(tables), 1, squeeze=False)[:, 0]
    for row, (homonym, similarities, found) in zip(rows, tables):
        labels = [f"[{index}] {sense}" for index, (_, sense) in enumerate(homonym.sentences)]
        # Layer 0 is 1 everywhere: the scale spans the contextual layers, where the differences are.
        low = float(similarities[1:].min()) if len(similarities) > 1 else float(similarities.min())
        panels = row.subplots(1, columns, squeeze=False)[0]
        for number, (panel, similarity) in enumerate(zip(panels, similarities)):
            image = panel.imshow(similarity.numpy(), cmap="viridis", vmin=low, vmax=1.0)
            kind = "character CNN, context-free" if number == 0 else "LSTM, contextual"
            panel.set_title(f"layer {number} ({kind})", fontsize=11)
            panel.set_xticks(range(len(labels)), labels, rotation=45, ha="right", fontsize=9)
            panel.set_yticks(range(len(labels)), labels, fontsize=9)
            for i, values in enumerate(similarity.tolist()):
                for j, value in enumerate(values):
                    # Dark text on the light (high) end of viridis, light text on the dark end.
                    color = "black" if value > low + 0.6 * (1.0 - low) else "white"
                    panel.text(j, i, f"{value:.2f}", ha="center", va="center", fontsize=8, color=color)
            if number == found.layer:
                for (i, j), color in ((found.same, "white"), (found.across, "red")):
                    for x, y in ((j, i), (i, j)):
                        panel.add_patch(Rectangle((x - 0.5, y - 0.5), 1, 1, fill=False, edgecolor=color, lw=2.5))
        for panel in panels[len(similarities) :]:
            panel.set_axis_off()
        row.colorbar(image, ax=panels, shrink=0.8, label="cosine similarity")
        row.suptitle(
            f"{homonym.romanised} ({homonym.senses}) in {len(labels)} sentences, by {model_name}\n{found.title}\n"
            f"boxed at layer {found.layer}: white, the least similar pair of one sense; red, the most similar pair "
            "across senses",
            fontsize=11,
        )
        legend = [
            f"[{index}] {sense}: {text if font else romanise(text)}"
            for index, (text, sense) in enumerate(homonym.sentences)
        ]
        row.supxlabel("\n".join(legend), fontsize=9, ha="left", x=0.02, fontfamily=font or "sans-serif")
    return figure


def write_plot(tables: list[tuple[Homonym, torch.Tensor, Verdict]], model_name: str, path: Path) -> bool:
    """Writes `similarity_figure` to the PNG `path` whole (a staging file beside it, made new and never through a
    link: `folders.create_exclusively`; then renamed); False, having written nothing, where matplotlib is not
    installed."""
    try:
        figure = similarity_figure(tables, model_name, hangul_font())
    except ImportError:
        return False
    partial = path.with_name(f".{path.name}.incomplete")
    with create_exclusively(partial) as handle:  # a link found there is refused and left as it is
        try:
            figure.savefig(handle, format="png", dpi=100)
            handle.close()
            os.replace(partial, path)
        finally:
            partial.unlink(missing_ok=True)  # this call's own file, where the rename did not take it
    return True


def run(
    plot: str | os.PathLike | None = None,
    model: str | os.PathLike | None = None,
    homonyms: tuple[Homonym, ...] | list[Homonym] = HOMONYMS,
) -> None:
    """The quickstart: each homonym's tables, verdict and counts, the picture at the PNG `plot` (None: none; `hf-elmo
    quickstart` gives quickstart-bae.png in the working directory), then the reviews. With `model` (a biLM folder or
    name), the comparison alone, on that biLM."""
    logging.disable_progress_bar()
    name = "ko-nsmc" if model is None else str(model)
    bilm, tokenizer = load_model_and_tokenizer(bundled_model_path("ko-nsmc") if model is None else model, ElmoModel)
    bilm.eval()
    folder = bundled_model_path("ko-nsmc") if model is None else model
    counts = read_sense_counts(folder) if Path(folder).is_dir() else {}
    units = "morphemes" if tokenizer.pre_tokenizer == "korean_morphemes" else "words"
    print(f"{name}: {bilm.config.n_layers + 1} layers of {2 * bilm.config.projection_dim} dimensions over {units}")
    tables = []
    for homonym in homonyms:
        similarities = similarity_tables(bilm, tokenizer, homonym)
        print(f"\n== {homonym.unit} ({homonym.senses}) ==")
        print_similarities(similarities, tokenizer, homonym)
        found = verdict(similarities, homonym)
        print(f"\nThe layer that separates the senses best here is layer {found.layer}.")
        print(found.sentence)
        print(f"(layer 0 gives the unit {homonym.unit} one vector in every sentence: every cosine there is 1.000)")
        if homonym.unit in counts:
            print(describe_counts(homonym, counts[homonym.unit]))
        tables.append((homonym, similarities, found))
    told_apart = [homonym.unit for homonym, _, found in tables if found.told_apart]
    leaning = ", ".join(
        f"{homonym.unit} {found.nearest * len(homonym.sentences):g} of {len(homonym.sentences)} (chance "
        f"{found.chance * len(homonym.sentences):.1f})"
        for homonym, _, found in tables
    )
    print(
        f"\nCleanly apart at their best layer: {', '.join(told_apart) or 'none'} of {len(tables)} homonyms; "
        f"sentences whose nearest has their sense: {leaning}. Six sentences are few: the homonym test in "
        "examples/nsmc/ scores 208."
    )
    if plot is not None:
        if write_plot(tables, name, Path(plot)):
            print(f"\nwrote these tables as a picture, a row of heatmaps per homonym: {plot}")
        else:
            print(f'\nfor these tables as a picture ({plot}), install matplotlib: pip install "matplotlib>=3.7"')
    if model is not None:
        return
    classifier = pipeline("text-classification", model=bundled_model_path("ko-nsmc-sentiment"))
    print("\nko-nsmc-sentiment:")
    for review, result in zip(REVIEWS, classifier(REVIEWS)):
        print(f"  {result['label']:>8} {result['score']:.3f}  {review}")
