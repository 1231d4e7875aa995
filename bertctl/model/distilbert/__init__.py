"""DistilBERT (Sanh et al., 2019) as a bertctl architecture, saved as transformers' DistilBert
classes: config.py (transformers' field names, dim / n_layers / n_heads, read under BERT's as
well), modeling.py (BERT's post-LN blocks under DistilBERT's names, no token types, no pooler)."""

from bertctl.model.architectures import Architecture, register, heads_named
from bertctl.model.distilbert.config import DistilBertConfig


register(Architecture(
    lora_targets=("q_lin", "v_lin"),
    name="distilbert", model_type="distilbert", config_class=DistilBertConfig,
    description="DistilBERT's",
    heads=heads_named("bertctl.model.distilbert.modeling", "DistilBert"),
    encoder_name="distilbert", bare_prefixes=("embeddings.", "transformer."),
    # transformers' index buffer, and the decoder, which is the word embeddings.
    ignored_keys=("distilbert.embeddings.position_ids", "vocab_projector.weight")))

__all__ = ["DistilBertConfig"]
