"""Model folders shipped inside the package, so that hf_elmo works on a machine without network. Commands and scripts
take their names where they take a model folder (`hf_elmo.loading.resolve_model_name`).

- `ko-nsmc`: a Korean ELMo biLM pre-trained on the reviews of the Naver Sentiment Movie Corpus (its training movies).
- `ko-nsmc-sentiment`: a sentiment classifier (negative / positive) on that biLM, trained on the labelled reviews.

Each folder holds a model card (`README.md`) with its data, commands, cost and measured figures, the config, weights
and tokenizer files (and, for the biLM, the files that make it a sentence-transformers model), and no code: it loads
with `from_pretrained`, the Auto classes and `pipeline` through the classes `import hf_elmo` registers. A copy saved
from it with `save_pretrained` carries the code files and `auto_map`, and loads with `trust_remote_code=True` where
hf_elmo is not installed.
"""

from pathlib import Path

BUNDLED_MODELS = ("ko-nsmc", "ko-nsmc-sentiment")


def bundled_model_path(name: str) -> str:
    """The folder of the bundled model `name` (one of `BUNDLED_MODELS`), for `from_pretrained`."""
    if name not in BUNDLED_MODELS:
        raise ValueError(f"no bundled model named {name!r}; the bundled models are: {', '.join(BUNDLED_MODELS)}")
    return str(Path(__file__).resolve().parent / name)
