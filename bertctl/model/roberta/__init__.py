"""RoBERTa (Liu et al., 2019) and XLM-RoBERTa (Conneau et al., 2019) as bertctl architectures,
saved as transformers' classes of the same names: BERT's blocks (model/bert) under RoBERTa's
embeddings (positions past the padding id, one token type) and heads (`lm_head`, the
classifier's own dense layer). config.py, modeling.py."""

from bertctl.model.architectures import Architecture, register, heads_named
from bertctl.model.roberta.config import RobertaConfig, XLMRobertaConfig


for _name, _config, _prefix, _what in (
        ("roberta", RobertaConfig, "Roberta", "RoBERTa's"),
        ("xlm-roberta", XLMRobertaConfig, "XLMRoberta", "XLM-RoBERTa's")):
    register(Architecture(
        name=_name, model_type=_name, config_class=_config, description=_what,
        heads=heads_named("bertctl.model.roberta.modeling", _prefix, heads="Roberta"),
        encoder_name="roberta", bare_prefixes=("embeddings.", "encoder.", "pooler."),
        # transformers' index buffers, and the decoder, which is the word embeddings and the
        # head's bias.
        ignored_keys=("roberta.embeddings.position_ids", "roberta.embeddings.token_type_ids",
                      "lm_head.decoder.weight", "lm_head.decoder.bias"),
        onnx_fusions="bert", positions_past_padding=True, builds_on="bert", spelling="roberta",
        positions_note=(" (RoBERTa's positions start past the padding id: its table has "
                        "pad_token_id + 1 rows more than the longest input it reads)")))

__all__ = ["RobertaConfig", "XLMRobertaConfig"]
