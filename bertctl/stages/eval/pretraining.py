"""`bertctl eval MODEL DATA` on a pretrain-data artifact: the masked-LM (and next-sentence)
quality of a pretraining checkpoint on one split of the data, into an eval artifact."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

from bertctl import console, objectives

from bertctl.stages.common import agreement
from bertctl.contract import artifacts
from bertctl.metrics import json_safe
from bertctl.stages.settings.eval import EvalSettings
from bertctl.errors import BertctlError, NonFiniteOutputs
from bertctl.model import architectures
from bertctl.stages.common.models import ModelSource
from bertctl.data.pretraining.dataset import PretrainingDataset, read_pretraining_info

METRICS_FILE = artifacts.METRICS_FILE

_TASK_FLAGS = ("task", "family", "text_column", "label_column", "context_column",
               "choice_columns", "labels", "max_seq_length", "header")


def run(settings: EvalSettings, target: artifacts.Target, source: ModelSource,
        art: artifacts.Artifact) -> artifacts.Outcome:

    given = [f"--{k.replace('_', '-')}" for k in _TASK_FLAGS if getattr(settings, k) is not None]
    if given:
        raise BertctlError(f"{' '.join(given)}: task settings apply to task data files, not to "
                           f"the pretrain-data artifact {art.path}")
    split = settings.split or "validation"
    info = read_pretraining_info(art.path)
    if int(info.stats.get(split, {}).get("instances", 0)) == 0:
        hint = (" (it was built with validation_fraction 0); evaluate on --split train, or "
                "rebuild it with --validation-fraction" if split == "validation" else "")
        raise BertctlError(f"{art.path}: the {split} split is empty{hint}")
    check_pretraining_agreement(source, info)
    device, precision, _ = source.runtime(settings.device, settings.precision)
    inputs = [source.ref, art.as_input("data")]

    objective = objectives.for_checkpoint(source.hf_config)

    def build(tmp: Path) -> dict[str, Any]:
        dataset = PretrainingDataset(art.path, split)
        model, options = objective.load_for_evaluation(source, dataset)
        model.to(device)
        console.log(f"{art.path}: {split} split, {len(dataset):,} instances"
                    f"{', with next-sentence labels' if dataset.nsp else ''}")
        started = time.monotonic()
        with console.progress("evaluating", total=len(dataset), unit="instances") as bar:
            try:
                result = objective.evaluate(model, dataset, settings.batch_size, device,
                                            precision, progress=lambda n: bar.update(n),
                                            **options)
            except NonFiniteOutputs as exc:
                raise exc.named(f"{source.path} on {art.path}") from None
        seconds = time.monotonic() - started
        examples, masked = result.pop("examples"), result.pop("masked_tokens")
        metrics = json_safe(result)
        (tmp / METRICS_FILE).write_text(json.dumps(metrics, indent=2) + "\n", encoding="utf-8")
        return {"metrics": metrics, "examples": examples, "masked_tokens": masked,
                "model": str(source.path), "model_id": source.ref.id, "data": str(art.path),
                "task": "pretraining", "objective": objective.name, "split": split,
                "precision": settings.precision,
                "device": str(device), "seconds": round(seconds, 3)}

    return artifacts.produce("eval", settings, inputs, target, build)


def check_pretraining_agreement(source: ModelSource, info) -> None:
    """The model must read the data's token ids as the data's tokenizer wrote them."""
    where = f"{source.path} and {info.path}"
    tok = source.tokenizer()[0] if source.has_tokenizer() else None
    if tok is None and source.vocab_size != info.vocab_size:  # nothing else to compare
        raise BertctlError(f"{where}: the model's vocabulary has {source.vocab_size} tokens but "
                           f"the data's {info.vocab_size}")
    agreement.check(where, model_vocab=source.vocab_size,
                    max_positions=architectures.of_config(
                        source.hf_config, str(source.path)).longest_input(source.hf_config),
                    pad_id=source.hf_config.get("pad_token_id"), data_vocab=info.vocab_size,
                    seq_length=int(info.settings.get("max_seq_length", 0)),
                    data_special_ids=info.special_ids, model_tokenizer=tok,
                    data_tokenizer=info.path / "tokenizer.json")
