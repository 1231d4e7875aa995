"""The shared PyTorch BERT core: config and encoder (bert.py), task heads (heads.py) and
Hugging Face checkpoint reading/writing (hf.py)."""

from bertctl.model.bert import BertModel, flops_per_token
from bertctl.model.config import PRESETS, BertConfig
from bertctl.model.heads import (
    HEADS,
    BertForMaskedLM,
    BertForMultipleChoice,
    BertForPreTraining,
    BertForQuestionAnswering,
    BertForSequenceClassification,
    BertForTokenClassification,
    BertWithHead,
)
from bertctl.model.electra import BertForElectraPreTraining
from bertctl.model.hf import LoadReport, load_model, read_config, read_config_dict, save_model

__all__ = [
    "HEADS", "PRESETS", "BertConfig", "BertForElectraPreTraining", "BertForMaskedLM", "BertForMultipleChoice", "BertForPreTraining",
    "BertForQuestionAnswering", "BertForSequenceClassification", "BertForTokenClassification",
    "BertModel", "BertWithHead", "LoadReport", "flops_per_token", "load_model", "read_config",
    "read_config_dict", "save_model",
]
