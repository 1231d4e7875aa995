"""The shared PyTorch model core: the architectures (architectures.py: BERT in bert.py,
config.py and heads.py, ModernBERT in modernbert/), the roles their heads play (roles.py) and
Hugging Face checkpoint reading/writing (hf.py)."""

from bertctl.model import architectures
from bertctl.model.architectures import ARCHITECTURES, ROLES, Architecture, build, role_of
from bertctl.model.bert import BertModel, flops_per_token
from bertctl.model.config import PRESETS, BertConfig
from bertctl.model.electra import BertForElectraPreTraining
from bertctl.model.heads import (
    BertForEmbedding,
    BertForMaskedLM,
    BertForMultipleChoice,
    BertForPreTraining,
    BertForQuestionAnswering,
    BertForSequenceClassification,
    BertForTokenClassification,
    BertWithHead,
    EncoderWithHead,
)
from bertctl.model.hf import LoadReport, load_model, read_config, read_config_dict, save_model

architectures.register(Architecture(
    name="bert", model_type="bert", config_class=BertConfig,
    heads={"encoder": BertModel, "pretraining": BertForPreTraining,
           "masked_lm": BertForMaskedLM, "electra": BertForElectraPreTraining,
           "sequence_classification": BertForSequenceClassification,
           "multiple_choice": BertForMultipleChoice,
           "question_answering": BertForQuestionAnswering,
           "token_classification": BertForTokenClassification,
           "embedding": BertForEmbedding},
    encoder_name="bert", bare_prefixes=("embeddings.", "encoder.", "pooler."),
    # HF's non-persistent index buffers (older versions saved them) and the decoder weight,
    # which is the word embeddings.
    ignored_keys=("bert.embeddings.position_ids", "bert.embeddings.token_type_ids",
                  "cls.predictions.decoder.weight"),
    onnx_fusions="bert"))

import bertctl.model.modernbert  # noqa: E402,F401  (registers itself)

__all__ = [
    "ARCHITECTURES", "PRESETS", "ROLES", "Architecture", "BertConfig", "BertForElectraPreTraining",
    "BertForEmbedding",
    "BertForMaskedLM", "BertForMultipleChoice", "BertForPreTraining", "BertForQuestionAnswering",
    "BertForSequenceClassification", "BertForTokenClassification", "BertModel", "BertWithHead",
    "EncoderWithHead", "LoadReport", "build", "flops_per_token", "load_model", "read_config",
    "read_config_dict", "role_of", "save_model",
]
