"""BERT (Devlin et al., 2018) as a bertctl architecture, saved as transformers' BERT:
config.py (the config and Google's size presets), modeling.py (the encoder, pretraining and the
fine-tuning heads). Its `electra` role, ELECTRA's generator and discriminator on this encoder,
is model/electra/pretraining.py."""

from bertctl.model.architectures import Architecture, register, heads_named
from bertctl.model.bert.config import BertConfig


register(Architecture(
    name="bert", model_type="bert", config_class=BertConfig,
    description="the paper's",
    heads=heads_named(
        "bertctl.model.bert.modeling", "Bert", pretraining=True,
        electra="bertctl.model.electra.pretraining:ElectraPreTrainingHead"),
    encoder_name="bert", bare_prefixes=("embeddings.", "encoder.", "pooler."),
    # HF's non-persistent index buffers (older versions saved them) and the decoder weight,
    # which is the word embeddings.
    ignored_keys=("bert.embeddings.position_ids", "bert.embeddings.token_type_ids",
                  "cls.predictions.decoder.weight"),
    onnx_fusions="bert"))

__all__ = ["BertConfig"]
