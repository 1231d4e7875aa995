"""The one training loop for pretraining and fine-tuning (loop.py), BERT's optimiser and
schedule (optim.py), exact-resume checkpoints (checkpoint.py) and torchrun/DDP plumbing
(distributed.py). No CLI or console code: progress is reported through callbacks."""

from bertctl.train import distributed
from bertctl.train.checkpoint import CorruptCheckpoint, seed_everything
from bertctl.train.loop import DataSource, Trainer, TrainingDiverged, train
from bertctl.train.optim import lr_at, make_optimizer, param_groups, warmup_steps
from bertctl.train.order import BatchOrder
from bertctl.train.records import METRICS_FILE, TrainResult
from bertctl.train.settings import TrainingSettings, TrainSettings

__all__ = [
    "METRICS_FILE", "BatchOrder", "CorruptCheckpoint", "DataSource", "TrainResult",
    "TrainSettings", "Trainer", "TrainingDiverged", "TrainingSettings", "distributed", "lr_at",
    "make_optimizer", "param_groups", "seed_everything", "train", "warmup_steps",
]
