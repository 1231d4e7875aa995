"""What several stages share, by concern: `models` (opening, loading and writing models, and
the data inputs a stage records), `runtime` (threads and precision, applied as a
stage starts), `training` (the training stages' shared run) and
`task_training` (the job fine-tuning and distillation share)."""
