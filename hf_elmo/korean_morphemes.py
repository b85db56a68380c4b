"""Korean morphemes as the units of `ElmoTokenizer`: the `korean_morphemes` pre-tokenizer, by kiwipiepy.

Korean writes particles and endings joined to their stems (배를, 배가), so a model reading whitespace words (eojeol)
sees a new word for each particle, and its layers group the homonym 배 (belly, boat, pear) by the particle that
follows it rather than by its meaning. A morphological analyser takes them apart: `배를 타고` becomes
`배 / 를 / 타 / 고`.

- **Units**: each morpheme's form as kiwipiepy writes it, which is not always a substring of the text: contractions
  come apart (했 -> 하 + 었) and endings keep kiwipiepy's spelling (간 -> 가 + ᆫ, the final consonant as a jongseong
  jamo, apart from the ㄴ people type). Forms keep a stem or an ending one unit wherever it occurs, which substrings
  would not (했 would be a unit beside 하 and 었).
- **Spans**: the characters a morpheme was read from, `(start, end)` in the text: overlapping for a contraction, empty
  for a copula kiwipiepy restored (이건 -> 이거 + ᆫ, 뭐야 -> 뭐 + 이 + 야).
- **Words**: the whitespace word each morpheme starts in, so that `word_ids()` maps every morpheme to a word of the
  input (labels per word align; `ElmoBatchEncoding.pool_to_words` averages a word's morphemes).

The analyser is kiwipiepy's `Kiwi`, one per process, built at the first analysis (about a second) and never changed
(no user words), so that a text always gives the same units under one version of kiwipiepy and its model (the saved
tokenizer records both). Two of its matchers are off, so that no unit spans whitespace: the multi-word dictionary
(it joins names across spaces and inserts spaces into names, 시네마천국 -> "시네마 천국") and serial numbers ("2: 20").
It runs on one thread (no thread pool to lose in a forked worker of a `DataLoader` or `datasets.map`). The
`KoreanMorphemes` object holds nothing, so a tokenizer using it pickles; a spawned process builds its own `Kiwi`.
"""

import bisect
import functools
import re
import warnings

# The korean extra's requirement (pyproject.toml). The hint names it rather than the extra: hf_elmo is on no package
# index, so `pip install "hf_elmo[korean]"` finds nothing.
KIWIPIEPY_REQUIREMENT = "kiwipiepy>=0.21"
INSTALL_HINT = f'pip install "{KIWIPIEPY_REQUIREMENT}" (the korean extra)'
# Whitespace words as `str.split` finds them.
_WORD = re.compile(r"\S+")


class MissingKoreanExtraError(ImportError, ValueError):
    """
    kiwipiepy (or its model) is not installed. An `ImportError`, and a `ValueError` as the package's other one-line
    errors are, so that the commands that load a folder (`hf-elmo embed`, `export`, `pretrain`) report it in one line.
    """


def install_hint(recorded: dict[str, str] | None = None) -> str:
    """
    What to install for the analyser: the korean extra where this module is hf_elmo's; where it is a model folder's
    copy, run with `trust_remote_code=True` (where hf_elmo may not be installed, and its extra means nothing),
    kiwipiepy itself: the versions a tokenizer `recorded`, else the extra's requirement.
    """
    if __name__.split(".")[0] == "hf_elmo":
        return INSTALL_HINT
    if recorded:
        return "pip install " + " ".join(f"{name}=={version}" for name, version in recorded.items())
    return f'pip install "{KIWIPIEPY_REQUIREMENT}"'


def _import_kiwipiepy(recorded: dict[str, str] | None = None):
    """The `kiwipiepy` module; a one-line `MissingKoreanExtraError` saying what to install when it is not installed
    (`install_hint`)."""
    # The import sits in a try block also so that transformers' check of a saved folder's code (trust_remote_code)
    # does not ask for kiwipiepy to load a model that does not use it.
    try:
        import kiwipiepy
    except ImportError as error:
        raise MissingKoreanExtraError(
            f"the korean_morphemes pre-tokenizer needs kiwipiepy: {install_hint(recorded)}"
        ) from error
    return kiwipiepy


def installed_versions(recorded: dict[str, str] | None = None) -> dict[str, str]:
    """
    `{"kiwipiepy": version, "kiwipiepy_model": version}`: the code and the model a segmentation depends on. Where
    they are missing, the one-line error names the versions a tokenizer `recorded` when it is a folder's code.
    """
    kiwipiepy = _import_kiwipiepy(recorded)
    try:
        import kiwipiepy_model
    except ImportError as error:
        raise MissingKoreanExtraError(
            f"kiwipiepy is installed without its model, kiwipiepy_model: {install_hint(recorded)}"
        ) from error
    return {"kiwipiepy": kiwipiepy.__version__, "kiwipiepy_model": kiwipiepy_model.__version__}


@functools.cache
def analyser():
    """This process's `(Kiwi, match options)`, built at the first call."""
    kiwipiepy = _import_kiwipiepy()
    with warnings.catch_warnings():
        # kiwipiepy warns that num_workers=0 meant "every core" before 0.21; from 0.21 (the extra's floor) it is one
        # thread.
        warnings.simplefilter("ignore", DeprecationWarning)
        kiwi = kiwipiepy.Kiwi(num_workers=0, load_multi_dict=False)
    return kiwi, kiwipiepy.Match.ALL & ~kiwipiepy.Match.SERIAL


class KoreanMorphemes:
    """
    The `korean_morphemes` pre-tokenizer: Korean text -> morphemes (see the module's docstring). `pre_tokenize_str`
    has the signature of `tokenizers`' pre-tokenizers; `analyse` also gives each morpheme's word.
    """

    def analyse(self, text: str) -> list[tuple[str, tuple[int, int], int]]:
        """Each morpheme of `text`: its form, its `(start, end)` in `text`, and the index of its whitespace word."""
        kiwi, match_options = analyser()
        word_starts = [word.start() for word in _WORD.finditer(text)]
        # kiwipiepy reads a few control characters that str.split takes for spaces (\x1c..\x1f) as symbols: one
        # before the first word belongs to it.
        return [
            (token.form, (token.start, token.end), max(bisect.bisect_right(word_starts, token.start) - 1, 0))
            for token in kiwi.tokenize(text, match_options=match_options)
        ]

    def pre_tokenize_str(self, text: str) -> list[tuple[str, tuple[int, int]]]:
        """Each morpheme of `text` and its `(start, end)`, as `tokenizers.pre_tokenizers.*.pre_tokenize_str` gives."""
        return [(form, span) for form, span, _ in self.analyse(text)]


__all__ = ["KoreanMorphemes", "MissingKoreanExtraError", "installed_versions"]
