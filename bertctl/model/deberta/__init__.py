"""DeBERTa-v2 and -v3 (He et al., 2020 and 2021) as a bertctl architecture, saved as
transformers' DebertaV2 classes: config.py, modeling.py (disentangled attention over log-bucketed
relative positions, the encoder and its heads)."""

from bertctl.model.architectures import Architecture, register, heads_named
from bertctl.model.deberta.config import DebertaV2Config


register(Architecture(
    lora_targets=("query_proj", "value_proj"),
    name="deberta-v2", model_type="deberta-v2", config_class=DebertaV2Config,
    description="DeBERTa-v2's and v3's",
    heads=heads_named("bertctl.model.deberta.modeling", "DebertaV2"),
    encoder_name="deberta", bare_prefixes=("embeddings.", "encoder."),
    # transformers' index buffer and the tied decoder.
    ignored_keys=("deberta.embeddings.position_ids", "cls.predictions.decoder.weight",
                  "cls.predictions.decoder.bias"),
    positions_note=(" (DeBERTa reads relative positions: max_position_embeddings only "
                    "declares the longest input, and the buckets grow logarithmically past "
                    "it)")))

__all__ = ["DebertaV2Config"]
