"""The README.md model card every model artifact carries, written from its lineage.

Facts only: each line comes from the artifact's own settings, stats, metrics and metrics.jsonl,
or from its ancestors' manifests (read from where the lineage recorded them, when they are
still there). A fact that is not known is left out, never filled with prose.
"""

from __future__ import annotations

import datetime as _dt
import json
from pathlib import Path
from typing import Any

import bertctl
from bertctl.contract import lineage
from bertctl.contract.artifacts import InputRef, Manifest
from bertctl.contract.artifacts import FORMAT, SCHEMA_VERSIONS, environment
from bertctl.contract.exports import ExportFacts

README = "README.md"


def _num(value: Any) -> str:
    """Integers with thousands separators, floats to 6 significant digits."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return str(value)
    return f"{value:,}" if isinstance(value, int) else f"{value:.6g}"


def _table(rows: list[tuple[str, Any]], header: tuple[str, str] = ("", "")) -> list[str]:
    lines = [f"| {header[0]} | {header[1]} |", "|---|---|"]
    lines += [f"| {k} | {_num(v)} |" for k, v in rows if v is not None]
    return lines + [""]


def _metrics_rows(metrics: dict[str, Any]) -> list[tuple[str, Any]]:
    return [(k, v) for k, v in metrics.items()
            if k not in ("split", "step", "epoch") and isinstance(v, (int, float))
            and not isinstance(v, bool)]


def _history(path: Path) -> list[dict[str, Any]]:
    file = path / "metrics.jsonl"
    if not file.is_file():
        return []
    return [json.loads(line) for line in file.read_text(encoding="utf-8").splitlines() if line]


def tokens_trained(history: list[dict[str, Any]]) -> int | None:
    """Non-pad tokens trained on, summed over the logged intervals (which cover every step)."""
    train = [r for r in history if r.get("split", "train") == "train"]
    if not train or any("tokens" not in r for r in train):
        return None
    return sum(int(r["tokens"]) for r in train)


def _corpus(inputs: list[InputRef]) -> list[str]:
    files = [(f, users) for f, users in lineage.source_files(inputs) if f.role == "corpus"]
    if not files:
        return []
    lines = ["## Corpus", "", "| file | bytes | sha256 | read by |", "|---|---|---|---|"]
    lines += [f"| {Path(f.path).name} | {_num(f.size)} | {f.id} | {', '.join(users)} |"
              for f, users in files]
    total = sum(f.size or 0 for f, _ in files)
    lines += ["", f"{len(files)} file(s), {_num(total)} bytes.", ""]
    return lines


def _tokenizer(inputs: list[InputRef], stats: dict[str, Any]) -> list[str]:
    found = lineage.find(inputs, "tokenizer")
    facts = dict(stats.get("tokenizer") or {})
    rows: list[tuple[str, Any]] = []
    if found is not None:
        ref, manifest = found
        rows.append(("tokenizer artifact", ref.id))
        if manifest is not None:
            facts = {**manifest.stats.get("tokenizer", {}), **facts}
            rows += [(k.replace("_", " "), manifest.stats.get(k)) for k in
                     ("unk_rate", "pieces_per_word")]
            rows += [(f"corpus {k}", manifest.stats.get(k)) for k in
                     ("documents", "sentences", "characters")]
    if not facts and not rows:
        return []
    rows[1:1] = [("vocab_size", facts.get("vocab_size")), ("lowercase", facts.get("lowercase"))]
    return ["## Tokenizer", "", *_table(rows, ("fact", "value"))]


def _pretrain_data(inputs: list[InputRef]) -> list[str]:
    found = lineage.find(inputs, "pretrain-data")
    if found is None:
        return []
    ref, manifest = found
    config = ref.config or {}
    rows = [("pretrain-data artifact", ref.id)]
    rows += [(k, config.get(k)) for k in ("max_seq_length", "masking", "masked_lm_prob",
                                          "dupe_factor", "whole_word_mask", "no_nsp")]
    if manifest is not None:
        for split, s in manifest.stats.get("splits", {}).items():
            rows += [(f"{split} instances", s.get("instances")), (f"{split} tokens", s.get("tokens"))]
    return ["## Pretraining data", "", *_table(rows, ("fact", "value"))]


def _pretraining(config: dict[str, Any], stats: dict[str, Any], metrics: dict[str, Any],
                 history: list[dict[str, Any]], title: str) -> list[str]:
    rows = [("steps", stats.get("step")), ("schedule length", stats.get("total_steps")),
            ("epochs", stats.get("epochs")), ("tokens trained on", tokens_trained(history))]
    fit = stats.get("batch_fit")
    batch = (f"{fit['batch_size']} (fitted to the time budget: {config.get('batch_size')} "
             f"asked, at least {fit['min_steps']} steps)" if fit else config.get("batch_size"))
    rows += [("batch_size", batch)] + [(k, config.get(k)) for k in (
        "lr", "warmup", "weight_decay", "precision", "seed")]
    rows.append(("parameters", stats.get("parameters")))
    lines = [title, "", *_table(rows, ("fact", "value"))]
    if metrics:
        lines += [f"Validation metrics at step {metrics.get('step', stats.get('step'))}:", "",
                  *_table(_metrics_rows(metrics), ("metric", "value"))]
    return lines


def _finetuning(manifest: Manifest) -> list[str]:
    stats, config = manifest.stats, manifest.config
    data = [(i.role, i) for i in manifest.inputs if i.role in ("train", "dev")]
    rows = [("task", stats.get("task")), ("family", stats.get("family")),
            ("labels", ", ".join(stats["label_list"]) if stats.get("label_list") else None),
            ("training examples", stats.get("train_examples")),
            ("dev examples", stats.get("dev_examples")),
            *[(f"{role} file", f"{Path(i.path).name} (sha256 {i.id})") for role, i in data],
            ("steps", stats.get("step")), ("epochs", stats.get("epochs")),
            ("kept weights", f"{stats.get('selection')}, step {stats.get('selected_step')}"),
            *[(k, config.get(k)) for k in ("batch_size", "lr", "warmup", "max_seq_length",
                                           "precision", "seed")]]
    lines = ["## Fine-tuning", "", *_table(rows, ("fact", "value"))]
    if manifest.metrics:
        lines += ["Dev metrics of the kept weights:", "",
                  *_table(_metrics_rows(manifest.metrics), ("metric", "value"))]
    return lines + _distillation(manifest)


def _distillation(manifest: Manifest) -> list[str]:
    d, config = manifest.stats.get("distillation"), manifest.config
    if not d:
        return []
    rows = [("teacher", f"{d.get('teacher')} ({d.get('teacher_id')})"),
            ("student", d.get("student")),
            ("layers, width", f"{d.get('student_layers')}, {d.get('student_hidden_size')}"),
            ("parameters (student / teacher)",
             f"{d.get('student_parameters'):,} / {d.get('teacher_parameters'):,}"),
            *[(k, config.get(k)) for k in ("temperature", "alpha", "hidden_loss")],
            ("layer map (student:teacher)",
             ", ".join(f"{s}:{t}" for s, t in d.get("layer_map") or []) or None)]
    lines = ["## Distillation", "", *_table(rows, ("fact", "value"))]
    teacher = d.get("teacher_metrics") or {}
    shared = [k for k in teacher if k in (manifest.metrics or {})]
    if shared:
        lines += ["The teacher on the same dev file:", "",
                  *_table([(k, f"{teacher[k]:.4g} (student {manifest.metrics[k]:.4g})")
                           for k in shared if isinstance(teacher[k], (int, float))],
                          ("metric", "teacher"))]
    return lines


def _stage(stats: dict[str, Any]) -> str:
    return ("distill" if "distillation" in stats else "finetune" if "task" in stats
            else "pretrain")


def _model_class(stats: dict[str, Any]) -> str:
    """transformers' class of a model (manifests before #54 held it as "architecture")."""
    return stats.get("model_class") or stats.get("architecture", "BertModel")


def render(manifest: Manifest, directory: Path, history: list[dict[str, Any]]) -> str:
    """The model card of a model artifact at `directory`, with its metrics.jsonl records."""
    stats = manifest.stats
    arch = _model_class(stats)
    finetuned = "task" in stats
    lines = [f"# {arch} {manifest.id}", "",
             f"A bertctl model artifact made by `bertctl {_stage(stats)}`"
             f" (bertctl {manifest.bertctl_version}) on {manifest.created_at[:10]}. Its lineage "
             f"is in `artifact.json` (`bertctl inspect` shows it); this card is written from it.",
             ""]
    lines += _corpus(manifest.inputs) + _tokenizer(manifest.inputs, stats)
    lines += _pretrain_data(manifest.inputs)
    if finetuned:
        found = lineage.find(manifest.inputs, "model")
        if found is not None and found[1] is not None:
            ref, parent = found
            lines += _pretraining(parent.config, parent.stats, parent.metrics,
                                  _history(Path(ref.path)),
                                  f"## Base model {ref.id} ({_model_class(parent.stats)})")
        elif found is None:
            base = next((i for i in manifest.inputs if i.role == "model"), None)
            if base is not None:
                lines += ["## Base model", "", f"{base.kind} {Path(base.path).name} "
                          f"(sha256 {base.id})", ""]
        lines += _finetuning(manifest)
    else:
        init = next((i for i in manifest.inputs if i.role == "init"), None)
        lines += _pretraining(manifest.config, stats, manifest.metrics, history,
                              "## Pretraining")
        if init is not None:
            lines += [f"Initialised from {init.kind} {init.id} ({init.path}).", ""]
    env = {"bertctl": manifest.bertctl_version, **manifest.environment}
    lines += ["## Environment", "", *_table(list(env.items()), ("package", "version"))]
    lines += ["## Loading it in transformers", "", "```python",
              f"from transformers import BertTokenizerFast, {arch}", "",
              f"tokenizer = BertTokenizerFast.from_pretrained({str(directory)!r})",
              f"model = {arch}.from_pretrained({str(directory)!r})", "```", ""]
    return "\n".join(lines)


def write(tmp: Path, artifact_id: str, out_path: Path, config: dict[str, Any],
          inputs: list[InputRef], stats: dict[str, Any]) -> None:
    """Write README.md into a model artifact being built in `tmp` (metrics.jsonl already
    there), bound for `out_path`. The manifest is not written yet, so the card is made from
    what it will hold."""

    draft = Manifest(format=FORMAT, schema_version=SCHEMA_VERSIONS["model"], kind="model",
                     id=artifact_id, bertctl_version=bertctl.__version__,
                     created_at=_dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
                     config=config, inputs=inputs, files={}, environment=environment(),
                     stats={k: v for k, v in stats.items() if k != "metrics"},
                     metrics=stats.get("metrics", {}))
    text = render(draft, out_path.resolve(), _history(tmp))
    (tmp / README).write_text(text, encoding="utf-8")


def render_export(stats: dict[str, Any], config: dict[str, Any]) -> str:
    """The model card of an export artifact: what the graph is and, after --check, the
    quality it kept and the latency it gained, measured."""
    onnx, check = ExportFacts.from_stats(stats["onnx"]), stats.get("check")
    quant = (f"int8 dynamic ({'per channel' if onnx.per_channel else 'per tensor'})"
             if onnx.quantize == "int8" else "none (fp32)")
    axes = "batch x choices x sequence" if onnx.input_rank == 3 else "batch x sequence"
    fused = ", ".join(f"{k} {v}" for k, v in onnx.fused.items()) or "none"
    lines = [f"# ONNX export of {onnx.graph} {stats.get('model_id', '')}".rstrip(), "",
             f"A bertctl export artifact made by `bertctl export` (bertctl {bertctl.__version__})"
             f" from the model at {stats.get('model')}. Its lineage is in `artifact.json`; this "
             f"card is written from it.", "", "## The graph", "",
             *_table([("file", "model.onnx"), ("opset", onnx.opset),
                      ("inputs", f"{', '.join(onnx.inputs)} (int64, {axes})"),
                      ("outputs", ", ".join(onnx.outputs)), ("quantization", quant),
                      ("fused operators", fused), ("bytes", onnx.bytes)], ("fact", "value"))]
    if check:
        lat = check["latency_ms"]
        rows = [(f"{check['metric']} on {Path(check['data']).name} ({check['examples']:,} "
                 f"examples)", check["pytorch_value"], check["export_value"]),
                (f"latency at batch 1, median ms ({lat['threads']} threads)",
                 lat["pytorch"]["median"], lat["export"]["median"]),
                ("latency at batch 1, p95 ms", lat["pytorch"]["p95"], lat["export"]["p95"])]
        diffs = ", ".join(f"{k} {_num(v)}" for k, v in check["max_abs_diff"].items())
        lines += ["## Checked against the PyTorch model", "",
                  "| | PyTorch fp32 | this export |", "|---|---|---|",
                  *[f"| {a} | {_num(b)} | {_num(c)} |" for a, b, c in rows], "",
                  f"Drop: {_num(check['drop_points'])} points (allowed: "
                  f"{_num(config.get('max_drop'))}). Predictions agreeing: "
                  f"{'n/a (scores)' if check['agreement'] is None else _num(check['agreement'])}"
                  f". Largest output difference: {diffs}.", ""]
    else:
        lines += ["Not checked: `bertctl export MODEL --check DEV_FILE` measures the quality "
                  "it keeps and its latency.", ""]
    lines += ["## Running it", "", "```python", "import onnxruntime, numpy as np",
              "from tokenizers import Tokenizer", "",
              "session = onnxruntime.InferenceSession('model.onnx')",
              "enc = Tokenizer.from_file('tokenizer.json').encode('a sentence')",
              "feeds = {'input_ids': np.array([enc.ids]), 'attention_mask': "
              "np.array([enc.attention_mask]),",
              "         'token_type_ids': np.array([enc.type_ids])}",
              "names = [o.name for o in session.get_outputs()]",
              f"outputs = dict(zip(names, session.run(None, feeds)))  # {onnx.outputs[0]}, ...",
              "```", ""]
    return "\n".join(lines)


def write_export(tmp: Path, stats: dict[str, Any], config: dict[str, Any]) -> None:
    (tmp / README).write_text(render_export(stats, config), encoding="utf-8")
