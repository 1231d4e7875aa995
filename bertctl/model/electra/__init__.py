"""ELECTRA's discriminators (Clark et al., 2020) as encoders, saved as transformers' Electra
classes: BERT's blocks (model/bert) under embeddings that may be narrower than the hidden
width (projected up), and ELECTRA's heads: config.py, modeling.py. pretraining.py is
bertctl's own ELECTRA pretraining (`--objective electra`), which trains a BERT-shaped
discriminator and saves it as a BERT."""

from bertctl.model.architectures import Architecture, register, heads_named
from bertctl.model.electra.config import ElectraConfig


register(Architecture(
    name="electra", model_type="electra", config_class=ElectraConfig,
    description="ELECTRA's discriminator",
    heads=heads_named("bertctl.model.electra.modeling", "Electra"),
    encoder_name="electra", bare_prefixes=("embeddings.", "embeddings_project.", "encoder."),
    # transformers' index buffers, and the generator's decoder, which is the word embeddings.
    ignored_keys=("electra.embeddings.position_ids", "electra.embeddings.token_type_ids",
                  "generator_lm_head.weight"),
    builds_on="bert"))

__all__ = ["ElectraConfig"]
