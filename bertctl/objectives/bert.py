"""`bert`: BERT's own pretraining (Devlin et al.): masked LM over 15% of the tokens (80% [MASK],
10% random, 10% kept) plus next-sentence prediction on sentence pairs, half of whose B segments
come from another document; on data built with --no-nsp, the paper's ablation: masked LM alone.
The model is `BertForPreTraining`, which transformers loads as such."""

from __future__ import annotations

from bertctl.errors import BertctlError
from bertctl.objectives.base import Objective
from bertctl.objectives.registry import register
from bertctl import console


class Bert(Objective):
    name = "bert"
    title = "Masked LM + next-sentence prediction (BERT)"
    head = "pretraining"

    def unused_parameters(self, data) -> bool:
        return not data.nsp   # MLM-only data leaves the NSP head without gradients

    def step_metrics(self, outputs, batch):
        from bertctl.objectives.scoring import pretraining_step_metrics

        return pretraining_step_metrics(outputs, batch)

    def evaluate(self, model, dataset, batch_size, device, precision, max_batches=None,
                 progress=None, nsp=None):
        from bertctl.objectives.scoring import evaluate_pretraining

        return evaluate_pretraining(model, dataset, batch_size, device, precision, max_batches,
                                    nsp=nsp, progress=progress)

    def load_for_evaluation(self, source, dataset):
        """The checkpoint as a BertForPreTraining, scored on next sentences where the data has
        pairs and the checkpoint an NSP head."""

        model, report = source.load(self.head)
        missing = report.missing + report.mismatched
        mlm = [k for k in missing if not k.startswith(("cls.seq_relationship", "bert.pooler"))]
        if mlm:
            arch = "/".join(source.hf_config.get("architectures") or []) or "a bare encoder"
            what = ("no masked-LM head (cls.predictions)" if any(k.startswith("cls.predictions")
                                                                for k in mlm)
                    else f"no weights for {', '.join(mlm[:3])}")
            raise BertctlError(f"{source.path}: the checkpoint ({arch}) has {what}; pretraining "
                               f"metrics need a pretraining or masked-LM checkpoint")
        nsp = dataset.nsp and not missing
        if dataset.nsp and not nsp:
            console.log(f"{source.path}: the checkpoint has no next-sentence head; scoring the "
                        f"masked LM only")
        return model, {"nsp": nsp}


BERT = register(Bert())
