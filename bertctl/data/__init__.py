"""The data core: corpora, tokenizers, the pretraining data builder, batches."""

# The label of a position that carries no target: the losses skip it (torch's cross-entropy
# default, and transformers' convention).
IGNORE_INDEX = -100
