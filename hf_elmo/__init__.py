"""
hf_elmo: ELMo for transformers. `import hf_elmo` registers ELMo with transformers' Auto classes and pipelines
(`register_auto_classes`, the one place that does); the other public names below are imported when first read (a
module `__getattr__`, as transformers' `_LazyModule` does).

Registering needs transformers' config class, whose import takes torch with it where torch is installed: `import
hf_elmo`, and so every module of the package, costs seconds (benchmarks/RESULTS.md, "Command start-up"). Where torch
is not installed, the config and the tokenizer are registered and the configuration reads and checks a `config.json`.
"""

# The package's version, in this one place: pyproject.toml reads it from here (setuptools' `attr:`, without importing).
__version__ = "0.1.0"

import importlib

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


def register_auto_classes() -> None:
    """
    Makes `AutoConfig` and `AutoTokenizer` give ELMo's for `model_type="elmo"`, each Auto class of
    `modeling_elmo.AUTO_CLASSES` its ELMo model, and `pipeline("question-answering")` ELMo's pipeline (transformers 5
    has none of its own); the model classes and the pipeline only where torch is installed. Each class is also
    registered for its Auto class (`register_for_auto_class`), so that `save_pretrained` writes `auto_map` and copies
    the code files: a saved folder loads with `trust_remote_code=True` without hf_elmo. Run once, by `import hf_elmo`.
    """
    import transformers
    from transformers.utils import is_torch_available

    from .configuration_elmo import ElmoConfig
    from .tokenization_elmo import ElmoTokenizer

    transformers.AutoConfig.register("elmo", ElmoConfig, exist_ok=True)
    transformers.AutoTokenizer.register(ElmoConfig, tokenizer_class=ElmoTokenizer, exist_ok=True)
    ElmoConfig.register_for_auto_class("AutoConfig")
    ElmoTokenizer.register_for_auto_class("AutoTokenizer")
    if not is_torch_available():
        return
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
        pt_model=transformers.AutoModelForQuestionAnswering,
        type="text",
    )


register_auto_classes()
