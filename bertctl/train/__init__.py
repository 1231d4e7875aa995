"""The one training loop for pretraining and fine-tuning (loop.py), BERT's optimiser and
schedule (optim.py), exact-resume checkpoints (checkpoint.py) and torchrun/DDP plumbing
(distributed.py). No CLI or console code: progress is reported through callbacks.

Import from the modules themselves: this package imports nothing, so that `train.settings`
(which the stage settings of every command compose) does not pull in torch.
"""
