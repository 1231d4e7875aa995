"""The shared PyTorch model core: the architectures, each a package that registers itself
(bert/, modernbert/; the contract in architectures.py), what their model files share
(shared.py), the roles their heads play (roles.py) and Hugging Face checkpoint reading and
writing (hf.py).

Importing the package registers the architectures without importing torch (the CLI's help
lists them); the model classes below are imported when first named."""

import importlib

from bertctl.model import architectures
from bertctl.model import bert, modernbert  # noqa: F401  (each registers itself)
from bertctl.model.architectures import ARCHITECTURES, ROLES, Architecture, build, role_of
from bertctl.model.bert.config import PRESETS, BertConfig

_LAZY = {
    "bertctl.model.bert.electra": ("BertForElectraPreTraining",),
    "bertctl.model.bert.encoder": ("BertModel", "flops_per_token"),
    "bertctl.model.bert.heads": (
        "BertForEmbedding", "BertForMaskedLM", "BertForMultipleChoice", "BertForPreTraining",
        "BertForQuestionAnswering", "BertForSequenceClassification",
        "BertForTokenClassification", "BertWithHead"),
    "bertctl.model.hf": ("LoadReport", "load_model", "read_config", "read_config_dict",
                         "save_model"),
    "bertctl.model.shared": ("EncoderWithHead",),
}
_WHERE = {name: module for module, names in _LAZY.items() for name in names}


def __getattr__(name: str):
    if name not in _WHERE:
        raise AttributeError(f"module 'bertctl.model' has no attribute {name!r}")
    return getattr(importlib.import_module(_WHERE[name]), name)


__all__ = ["ARCHITECTURES", "PRESETS", "ROLES", "Architecture", "BertConfig", "architectures",
           "build", "role_of", *_WHERE]
