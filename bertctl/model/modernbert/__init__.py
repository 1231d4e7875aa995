"""ModernBERT (Warner et al., 2024) as a bertctl architecture, saved as transformers'
ModernBERT: config.py (the config and presets), modeling.py (the encoder and its heads)."""

from bertctl.model.architectures import Architecture, register, heads_named
from bertctl.model.modernbert.config import ModernBertConfig


register(Architecture(
    lora_targets=("Wqkv",),
    name="modernbert", model_type="modernbert", config_class=ModernBertConfig,
    description="ModernBERT's (pre-norm, GeGLU, rotary positions, no biases, local "
    "attention), saved as transformers' ModernBERT, trained by --objective mlm",
    # No next-sentence head and no ELECTRA discriminator: ModernBERT pretrains by masked LM.
    heads=heads_named("bertctl.model.modernbert.modeling", "ModernBert"),
    encoder_name="model", bare_prefixes=("embeddings.", "layers.", "final_norm."),
    ignored_keys=("decoder.weight",), position_table=False, rope_base="global_rope_theta",
    own_config_keys=("layer_types", "global_rope_theta", "rope_parameters", "norm_eps",
                     "local_attention", "hidden_activation"),
    positions_note=(" (ModernBERT has no position table: max_position_embeddings in its "
                    "config.json only declares the longest input, and raising it, up to 8192, "
                    "changes no weight; how well it reads lengths it never trained on is "
                    "for you to measure)")))

__all__ = ["ModernBertConfig"]
