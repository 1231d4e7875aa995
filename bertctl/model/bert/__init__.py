"""BERT (Devlin et al., 2018) as a bertctl architecture, saved as transformers' BERT:
config.py (the config and Google's size presets), encoder.py, heads.py (pretraining and the
fine-tuning heads), electra.py (ELECTRA's generator and discriminator on this encoder)."""

from bertctl.model.architectures import Architecture, register
from bertctl.model.bert.config import BertConfig

_HEADS = "bertctl.model.bert.heads:"

register(Architecture(
    name="bert", model_type="bert", config_class=BertConfig,
    description="the paper's",
    heads={"encoder": "bertctl.model.bert.encoder:BertModel",
           "pretraining": _HEADS + "BertForPreTraining",
           "masked_lm": _HEADS + "BertForMaskedLM",
           "electra": "bertctl.model.bert.electra:BertForElectraPreTraining",
           "sequence_classification": _HEADS + "BertForSequenceClassification",
           "multiple_choice": _HEADS + "BertForMultipleChoice",
           "question_answering": _HEADS + "BertForQuestionAnswering",
           "token_classification": _HEADS + "BertForTokenClassification"},
    encoder_name="bert", bare_prefixes=("embeddings.", "encoder.", "pooler."),
    # HF's non-persistent index buffers (older versions saved them) and the decoder weight,
    # which is the word embeddings.
    ignored_keys=("bert.embeddings.position_ids", "bert.embeddings.token_type_ids",
                  "cls.predictions.decoder.weight"),
    onnx_fusions="bert"))

__all__ = ["BertConfig"]
