"""`mlm`: masked LM alone, without next-sentence prediction (RoBERTa, Liu et al. 2019: NSP
does not help, and full-length sequences of continuous text do). It trains on data built with
--no-nsp (B is the real continuation of A, so each instance is one run of continuous text) and,
with --masking dynamic, new masks every epoch. The model is the architecture's masked LM
(`BertForMaskedLM`, `ModernBertForMaskedLM`), which transformers loads as such; its encoder
fine-tunes as any."""

from __future__ import annotations

from bertctl.objectives.base import Objective
from bertctl.objectives.registry import register


class MaskedLM(Objective):
    name = "mlm"
    title = "Masked LM alone (RoBERTa)"
    head = "masked_lm"
    nsp_data = False
    needs = "masked-LM metrics need its masked-LM head"

    def step_metrics(self, outputs, batch):
        from bertctl.objectives.scoring import pretraining_step_metrics

        return pretraining_step_metrics(outputs, batch)

    def evaluate(self, model, dataset, batch_size, device, precision, max_batches=None,
                 progress=None):
        from bertctl.objectives.scoring import evaluate_pretraining

        return evaluate_pretraining(model, dataset, batch_size, device, precision, max_batches,
                                    nsp=False, progress=progress)


MLM = register(MaskedLM())
