import transformers
from transformers import AutoConfig, AutoModelForQuestionAnswering, AutoTokenizer
from transformers.pipelines import PIPELINE_REGISTRY

from .bundled import BUNDLED_MODELS, bundled_model_path
from .configuration_elmo import ElmoConfig
from .modeling_elmo import (
    AUTO_CLASSES,
    ElmoForPreTraining,
    ElmoForPreTrainingOutput,
    ElmoForQuestionAnswering,
    ElmoForSequenceClassification,
    ElmoForTokenClassification,
    ElmoModel,
    ElmoModelOutput,
    ElmoPreTrainedModel,
    ElmoScalarMix,
)
from .question_answering_elmo import ElmoQuestionAnsweringPipeline
from .sentence_encoder import ElmoSentenceEmbedder
from .tokenization_elmo import ElmoTokenizer

__all__ = [
    "BUNDLED_MODELS",
    "ElmoConfig",
    "ElmoForPreTraining",
    "ElmoForPreTrainingOutput",
    "ElmoForQuestionAnswering",
    "ElmoForSequenceClassification",
    "ElmoForTokenClassification",
    "ElmoModel",
    "ElmoModelOutput",
    "ElmoPreTrainedModel",
    "ElmoQuestionAnsweringPipeline",
    "ElmoScalarMix",
    "ElmoSentenceEmbedder",
    "ElmoTokenizer",
    "bundled_model_path",
]

# Importing hf_elmo makes the Auto classes resolve model_type "elmo"; register_for_auto_class makes save_pretrained
# write `auto_map` and copy the code files, so saved folders also load with trust_remote_code=True without hf_elmo.
AutoConfig.register("elmo", ElmoConfig, exist_ok=True)
AutoTokenizer.register(ElmoConfig, tokenizer_class=ElmoTokenizer, exist_ok=True)
ElmoConfig.register_for_auto_class("AutoConfig")
ElmoTokenizer.register_for_auto_class("AutoTokenizer")
for _auto_class, _model_class in AUTO_CLASSES.items():
    getattr(transformers, _auto_class).register(ElmoConfig, _model_class, exist_ok=True)
    _model_class.register_for_auto_class(_auto_class)
# transformers 5 has no question-answering pipeline: ELMo's own, for its question-answering models (a saved folder
# names it in `config.custom_pipelines`, loaded with trust_remote_code=True).
PIPELINE_REGISTRY.register_pipeline(
    "question-answering",
    pipeline_class=ElmoQuestionAnsweringPipeline,
    pt_model=AutoModelForQuestionAnswering,
    type="text",
)
