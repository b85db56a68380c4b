"""
hf_elmo: ELMo for transformers. The public names below are imported when first read (a module `__getattr__`, as
transformers' `_LazyModule` does), so that `import hf_elmo.configuration_elmo` needs no torch.

`import hf_elmo` registers ELMo with the Auto classes. The config and the tokenizer need only transformers, and are
registered at once. The model classes and the question-answering pipeline need torch: they are registered the first
time an `ElmoConfig` is made, which every Auto path does before it looks for a model class (`AutoModel.from_pretrained`
reads `config.json` first, `from_config` takes one, `pipeline(...)` reads it before it checks the task).
"""

# The package's version, in this one place: pyproject.toml reads it from here (setuptools' `attr:`, without importing).
__version__ = "0.1.0"

import importlib

from transformers import AutoConfig, AutoTokenizer

from . import configuration_elmo
from .configuration_elmo import ElmoConfig
from .tokenization_elmo import ElmoTokenizer

# Each public name read from the package, and the module that holds it.
PUBLIC_NAMES = {
    "BUNDLED_MODELS": "bundled",
    "bundled_model_path": "bundled",
    "ElmoConfig": "configuration_elmo",
    "ElmoTokenizer": "tokenization_elmo",
    "ElmoForPreTraining": "modeling_elmo",
    "ElmoForPreTrainingOutput": "modeling_elmo",
    "ElmoForQuestionAnswering": "modeling_elmo",
    "ElmoForSequenceClassification": "modeling_elmo",
    "ElmoForTokenClassification": "modeling_elmo",
    "ElmoModel": "modeling_elmo",
    "ElmoModelOutput": "modeling_elmo",
    "ElmoPreTrainedModel": "modeling_elmo",
    "ElmoScalarMix": "modeling_elmo",
    "ElmoQuestionAnsweringPipeline": "question_answering_elmo",
    "ElmoSentenceEmbedder": "sentence_encoder",
}
__all__ = sorted(PUBLIC_NAMES)


def __getattr__(name: str):
    if name not in PUBLIC_NAMES:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(f".{PUBLIC_NAMES[name]}", __name__), name)
    globals()[name] = value  # read once: the next read finds it here
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *PUBLIC_NAMES})


def register_model_classes() -> None:
    """
    Makes each Auto class give its ELMo model class for an `ElmoConfig`, and `pipeline("question-answering")` ELMo's
    pipeline (transformers 5 has none of its own); nothing where torch is not installed.
    """
    from transformers.utils import is_torch_available

    if not is_torch_available():
        return
    import transformers
    from transformers import AutoModelForQuestionAnswering
    from transformers.pipelines import PIPELINE_REGISTRY

    from .modeling_elmo import AUTO_CLASSES
    from .question_answering_elmo import ElmoQuestionAnsweringPipeline

    for auto_class, model_class in AUTO_CLASSES.items():
        getattr(transformers, auto_class).register(ElmoConfig, model_class, exist_ok=True)
        model_class.register_for_auto_class(auto_class)
    # A saved question-answering folder names this pipeline in `config.custom_pipelines` too, for
    # trust_remote_code=True without hf_elmo.
    PIPELINE_REGISTRY.register_pipeline(
        "question-answering",
        pipeline_class=ElmoQuestionAnsweringPipeline,
        pt_model=AutoModelForQuestionAnswering,
        type="text",
    )


# register_for_auto_class makes save_pretrained write `auto_map` and copy the code files, so that saved folders also
# load with trust_remote_code=True without hf_elmo.
AutoConfig.register("elmo", ElmoConfig, exist_ok=True)
AutoTokenizer.register(ElmoConfig, tokenizer_class=ElmoTokenizer, exist_ok=True)
ElmoConfig.register_for_auto_class("AutoConfig")
ElmoTokenizer.register_for_auto_class("AutoTokenizer")
configuration_elmo.ON_FIRST_CONFIG.append(register_model_classes)
