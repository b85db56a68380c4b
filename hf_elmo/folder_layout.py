"""What an hf_elmo model folder holds beside transformers' own files, written by `save_pretrained`.

- `auto_map` in `config.json` ([`auto_map`]): every ELMo Auto class, so that any of them loads any ELMo folder with
  `trust_remote_code=True` from the code files saved beside the weights.
- The files that make a biLM folder a sentence-transformers model, written without sentence-transformers.
- For a question-answering head, `config.custom_pipelines` and a copy of `question_answering_elmo.py`, so that
  `pipeline("question-answering", model=folder, trust_remote_code=True)` answers ([`QUESTION_ANSWERING_PIPELINE`]).

Each model class names the extras its folder holds (`folder_extras`, a tuple of [`FolderExtra`]), and the one
`save_pretrained` of every ELMo model (`ElmoPreTrainedModel`'s) sets their config fields before the config is
written and writes their files after the weights. A biLM (`ElmoModel`, `ElmoForPreTraining`) names
[`SENTENCE_TRANSFORMERS_MODULE`], so every folder
hf_elmo writes (converters, pre-training, `push_to_hub`) loads with `SentenceTransformer(folder,
trust_remote_code=True)`. `modules.json` names one module,
[`~sentence_transformers_elmo.ElmoSentenceTransformerModule`]: hf_elmo's own sentence vector,
`ElmoModel.sentence_embedding`. Without the files, sentence-transformers would build its default for a transformers
folder: the mean of the top layer alone, counting `<S>` and `</S>` as words.
"""

import json
import os
import shutil
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

ENCODER_CLASS = "hf_elmo.sentence_transformers_elmo.ElmoSentenceTransformerModule"
MODULES_FILE = "modules.json"
ENCODER_CONFIG_FILE = "sentence_bert_config.json"
MODEL_CONFIG_FILE = "config_sentence_transformers.json"
# SIF's `a` by default: the best measured on KorSTS for the layer average of the earlier whitespace-word ko-nsmc (v6);
# ko-nsmc's card measures each `a` for the shipped biLM, whose folder sets its own.
SIF_A = 1e-5
SENTENCE_TRANSFORMERS_FILES = {
    # One module, saved in the folder's root: it reads the config, weights and tokenizer files already there.
    MODULES_FILE: [{"idx": 0, "name": "0", "path": "", "type": ENCODER_CLASS}],
    # The module's defaults: the plain average of the layers (as `sentence_embedding` takes), no truncation, SIF
    # weights where the folder has word counts, no reference statistics (they are a text's: bundle.py's
    # --sentence-reference-text estimates them for a shipped folder).
    ENCODER_CONFIG_FILE: {
        "layer_weights": None,
        "max_seq_length": None,
        "sif_a": SIF_A,
        "common_component": None,
        "reference_mean": None,
    },
    # ELMo's vectors are not normalised: cosine, as hf_elmo's examples compare them.
    MODEL_CONFIG_FILE: {"model_type": "SentenceTransformer", "similarity_fn_name": "cosine"},
}


def auto_map(model_classes: dict[str, type]) -> dict[str, str]:
    """`config.auto_map` for the model class each Auto class gives (`modeling_elmo.AUTO_CLASSES`)."""
    return {
        "AutoConfig": "configuration_elmo.ElmoConfig",
        **{auto_class: f"modeling_elmo.{model_class.__name__}" for auto_class, model_class in model_classes.items()},
    }


# `config.custom_pipelines` of a question-answering folder, as transformers' `Pipeline.save_pretrained` writes a
# registered pipeline: the class in the folder's copy of its file, and the Auto class of its models.
QUESTION_ANSWERING_FILE = "question_answering_elmo.py"
QUESTION_ANSWERING_PIPELINE = {
    "question-answering": {
        "impl": "question_answering_elmo.ElmoQuestionAnsweringPipeline",
        "pt": ["AutoModelForQuestionAnswering"],
        "type": "text",
    }
}


def copy_question_answering_pipeline(folder: str | os.PathLike) -> None:
    """Copies the pipeline's file (which imports nothing relative) beside the weights in `folder`."""
    shutil.copyfile(Path(__file__).with_name(QUESTION_ANSWERING_FILE), Path(folder) / QUESTION_ANSWERING_FILE)


def write_sentence_transformers_files(folder: str | os.PathLike) -> None:
    """Writes `modules.json`, `sentence_bert_config.json` and `config_sentence_transformers.json` in `folder`."""
    for name, content in SENTENCE_TRANSFORMERS_FILES.items():
        with open(os.path.join(folder, name), "w", encoding="utf-8") as handle:
            json.dump(content, handle, indent=2)
            handle.write("\n")


@dataclass(frozen=True)
class FolderExtra:
    """
    What a model class's folder holds beyond transformers' files: the `config_fields` set on the config before it is
    saved (that name the files), and `write(folder)`, which writes the files once the weights are saved.
    """

    write: Callable[[str | os.PathLike], None]
    config_fields: dict = field(default_factory=dict)


# A biLM's folder is also a sentence-transformers model.
SENTENCE_TRANSFORMERS_MODULE = FolderExtra(write_sentence_transformers_files)
# A question-answering folder carries its pipeline, named in `config.custom_pipelines`.
QUESTION_ANSWERING_PIPELINE_FILE = FolderExtra(
    copy_question_answering_pipeline, {"custom_pipelines": QUESTION_ANSWERING_PIPELINE}
)
