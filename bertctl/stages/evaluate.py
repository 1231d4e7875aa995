"""`bertctl eval`: model + data -> eval artifact (metrics.json, predictions.tsv).

DATA is either a task data file, scored with the model's task head, or a pretrain-data artifact,
on whose split a pretraining checkpoint's masked-LM (and next-sentence) quality is measured.

What the model was trained for is read from the model, never re-typed: the task from its
`bertctl_task.json` (flags may override how this file is read), the label names from that file
or config.json's id2label, and the sequence length from the task file. A head that cannot answer
the task (2 labels for a 3-label task, a regression head for classification) is an error.
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import numpy as np

from bertctl import artifacts, console, evaluation, hardware
from bertctl.config import EvalConfig
from bertctl.errors import BertctlError
from bertctl.stages import common
from bertctl.stages.common import ModelSource, check_vocab, data_input, open_model

METRICS_FILE = "metrics.json"
PREDICTIONS_FILE = "predictions.tsv"
CLASSIFIER = "BertForSequenceClassification"
MULTIPLE_CHOICE = "BertForMultipleChoice"
_FORMATS = {".tsv": "tsv", ".csv": "csv", ".json": "json", ".jsonl": "json", ".parquet": "parquet"}


def run(config: EvalConfig, model_path: str, data_path: str, out: str,
        force: bool = False) -> artifacts.Outcome:
    hardware.set_threads(config.threads)
    source = open_model(model_path)
    data = Path(data_path)
    if not data.exists():
        raise BertctlError(f"{data}: no such data file or directory")
    if (data / artifacts.MANIFEST).is_file():
        manifest = artifacts.read_manifest(data)
        if manifest.kind != "pretrain-data":
            raise BertctlError(f"{data}: is a {manifest.kind} artifact; eval reads a task data "
                               f"file or a pretrain-data artifact")
        outcome = _run_pretraining(config, source, artifacts.read_artifact(data, "pretrain-data"),
                                   out, force)
    else:
        outcome = _run_task(config, source, data, out, force)
    _log_metrics(outcome.manifest.metrics)
    return outcome


def _device(config: EvalConfig):
    import torch

    if config.device == "cuda" and not torch.cuda.is_available():
        raise BertctlError("--device cuda: no CUDA device is available")
    if config.device == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    return torch.device(config.device)


# ---------------------------------------------------------------------------------------------
# Task data

def _run_task(config: EvalConfig, source: ModelSource, data: Path, out: str,
              force: bool) -> artifacts.Outcome:
    from bertctl.data.tasks import encode_examples, read_examples

    if config.split is not None:
        raise BertctlError(f"--split applies to pretrain-data artifacts; {data} is a task data "
                           f"file (one split already)")
    spec = resolve_task(config, source)
    label_list = resolve_labels(config, source, spec)
    check_head(source, spec, label_list)
    data = _task_file(spec, data)
    spec = _fit_format(spec, data)
    max_len = config.max_seq_length or int((source.task or {}).get("max_seq_length") or 128)
    max_pos = int(source.hf_config.get("max_position_embeddings", 512))
    if max_len > max_pos:
        raise BertctlError(f"max_seq_length {max_len} exceeds the model's "
                           f"{max_pos} position embeddings")
    tok, _ = source.tokenizer()
    check_vocab(source.vocab_size, tok.get_vocab_size(), str(source.path))
    device = _device(config)
    inputs = [source.ref, data_input(data)]

    def build(tmp: Path) -> dict[str, Any]:
        examples = read_examples(spec, data, label_list=label_list)
        features = encode_examples(examples, tok, max_len)
        console.log(f"{data}: {len(features):,} examples, task {spec.name} ({spec.family}), "
                    f"{'labelled' if features.labels is not None else 'no labels: predictions only'}"
                    f"{', labels ' + ', '.join(label_list) if label_list else ''}")
        model = _load_task_model(source)
        model.to(device)
        started = time.monotonic()
        with console.progress("evaluating", total=len(features), unit="examples") as bar:
            metrics, predictions = evaluation.evaluate_task(
                model, spec, features, label_list, config.batch_size, device, config.precision,
                progress=lambda n: bar.update(n))
        seconds = time.monotonic() - started
        metrics = evaluation.json_safe(metrics)
        (tmp / METRICS_FILE).write_text(json.dumps(metrics, indent=2) + "\n", encoding="utf-8")
        write_predictions(tmp / PREDICTIONS_FILE, spec, predictions, label_list)
        return {"metrics": metrics, "examples": len(features),
                "labelled": features.labels is not None, "model": str(source.path),
                "model_id": source.ref.id, "data": str(data), "task": spec.name,
                "family": spec.family, "metric": spec.metric,
                "main_metric": _main_metric(spec) if features.labels is not None else None,
                "labels": list(label_list) if label_list else None, "max_seq_length": max_len,
                "precision": config.precision, "device": str(device),
                "seconds": round(seconds, 3),
                "examples_per_second": round(len(features) / seconds, 1) if seconds else None}

    return artifacts.produce("eval", config, inputs, out, build, force=force)


def _main_metric(spec) -> str:
    from bertctl.metrics import main_metric

    return main_metric(spec.metric)


def resolve_task(config: EvalConfig, source: ModelSource):
    """The TaskSpec to read DATA with: the model's task, with the flags given replacing its
    fields; a preset named by --task instead; or the flags alone for a model without one."""
    from bertctl.data.tasks import TaskSpec, make_task_spec

    flags = {"family": config.family, "text_columns": config.text_column,
             "label_column": config.label_column, "context_column": config.context_column,
             "choice_columns": config.choice_columns}
    flags = {k: v for k, v in flags.items() if v is not None}
    if config.task is not None:
        return make_task_spec(config.task, **flags)
    if source.task is not None:
        try:
            base = TaskSpec(**source.task["spec"]).model_dump()
        except Exception as exc:  # noqa: BLE001 - a task file of another version or edited by hand
            raise BertctlError(f"{source.path / 'bertctl_task.json'}: cannot read the task: "
                               f"{' '.join(str(exc).split())}") from None
        if "family" in flags and flags["family"] != base["family"]:
            raise BertctlError(f"{source.path}: the model was fine-tuned for a '{base['family']}' "
                               f"task, not '{flags['family']}'")
        return make_task_spec(None, **{**base, **flags})
    if "family" in flags:
        return make_task_spec(None, **flags)
    raise BertctlError(f"{source.path}: the model has no task file (bertctl_task.json); give the "
                       f"task with --task (e.g. glue/sst2) or --family and the columns")


def _task_file(spec, data: Path) -> Path:
    """A preset task's data directory (GLUE's SST-2/) stands for its dev file; any other
    directory must be one written by `datasets`' save_to_disk."""
    if not data.is_dir() or common.is_saved_dataset(data):
        return data
    found = spec.split_files(data)
    if "dev" in found:
        console.log(f"{data}: evaluating the task's dev file {found['dev'].name}")
        return found["dev"]
    if found:
        raise BertctlError(f"{data}: give one of the task's files: "
                           f"{', '.join(str(p) for p in found.values())}")
    return data  # read_examples explains what a saved dataset directory needs


def _fit_format(spec, path: Path):
    """A task read from the model describes its training file's layout (GLUE: TSV without
    quoting, CoLA without a header); when DATA is plainly another format, read it as that."""
    from bertctl.data.tasks import TaskSpec

    if spec.format == "auto":
        return spec
    detected = "arrow" if path.is_dir() else next(
        (_FORMATS[s] for s in reversed([s.lower() for s in path.suffixes]) if s in _FORMATS), None)
    if detected is None or detected == spec.format:
        return spec
    return TaskSpec(**{**spec.model_dump(), "format": "auto", "quoting": None, "header": True,
                       "column_names": None})


def _placeholders(names: list[str]) -> bool:
    return all(n == f"LABEL_{i}" for i, n in enumerate(names))


def _model_labels(source: ModelSource) -> tuple[str, ...] | None:
    """The label names the model was trained with (task file, else real id2label names)."""
    if source.task is not None and source.task.get("label_list"):
        return tuple(str(x) for x in source.task["label_list"])
    id2label = source.hf_config.get("id2label")
    if isinstance(id2label, dict) and id2label:
        try:
            names = [str(id2label[k]) for k in sorted(id2label, key=int)]
        except (ValueError, TypeError):
            return None
        if not _placeholders(names):
            return tuple(names)
    return None


def resolve_labels(config: EvalConfig, source: ModelSource, spec) -> tuple[str, ...] | None:
    """Classification label names in index order, always the model's own; --labels (or a
    preset's labels) only name the classes of a model whose config.json has placeholders."""
    from bertctl.data.tasks import _label_key

    if not spec.is_classification:
        return None
    own = _model_labels(source)
    given = tuple(_label_key(x) for x in config.labels) if config.labels else None
    if own is not None:
        if given is not None and given != own:
            raise BertctlError(f"--labels {list(given)} disagree with the labels the model was "
                               f"trained with {list(own)} (read from {source.path})")
        return own
    if given is not None:
        return given
    if spec.labels is not None:
        return spec.labels
    n = _num_labels(source.hf_config)
    return tuple(f"LABEL_{i}" for i in range(n or 2))


def _num_labels(hf_config: dict) -> int | None:
    from bertctl.model import BertForSequenceClassification

    return BertForSequenceClassification.kwargs_from_hf(hf_config).get("num_labels")


def check_head(source: ModelSource, spec, label_list: tuple[str, ...] | None) -> None:
    """BertctlError unless the model's head can answer `spec`."""
    cfg = source.hf_config
    arch = cfg.get("architectures") or []
    where = str(source.path)
    if spec.family == "multiple_choice":
        if MULTIPLE_CHOICE not in arch:
            raise BertctlError(f"{where}: task {spec.name} is multiple choice but the model is "
                               f"{_arch_name(arch)}, not a {MULTIPLE_CHOICE}")
        return
    if CLASSIFIER not in arch:
        hint = (" (fine-tune it first with bertctl finetune)"
                if MULTIPLE_CHOICE not in arch else "")
        raise BertctlError(f"{where}: task {spec.name} needs a {CLASSIFIER} head but the model "
                           f"is {_arch_name(arch)}{hint}")
    problem = cfg.get("problem_type")
    if problem == "multi_label_classification":
        raise BertctlError(f"{where}: a multi-label classifier; bertctl tasks have one label per "
                           f"example")
    num = _num_labels(cfg) or 2
    regression = problem == "regression" or (problem is None and num == 1)
    if spec.family == "regression" and not regression:
        raise BertctlError(f"{where}: task {spec.name} is a regression but the model is a "
                           f"{num}-label classifier")
    if spec.family != "regression":
        if regression:
            raise BertctlError(f"{where}: task {spec.name} is a classification but the model "
                               f"has a regression head (one output)")
        for labels in (spec.labels, label_list):  # the task's own labels, then the model's
            if labels is not None and len(labels) != num:
                raise BertctlError(f"{where}: the model is a {num}-label classifier but task "
                                   f"{spec.name} has {len(labels)} labels "
                                   f"({', '.join(labels)})")


def _arch_name(arch: list[str]) -> str:
    return "/".join(arch) if arch else "a bare encoder (no architectures in config.json)"


def _load_task_model(source: ModelSource):
    model, report = source.load()
    problems = report.missing + report.mismatched
    if problems:
        shown = ", ".join(problems[:4]) + (f", ... ({len(problems)} in all)"
                                           if len(problems) > 4 else "")
        raise BertctlError(f"{source.path}: the checkpoint lacks trained weights the model needs "
                           f"({shown}); it would predict with random ones")
    if report.unexpected:
        console.log(f"{source.path}: ignored {len(report.unexpected)} checkpoint entries not "
                    f"used by {type(model).__name__}")
    return model


def write_predictions(path: Path, spec, predictions: np.ndarray,
                      label_list: tuple[str, ...] | None) -> None:
    """GLUE's submission format: a header, then `index<TAB>prediction` per example in file
    order; class names for classification, the score for regression, the choice index for
    multiple choice."""
    if spec.family == "regression":
        values = [str(np.float32(v)) for v in predictions]
    elif spec.is_classification and label_list:
        values = [label_list[int(i)] for i in predictions]
    else:
        values = [str(int(i)) for i in predictions]
    with open(path, "w", encoding="utf-8", newline="\n") as f:
        f.write("index\tprediction\n")
        for i, v in enumerate(values):
            f.write(f"{i}\t{v}\n")


# ---------------------------------------------------------------------------------------------
# Pretraining data

_TASK_FLAGS = ("task", "family", "text_column", "label_column", "context_column",
               "choice_columns", "labels", "max_seq_length")


def _run_pretraining(config: EvalConfig, source: ModelSource, art: artifacts.Artifact, out: str,
                     force: bool) -> artifacts.Outcome:
    from bertctl.data.pretraining import PretrainingDataset, read_pretraining_info

    given = [f"--{k.replace('_', '-')}" for k in _TASK_FLAGS if getattr(config, k) is not None]
    if given:
        raise BertctlError(f"{' '.join(given)}: task settings apply to task data files, not to "
                           f"the pretrain-data artifact {art.path}")
    split = config.split or "validation"
    info = read_pretraining_info(art.path)
    if int(info.stats.get(split, {}).get("instances", 0)) == 0:
        hint = (" (it was built with validation_fraction 0); evaluate on --split train, or "
                "rebuild it with --validation-fraction" if split == "validation" else "")
        raise BertctlError(f"{art.path}: the {split} split is empty{hint}")
    check_pretraining_agreement(source, info)
    device = _device(config)
    inputs = [source.ref, art.as_input("data")]

    def build(tmp: Path) -> dict[str, Any]:
        dataset = PretrainingDataset(art.path, split)
        model, nsp = _load_pretraining_model(source, dataset.nsp)
        model.to(device)
        console.log(f"{art.path}: {split} split, {len(dataset):,} instances"
                    f"{', with next-sentence labels' if dataset.nsp else ''}")
        started = time.monotonic()
        with console.progress("evaluating", total=len(dataset), unit="instances") as bar:
            result = evaluation.evaluate_pretraining(
                model, dataset, config.batch_size, device, config.precision, nsp=nsp,
                progress=lambda n: bar.update(n))
        seconds = time.monotonic() - started
        examples, masked = result.pop("examples"), result.pop("masked_tokens")
        metrics = evaluation.json_safe(result)
        (tmp / METRICS_FILE).write_text(json.dumps(metrics, indent=2) + "\n", encoding="utf-8")
        return {"metrics": metrics, "examples": examples, "masked_tokens": masked,
                "model": str(source.path), "model_id": source.ref.id, "data": str(art.path),
                "task": "pretraining", "split": split, "precision": config.precision,
                "device": str(device), "seconds": round(seconds, 3)}

    return artifacts.produce("eval", config, inputs, out, build, force=force)


def check_pretraining_agreement(source: ModelSource, info) -> None:
    """The model must read the data's token ids as the data's tokenizer wrote them."""
    where = f"{source.path} and {info.path}"
    model_vocab = source.vocab_size
    if model_vocab < info.vocab_size:
        raise BertctlError(f"{where}: the model's vocabulary ({model_vocab} tokens) is smaller "
                           f"than the data's ({info.vocab_size})")
    pad = source.hf_config.get("pad_token_id")
    if pad is not None and int(pad) != info.special_ids.get("[PAD]", pad):
        raise BertctlError(f"{where}: the model's pad_token_id is {pad} but the data's [PAD] "
                           f"is {info.special_ids['[PAD]']}")
    max_len = int(info.settings.get("max_seq_length", 0))
    max_pos = int(source.hf_config.get("max_position_embeddings", 512))
    if max_len > max_pos:
        raise BertctlError(f"{where}: the data's instances are up to {max_len} tokens but the "
                           f"model has {max_pos} position embeddings")
    has_tokenizer = any((source.path / n).is_file() for n in ("tokenizer.json", "vocab.txt"))
    if not has_tokenizer:
        if model_vocab != info.vocab_size:
            raise BertctlError(f"{where}: the model's vocabulary has {model_vocab} tokens but "
                               f"the data's {info.vocab_size}")
        return
    tok, _ = source.tokenizer()
    if tok.get_vocab_size() != info.vocab_size:
        raise BertctlError(f"{where}: the model's tokenizer has {tok.get_vocab_size()} tokens "
                           f"but the data was built with {info.vocab_size}")
    for name, i in info.special_ids.items():
        if tok.token_to_id(name) != i:
            raise BertctlError(f"{where}: {name} is id {tok.token_to_id(name)} in the model's "
                               f"tokenizer but {i} in the data")
    data_tok = info.path / "tokenizer.json"
    if data_tok.is_file():
        from tokenizers import Tokenizer

        theirs = Tokenizer.from_file(str(data_tok)).get_vocab(with_added_tokens=True)
        ours = tok.get_vocab(with_added_tokens=True)
        differ = sorted(i for t, i in theirs.items() if ours.get(t) != i)
        if differ:
            by_id = {i: t for t, i in ours.items()}
            data_by_id = {i: t for t, i in theirs.items()}
            i = differ[0]
            raise BertctlError(f"{where}: the model's tokenizer and the data's differ in "
                               f"{len(differ)} tokens (id {i}: {by_id.get(i)!r} in the model, "
                               f"{data_by_id[i]!r} in the data)")


def _load_pretraining_model(source: ModelSource, data_nsp: bool):
    from bertctl.model import BertForPreTraining

    model, report = source.load(BertForPreTraining)
    missing = report.missing + report.mismatched
    mlm = [k for k in missing if not k.startswith(("cls.seq_relationship", "bert.pooler"))]
    if mlm:
        arch = "/".join(source.hf_config.get("architectures") or []) or "a bare encoder"
        what = ("no masked-LM head (cls.predictions)" if any(k.startswith("cls.predictions")
                                                            for k in mlm)
                else f"no weights for {', '.join(mlm[:3])}")
        raise BertctlError(f"{source.path}: the checkpoint ({arch}) has {what}; pretraining "
                           f"metrics need a BertForPreTraining or BertForMaskedLM checkpoint")
    nsp = data_nsp and not missing
    if data_nsp and not nsp:
        console.log(f"{source.path}: the checkpoint has no next-sentence head; scoring the "
                    f"masked LM only")
    return model, nsp


# ---------------------------------------------------------------------------------------------

def _log_metrics(metrics: dict[str, Any]) -> None:
    for name, value in metrics.items():
        if name == "confusion_matrix" and isinstance(value, dict):
            names = [str(n) for n in value["labels"]]
            width = max(len(n) for n in names + ["true \\ pred"])
            cells = [max(len(n), max(len(str(r[j])) for r in value["matrix"]))
                     for j, n in enumerate(names)]
            console.log("confusion matrix (rows: true label, columns: prediction):")
            console.log("  " + "true \\ pred".ljust(width) + "  "
                        + "  ".join(n.rjust(c) for n, c in zip(names, cells)))
            for n, row in zip(names, value["matrix"]):
                console.log("  " + n.ljust(width) + "  "
                            + "  ".join(str(x).rjust(c) for x, c in zip(row, cells)))
        elif isinstance(value, float):
            console.log(f"{name}: {value:.4f}")
        else:
            console.log(f"{name}: {value}")
