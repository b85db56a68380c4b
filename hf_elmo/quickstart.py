"""The quickstart, `hf-elmo quickstart`: contextual vectors of a homonym and sentiment, from the Korean ELMo shipped
inside the package; it runs offline and needs the `korean` extra (kiwipiepy).

The biLM `ko-nsmc` was pre-trained on Korean text on a 2-core CPU; `ko-nsmc-sentiment` is a sentiment classifier.
배 means belly, boat or pear. The six sentences below hold 배가 in every sense, two sentences a sense, so nothing
but the context tells the senses apart; ko-nsmc's units are morphemes, and the vector compared is that of the unit
배 itself (not of its particle 가). Layer 0 (the character CNN) reads a unit alone and gives 배 one vector
everywhere; the LSTM layers read the sentence. `run` prints each layer's cosines, then says in one sentence whether,
at the layer that separates the senses best, each sense's pair is nearer than any pair across senses, and where it
is not; with matplotlib (the `plot` extra) it also draws the tables, one heatmap per layer, into a PNG.
"""

import os
from pathlib import Path

import torch
from transformers import pipeline
from transformers.utils import logging

from .bundled import bundled_model_path
from .modeling_elmo import ElmoModel
from .tokenization_elmo import ElmoTokenizer

HOMONYM = "배"
# The homonym as the picture names it: the Hangul of `HOMONYM` would need a font with Hangul, which many machines lack.
HOMONYM_ROMANISED = "bae"
# Written for this demo before it was run on any model, and never changed to suit one.
SENTENCES = [
    ("아침을 굶었더니 배가 너무 고프다", "belly"),
    ("상한 우유를 마셨더니 배가 아프다", "belly"),
    ("큰 배가 항구에 천천히 들어왔다", "boat"),
    ("바다 위에 배가 떠 있다", "boat"),
    ("가게에서 산 배가 달고 맛있다", "pear"),
    ("가을에 딴 배가 아주 시원하다", "pear"),
]
REVIEWS = [
    "정말 재미있고 감동적인 영화였어요",
    "시간 낭비, 돈 아깝다",
    "배우들 연기가 최고다 또 보고 싶다",
    "지루하고 스토리도 엉망이다",
]


def homonym_vectors(model: ElmoModel, tokenizer: ElmoTokenizer) -> torch.Tensor:
    """The vector of the unit 배 in each sentence at every layer, `(n_layers + 1, sentences, dim)`."""
    batch = tokenizer([text for text, _ in SENTENCES], padding=True, return_tensors="pt")
    with torch.inference_mode():
        # (layers, batch, positions, dim)
        layers = torch.stack(model(**batch, output_hidden_states=True).hidden_states)
    # Position 0 is <S>: the unit at index i of split_words sits at position i + 1.
    positions = [tokenizer.split_words(text).index(HOMONYM) + 1 for text, _ in SENTENCES]
    return layers[:, torch.arange(len(SENTENCES)), positions]


def separation(similarity: torch.Tensor, senses: list[str]) -> tuple[float, tuple[int, int], tuple[int, int]]:
    """The least similar pair of one sense minus the most similar pair across senses (above 0: each sense's pairs
    are nearer than any pair across senses), and those two pairs."""
    pairs = [(i, j) for i in range(len(senses)) for j in range(i + 1, len(senses))]
    same = min((pair for pair in pairs if senses[pair[0]] == senses[pair[1]]), key=lambda pair: similarity[pair])
    across = max((pair for pair in pairs if senses[pair[0]] != senses[pair[1]]), key=lambda pair: similarity[pair])
    return float(similarity[same] - similarity[across]), same, across


def print_similarities(similarities: torch.Tensor, tokenizer: ElmoTokenizer) -> None:
    """Each layer's cosine table `(sentences, sentences)` of `similarities` `(layers, sentences, sentences)`, and for
    the LSTM layers the pairs that decide the margin."""
    senses = [sense for _, sense in SENTENCES]
    print(f"the unit {HOMONYM} in:")
    for index, (text, sense) in enumerate(SENTENCES):
        print(f"  [{index}] {text}  ({sense}: {' / '.join(tokenizer.split_words(text))})")
    for number, similarity in enumerate(similarities):
        kind = "context-free character CNN" if number == 0 else f"LSTM layer {number}, contextual"
        print(f"\ncosine similarity, layer {number} ({kind}):")
        print("      " + "".join(f"{f'[{j}]':>7}" for j in range(len(SENTENCES))))
        for i, row in enumerate(similarity.tolist()):
            print(f"  [{i}] " + "".join(f"{value:7.3f}" for value in row))
        if number:
            margin, same, across = separation(similarity, senses)
            print(
                f"least similar pair of one sense {same} {similarity[same]:.3f}, most similar pair across senses "
                f"{across} {similarity[across]:.3f}: margin {margin:+.3f}"
            )


def verdict(similarities: torch.Tensor) -> tuple[int, str, str]:
    """At the LSTM layer that separates the senses best: its number, the verdict in one sentence, and the verdict in
    the few words of a picture's title (senses, not the Hangul of the sentences)."""
    senses = [sense for _, sense in SENTENCES]
    margins = [separation(similarity, senses) for similarity in similarities[1:]]
    best = 1 + max(range(len(margins)), key=lambda index: margins[index][0])
    margin, same, across = margins[best - 1]
    similarity = similarities[best]
    boat_pear = max(
        similarity[i, j]
        for i in range(len(senses))
        for j in range(len(senses))
        if {senses[i], senses[j]} == {"boat", "pear"}
    )
    if margin > 0:
        sentence = (
            f"There each sense's pair is nearer than any pair across senses (by {margin:.3f}): the model tells these "
            f"senses apart in these sentences. Boat and pear come as close as {boat_pear:.3f}."
        )
        title = f"layer {best} tells the senses apart: each sense's pair is nearer than any other (by {margin:.3f})"
        return best, sentence, title
    sentence = (
        f"Even there it does not tell the senses apart: [{across[0]}] {senses[across[0]]} and [{across[1]}] "
        f"{senses[across[1]]} ({similarity[across]:.3f}) are nearer than [{same[0]}] and [{same[1]}], both "
        f"{senses[same[0]]} ({similarity[same]:.3f}). Boat and pear come as close as {boat_pear:.3f}."
    )
    title = (
        f"senses not told apart, even at layer {best} (the best): [{across[0]}] {senses[across[0]]} and "
        f"[{across[1]}] {senses[across[1]]} {similarity[across]:.3f} > [{same[0]}] and [{same[1]}], both "
        f"{senses[same[0]]}, {similarity[same]:.3f}"
    )
    return best, sentence, title


def similarity_figure(similarities: torch.Tensor, title: str):
    """A matplotlib `Figure` of `similarities` `(layers, sentences, sentences)`: one heatmap a layer, each sentence
    labelled `[i] sense`, every cosine written in its cell, one colour scale for the LSTM layers, `title` above."""
    from matplotlib.figure import Figure  # the plot extra; without pyplot, no backend or window is involved

    labels = [f"[{index}] {sense}" for index, (_, sense) in enumerate(SENTENCES)]
    # Layer 0 is 1 everywhere: the scale spans the contextual layers, where the differences are.
    low = float(similarities[1:].min()) if len(similarities) > 1 else float(similarities.min())
    figure = Figure(figsize=(4.4 * len(similarities) + 1, 5.0), layout="constrained")
    panels = figure.subplots(1, len(similarities))
    for number, (panel, similarity) in enumerate(zip(panels, similarities)):
        image = panel.imshow(similarity.numpy(), cmap="viridis", vmin=low, vmax=1.0)
        kind = "character CNN, context-free" if number == 0 else "LSTM, contextual"
        panel.set_title(f"layer {number} ({kind})", fontsize=11)
        panel.set_xticks(range(len(labels)), labels, rotation=45, ha="right", fontsize=9)
        panel.set_yticks(range(len(labels)), labels, fontsize=9)
        for i, row in enumerate(similarity.tolist()):
            for j, value in enumerate(row):
                # Dark text on the light (high) end of viridis, light text on the dark end.
                color = "black" if value > low + 0.6 * (1.0 - low) else "white"
                panel.text(j, i, f"{value:.2f}", ha="center", va="center", fontsize=8, color=color)
    figure.colorbar(image, ax=panels, shrink=0.8, label="cosine similarity")
    figure.suptitle(
        f"The unit {HOMONYM_ROMANISED} (belly, boat or pear) in six sentences, by ko-nsmc\n{title}", fontsize=12
    )
    return figure


def write_plot(similarities: torch.Tensor, title: str, path: Path) -> bool:
    """Writes `similarity_figure` to the PNG `path` whole (a temporary file beside it, renamed); False, having
    written nothing, where matplotlib is not installed."""
    try:
        figure = similarity_figure(similarities, title)
    except ImportError:
        return False
    partial = path.with_name(f".{path.name}.incomplete")
    try:
        figure.savefig(partial, format="png", dpi=100)
        os.replace(partial, path)
    finally:
        partial.unlink(missing_ok=True)
    return True


def run(plot: str | os.PathLike | None = None) -> None:
    """The quickstart: the homonym's tables and verdict, the picture at the PNG `plot` (None: none; `hf-elmo
    quickstart` gives quickstart-bae.png in the working directory), then the reviews."""
    logging.disable_progress_bar()
    tokenizer = ElmoTokenizer.from_pretrained(bundled_model_path("ko-nsmc"))
    model = ElmoModel.from_pretrained(bundled_model_path("ko-nsmc")).eval()
    vectors = torch.nn.functional.normalize(homonym_vectors(model, tokenizer), dim=-1)
    similarities = vectors @ vectors.transpose(1, 2)  # (layers, sentences, sentences)
    print(f"ko-nsmc: {len(vectors)} layers of {vectors.shape[-1]} dimensions over morphemes")
    print_similarities(similarities, tokenizer)
    best, sentence, title = verdict(similarities)
    print(f"\nThe layer that separates the senses best here is layer {best}.")
    print(sentence)
    print("(layer 0 gives the unit 배 one vector in every sentence: every cosine there is 1.000)")
    if plot is not None:
        if write_plot(similarities, title, Path(plot)):
            print(f"\nwrote these tables as a picture, a heatmap per layer: {plot}")
        else:
            print(f'\nfor these tables as a picture ({plot}), install matplotlib: pip install "matplotlib>=3.7"')

    classifier = pipeline("text-classification", model=bundled_model_path("ko-nsmc-sentiment"))
    print("\nko-nsmc-sentiment:")
    for review, result in zip(REVIEWS, classifier(REVIEWS)):
        print(f"  {result['label']:>8} {result['score']:.3f}  {review}")
