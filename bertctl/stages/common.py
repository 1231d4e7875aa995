"""What several stages share: opening a model input and writing a model directory.

A model input is either a bertctl model artifact or any local Hugging Face BERT directory; a
model artifact is itself a Hugging Face directory (config.json, model.safetensors and the
tokenizer files) plus `artifact.json` and, after fine-tuning, `bertctl_task.json`.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

from bertctl import agreement, artifacts, console, hardware, locks, modelcard, placement
from bertctl import settings as settings_mod
from bertctl.data import tokenizer as tokenizer_mod
from bertctl.errors import BertctlError, Interrupted

TOKENIZER_FILES = ("tokenizer.json", "vocab.txt", "tokenizer_config.json",
                   "special_tokens_map.json")
TASK_FILE = "bertctl_task.json"
MODEL_FILES = ("config.json", "model.safetensors", "model.safetensors.index.json")
ONNX_FILE = "model.onnx"


@dataclass
class ModelSource:
    """An opened model input: where it is, its lineage entry, its config.json, its task."""

    path: Path
    ref: artifacts.InputRef
    hf_config: dict[str, Any]
    task: dict[str, Any] | None
    # An export artifact's facts (its manifest's stats["onnx"]): the model is its ONNX graph.
    onnx: dict[str, Any] | None = None

    def has_tokenizer(self) -> bool:
        return any((self.path / n).is_file() for n in ("tokenizer.json", "vocab.txt"))

    def tokenizer(self):
        """The model's tokenizer, with its lowercase flag; a clear error if it ships none."""
        if not any((self.path / n).is_file() for n in ("tokenizer.json", "vocab.txt")):
            raise BertctlError(f"{self.path}: model directory has no tokenizer "
                               f"(tokenizer.json or vocab.txt)")
        tok, lowercase, _ = tokenizer_mod.from_hf_directory(self.path)
        return tok, lowercase

    def load(self, head_class=None, **head_kwargs):
        """The model and its LoadReport; for an export, its graph run by onnxruntime (which
        must hold `head_class`, when given)."""
        from bertctl.model import LoadReport, load_model

        if self.onnx is None:
            return load_model(self.path, head_class, **head_kwargs)
        from bertctl.onnx_model import OnnxModel

        graph = self.onnx.get("graph")
        if head_class is not None and head_class.__name__ != graph:
            hint = " (bertctl export --encoder)" if head_class.__name__ == "BertModel" else ""
            raise BertctlError(f"{self.path}: is an export of a {graph}; this needs an export "
                               f"of a {head_class.__name__}{hint}")
        return OnnxModel(self.path / ONNX_FILE), LoadReport(source=str(self.path))

    def runtime(self, device: str, precision: str) -> tuple[Any, str, str]:
        """(device, precision, what the manifest records as the precision) for running this
        model: an export runs its graph as written, with onnxruntime on the CPU."""
        if self.onnx is None:
            return hardware.resolve_device(device), precision, precision
        return hardware.resolve_device("cpu"), "fp32", f"onnxruntime {self.onnx.get('quantize')}"

    @property
    def vocab_size(self) -> int:
        return int(self.hf_config["vocab_size"])


def _digest(root: Path, files) -> tuple[str, int]:
    """One hash for a set of files: each file's relative path and content hash, in order."""
    digest = hashlib.sha256()
    size = 0
    for f in files:
        digest.update(f"{f.relative_to(root).as_posix()}:{artifacts.sha256_file(f)}\n".encode())
        size += f.stat().st_size
    return digest.hexdigest(), size


def _hf_directory_ref(path: Path, role: str) -> artifacts.InputRef:
    """A plain Hugging Face directory is identified by the hashes of the files that define it."""
    files = [path / n for n in MODEL_FILES + TOKENIZER_FILES if (path / n).is_file()]
    digest, size = _digest(path, files)
    return artifacts.InputRef(role=role, kind="hf-model", id=digest,
                              path=str(path.resolve()), size=size)


# What `datasets`' save_to_disk leaves in a directory (a Dataset, or a DatasetDict).
SAVED_DATASET_FILES = ("dataset_info.json", "state.json", "dataset_dict.json")


def is_saved_dataset(path: Path) -> bool:
    return path.is_dir() and any((path / n).is_file() for n in SAVED_DATASET_FILES)


def data_input(path: Path, role: str = "data") -> artifacts.InputRef:
    """A data file by its content hash; a save_to_disk directory by the hashes of its files."""
    if path.is_file():
        return artifacts.file_input(path, role)
    if not path.is_dir():
        raise BertctlError(f"{path}: no such file or directory")
    digest, size = _digest(path, sorted(p for p in path.rglob("*") if p.is_file()))
    if size == 0 and not any(path.iterdir()):
        raise BertctlError(f"{path}: empty directory")
    return artifacts.InputRef(role=role, kind="directory", id=digest,
                              path=str(path.resolve()), size=size)


def pretrain_data_artifact(data: str | Path) -> artifacts.Artifact | None:
    """`eval`'s DATA: a pretrain-data artifact (returned), or a task data file or directory
    (None); any other artifact is an error."""
    data = Path(data)
    if not data.exists():
        raise BertctlError(f"{data}: no such data file or directory")
    if not (data / artifacts.MANIFEST).is_file():
        return None
    manifest = artifacts.read_manifest(data)
    if manifest.kind != "pretrain-data":
        raise BertctlError(f"{data}: is a {manifest.kind} artifact; eval reads a task data "
                           f"file or a pretrain-data artifact")
    return artifacts.read_artifact(data, "pretrain-data")


def open_model(path: str | Path, role: str = "model", exports: bool = False) -> ModelSource:
    """A model input: a model artifact, a Hugging Face directory, or (`exports`, for the stages
    that only run a model: eval, embed) an export artifact."""
    from bertctl.model import read_config, read_config_dict

    path = Path(path)
    onnx = None
    if (path / artifacts.MANIFEST).exists():
        art = artifacts.read_artifact(path, ("model", "export") if exports else "model")
        ref = art.as_input(role)
        if art.kind == "export":
            onnx = art.manifest.stats.get("onnx") or {}
            # Checked whole on every open, whatever its size, before any work: an edited graph
            # is still a valid graph, and runs.
            file = artifacts.checked_file(path, ONNX_FILE)
            if artifacts.sha256_file(file) != art.manifest.files[ONNX_FILE].sha256:
                raise BertctlError(f"{file}: changed since it was exported (checksum mismatch)")
    else:
        if not path.is_dir():
            raise BertctlError(f"{path}: no such model directory")
        ref = _hf_directory_ref(path, role)
    read_config(path)  # a clear error now if this is not a BERT we can build
    tokenizer_files(path)
    hf_config = read_config_dict(path)
    task = None
    if (path / TASK_FILE).is_file():
        try:
            task = json.loads((path / TASK_FILE).read_text(encoding="utf-8"))
        except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
            raise BertctlError(f"{path / TASK_FILE}: cannot read the model's task file: "
                               f"{' '.join(str(exc).split())}") from None
        if not isinstance(task, dict):
            raise BertctlError(f"{path / TASK_FILE}: the model's task file is not a JSON object")
    return ModelSource(path, ref, hf_config, task, onnx)


def tokenizer_files(source: Path) -> list[Path]:
    """The tokenizer files a new artifact will copy from `source`, checked now (before any
    work): an artifact's own, unchanged files, no link to a file elsewhere."""
    from bertctl.data.tokenizer import check_vocab_agrees

    files = [artifacts.checked_file(source, name) for name in TOKENIZER_FILES
             if (source / name).is_file() or (source / name).is_symlink()]
    check_vocab_agrees(Path(source))
    return files


def copy_tokenizer(source: Path, directory: Path) -> None:
    for path in tokenizer_files(source):
        shutil.copyfile(path, directory / path.name)


def write_model(model, directory: Path, tokenizer_dir: Path, extra_config: dict | None = None,
                task: dict | None = None) -> None:
    """A Hugging Face compatible model directory: weights, config, tokenizer and task."""
    from bertctl.model import save_model

    save_model(model, directory, extra_config)
    copy_tokenizer(tokenizer_dir, directory)
    if task is not None:
        (directory / TASK_FILE).write_text(json.dumps(task, indent=2) + "\n", encoding="utf-8")


def check_reads_task(source: ModelSource, tokenizer, max_seq_length: int) -> None:
    """The model reads ids of its own tokenizer, as long as `max_seq_length` (bertctl.agreement,
    the one data/model check)."""
    agreement.check(str(source.path), model_vocab=source.vocab_size,
                    max_positions=int(source.hf_config.get("max_position_embeddings", 512)),
                    pad_id=source.hf_config.get("pad_token_id"),
                    data_vocab=tokenizer.get_vocab_size(), seq_length=max_seq_length,
                    data_special_ids={"[PAD]": tokenizer.token_to_id("[PAD]")}
                    if tokenizer.token_to_id("[PAD]") is not None else None)


class TrainingJob(Protocol):
    """A training stage's own part, called by `train_to_artifact` in this order on every rank:
    `prepare()` (read the data, build the model: everything before the first step), `fit(work)`
    (the training loop, resuming from `work`'s checkpoints), and on rank 0 `write(result, tmp)`
    (the model directory; returns the manifest stats)."""

    def prepare(self) -> None: ...

    def fit(self, work: Path) -> Any: ...

    def write(self, result: Any, tmp: Path) -> dict: ...


def train_to_artifact(config, inputs: list[artifacts.InputRef], target: artifacts.Target,
                      job: TrainingJob):
    """What every training stage shares. Under torchrun every rank decides "up to date" the same
    way and trains; rank 0 alone writes the artifact (the others return None). The work
    directory holds the checkpoints, so it outlives a crash (the rerun resumes from it) and is
    removed once the artifact is in place.
    """
    from bertctl.train import distributed as dist

    dist.init(config.device)  # under torchrun: join the group first, to know who writes
    hardware.set_threads(config.threads)
    try:
        artifact_id, out_path = artifacts.plan("model", config, inputs, target.out)
        # The output's lock covers the whole run, its run directory included (rank 0 holds it
        # for a distributed run).
        with (locks.output_lock(out_path, target.wait) if dist.is_main()
              else contextlib.nullcontext()):
            return _train(config, inputs, target, job, artifact_id, out_path)
    finally:
        dist.cleanup()


def _train(config, inputs, target, job: TrainingJob, artifact_id, out_path):
    from bertctl.train import distributed as dist

    existing = artifacts.check_out(out_path, "model", artifact_id, target.force)
    if existing is not None:
        return artifacts.Outcome(manifest=existing, path=str(out_path), up_to_date=True)
    work = placement.work_dir(out_path, artifact_id)
    job.prepare()
    if not dist.is_main():
        job.fit(work)
        # Back only once rank 0 has put the artifact in place: when torchrun returns on any
        # node, the next stage (phase 2, a fine-tuning) finds it.
        dist.barrier()
        return None

    def build(tmp: Path) -> dict:
        stats = job.write(job.fit(work), tmp)
        shutil.copyfile(work / "metrics.jsonl", tmp / "metrics.jsonl")
        modelcard.write(tmp, artifact_id, out_path, settings_mod.as_dict(config), inputs, stats)
        return stats

    try:
        outcome = artifacts.produce("model", config, inputs, target, build, locked=True)
    except BaseException as exc:
        from bertctl.train.checkpoint import list_checkpoints

        if not list_checkpoints(work):   # nothing a rerun could resume: nothing left behind
            shutil.rmtree(work, ignore_errors=True)
        elif isinstance(exc, KeyboardInterrupt):   # kept on purpose: the rerun resumes
            raise Interrupted(f"interrupted; no artifact was written; checkpoints kept in "
                              f"{work / 'checkpoints'}: rerun the same command to resume") from None
        raise
    shutil.rmtree(work, ignore_errors=True)
    dist.barrier()
    return outcome


# ---------------------------------------------------------------------------------------------
# A fine-tuned model and the task data it is run on (eval, export --check)

def model_task(config, source: ModelSource):
    """The model's task as the flags refine it: (spec, family, label list), the model's head
    checked against it (eval, export --check, and distill's teacher)."""
    from bertctl import tasks

    spec = resolve_task(config, source)
    family = tasks.get(spec.family)
    label_list = family.resolve_labels(spec, source.task, source.hf_config, config.labels,
                                       str(source.path))
    family.check_head(source.hf_config, spec, label_list, str(source.path))
    return spec, family, label_list


def task_length(config, source: ModelSource) -> int:
    """--max-seq-length, else the model's fine-tuning length, else 128."""
    return config.max_seq_length or int((source.task or {}).get("max_seq_length") or 128)


def open_task(config, source: ModelSource, data: Path):
    """How to read DATA for the model: (spec, family, label list, the file, sequence length),
    the model's head checked against the task."""
    spec, family, label_list = model_task(config, source)
    data = _task_file(spec, data)
    return spec.for_file(data), family, label_list, data, task_length(config, source)


def resolve_task(config, source: ModelSource):
    """The TaskSpec to read DATA with: the model's task, with the flags given replacing its
    fields; a preset named by --task instead; or the flags alone for a model without one."""
    from bertctl.tasks import TaskSpec, make_task_spec

    flags = config.task_fields()
    if getattr(config, "header", None) is not None:   # e.g. GLUE's CoLA test file has a header, its dev file none
        flags["header"] = config.header
    if config.task is not None:
        return make_task_spec(config.task, **flags)
    if source.task is not None:
        try:
            spec = TaskSpec(**source.task["spec"])
        except Exception as exc:  # noqa: BLE001 - a task file of another version or edited by hand
            raise BertctlError(f"{source.path / TASK_FILE}: cannot read the task: "
                               f"{' '.join(str(exc).split())}") from None
        if not flags:
            return spec   # the model's own, exactly
        base = spec.model_dump()
        if "family" in flags and flags["family"] != base["family"]:
            raise BertctlError(f"{source.path}: the model was fine-tuned for a '{base['family']}' "
                               f"task, not '{flags['family']}'")
        if "options" in flags:  # flags refine the model's options (e.g. --null-threshold)
            flags = {**flags, "options": {**base.get("options", {}), **flags["options"]}}
        return make_task_spec(None, **{**base, **flags})
    if "family" in flags:
        return make_task_spec(None, **flags)
    raise BertctlError(f"{source.path}: the model has no task file ({TASK_FILE}); give "
                       f"the task with --task (e.g. glue/sst2) or --family and the columns")


def _task_file(spec, data: Path) -> Path:
    """A preset task's data directory (GLUE's SST-2/) stands for its dev file; any other
    directory must be one written by `datasets`' save_to_disk."""
    if not data.is_dir() or is_saved_dataset(data):
        return data
    found = spec.split_files(data)
    if "dev" in found:
        console.log(f"{data}: evaluating the task's dev file {found['dev'].name}")
        return found["dev"]
    if found:
        raise BertctlError(f"{data}: give one of the task's files: "
                           f"{', '.join(str(p) for p in found.values())}")
    return data  # the family's reader explains what a saved dataset directory needs


def load_encoder(source: ModelSource):
    """The bare encoder of any model input (its ONNX graph for an export). A checkpoint without
    a pooler (a masked LM alone, a replaced-token detector, a tagging or span QA model) is a
    complete encoder: it is built without one, so nothing random is run or exported; any other
    missing weight is refused."""
    from bertctl.model import BertModel

    model, report = source.load(BertModel)
    if report.missing and all(k.startswith("pooler.") for k in report.missing):
        model.pooler = None
        report.missing = []
    problems = report.missing + report.mismatched
    if problems:
        raise BertctlError(f"{source.path}: the checkpoint lacks encoder weights "
                           f"({', '.join(problems[:4])})")
    return model


def load_task_model(source: ModelSource):
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
