"""The data core: corpora, tokenizers, the pretraining data builder, batches."""
