"""ModernBERT (Warner et al., 2024) as a bertctl architecture, saved as transformers'
ModernBERT: config.py (the config and presets), encoder.py, heads.py."""

from bertctl.model.architectures import Architecture, register
from bertctl.model.modernbert.config import ModernBertConfig
from bertctl.model.modernbert.encoder import ModernBertModel
from bertctl.model.modernbert.heads import (
    ModernBertForEmbedding,
    ModernBertForMaskedLM,
    ModernBertForMultipleChoice,
    ModernBertForQuestionAnswering,
    ModernBertForSequenceClassification,
    ModernBertForTokenClassification,
)

register(Architecture(
    name="modernbert", model_type="modernbert", config_class=ModernBertConfig,
    # No next-sentence head and no ELECTRA discriminator: ModernBERT pretrains by masked LM.
    heads={"encoder": ModernBertModel, "masked_lm": ModernBertForMaskedLM,
           "sequence_classification": ModernBertForSequenceClassification,
           "multiple_choice": ModernBertForMultipleChoice,
           "question_answering": ModernBertForQuestionAnswering,
           "token_classification": ModernBertForTokenClassification,
           "embedding": ModernBertForEmbedding},
    encoder_name="model", bare_prefixes=("embeddings.", "layers.", "final_norm."),
    ignored_keys=("decoder.weight",),
    positions_note=(" (ModernBERT has no position table: max_position_embeddings in its "
                    "config.json only declares the longest input, and raising it, up to 8192, "
                    "changes no weight; how well it reads lengths it never trained on is "
                    "for you to measure)")))

__all__ = ["ModernBertConfig", "ModernBertModel"]
