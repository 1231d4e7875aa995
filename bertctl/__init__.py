"""bertctl: BERT pretraining and fine-tuning pipelines from the command line."""

__version__ = "0.1.0"
