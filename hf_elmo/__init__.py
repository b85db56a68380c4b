from transformers import AutoConfig, AutoModel, AutoTokenizer

from .configuration_elmo import ElmoConfig
from .modeling_elmo import ElmoModel, ElmoModelOutput, ElmoPreTrainedModel
from .tokenization_elmo import ElmoTokenizer

# Importing hf_elmo makes the Auto classes resolve model_type "elmo"; register_for_auto_class makes save_pretrained
# write `auto_map` and copy the code files, so saved folders also load with trust_remote_code=True without hf_elmo.
AutoConfig.register("elmo", ElmoConfig, exist_ok=True)
AutoTokenizer.register(ElmoConfig, tokenizer_class=ElmoTokenizer, exist_ok=True)
AutoModel.register(ElmoConfig, ElmoModel, exist_ok=True)
ElmoConfig.register_for_auto_class("AutoConfig")
ElmoTokenizer.register_for_auto_class("AutoTokenizer")
ElmoModel.register_for_auto_class("AutoModel")
