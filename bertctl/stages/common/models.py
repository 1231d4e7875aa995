"""Model inputs and outputs: opening a model input (a bertctl model artifact, any local Hugging
Face BERT directory, or for the stages that only run a model an export artifact), loading its
encoder or its task model, writing a model directory, and the data inputs a stage records.

A model artifact is itself a Hugging Face directory (config.json, model.safetensors and the
tokenizer files) plus `artifact.json` and, after fine-tuning, the task record TASK_FILE.
"""

from __future__ import annotations

import glob
import hashlib
import json
import os
import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from bertctl import console, hardware

from bertctl.stages.common import agreement
from bertctl.contract import artifacts, placement
from bertctl.data import tables
from bertctl.data.tokenizer.files import check_vocab_agrees, from_hf_directory
from bertctl.data.tokenizer.specials import PAD, special_id, special_ids
from bertctl.errors import BertctlError, read_json_object
from bertctl.contract.exports import ExportFacts
from bertctl.model import architectures, sentence_layout as sentence
from bertctl.model.architectures import role_of
from bertctl.settings import SEQ_LENGTH
from bertctl.tasks.resolve import TASK_FILE
from bertctl.tasks.retrieval import reader

TOKENIZER_FILES = ("tokenizer.json", "vocab.txt", "tokenizer_config.json",
                   "special_tokens_map.json")
MODEL_FILES = ("config.json", "model.safetensors", "model.safetensors.index.json",
               "adapter_config.json", "adapter_model.safetensors")
ONNX_FILE = "model.onnx"
SENTENCE_FILES = ("modules.json", "sentence_bert_config.json",
                  "config_sentence_transformers.json")


@dataclass
class ModelSource:
    """An opened model input: where it is, its lineage entry, its config.json, its task."""

    path: Path
    ref: artifacts.InputRef
    hf_config: dict[str, Any]
    task: dict[str, Any] | None
    # An export artifact's facts: the model is its ONNX graph.
    onnx: ExportFacts | None = None
    # Its architecture's config (field names differ: DistilBERT's n_layers, dim); None only
    # where a source is made by hand.
    config: Any = None

    @property
    def num_layers(self) -> int:
        return int(self.config.num_hidden_layers)

    def has_tokenizer(self) -> bool:
        return any((self.path / n).is_file() for n in ("tokenizer.json", "vocab.txt"))

    def tokenizer(self):
        """The model's tokenizer, with its lowercase flag; a clear error if it ships none."""
        if not self.has_tokenizer():
            raise BertctlError(f"{self.path}: model directory has no tokenizer "
                               f"(tokenizer.json or vocab.txt)")
        tok, lowercase, _ = from_hf_directory(self.path)
        return tok, lowercase

    def load(self, role: str | None = None, config_updates: dict | None = None, **head_kwargs):
        """The model of `role` (bertctl.model.ROLES; None: the one config.json names) and its
        LoadReport; for an export, its graph run by onnxruntime (which must be of `role`, when
        given). `config_updates`: hf.load_model's."""
        from bertctl.model.hf import LoadReport, load_model

        if self.onnx is None:
            return load_model(self.path, role, config_updates, **head_kwargs)
        from bertctl.model.onnx_model import OnnxModel

        graph = self.onnx.graph
        if role is not None and role_of(graph) != role:
            hint = " (bertctl export --encoder)" if role == "encoder" else ""
            raise BertctlError(f"{self.path}: is an export of a {graph}; this needs an export "
                               f"of a {role.replace('_', ' ')} model{hint}")
        return OnnxModel(self.path / ONNX_FILE), LoadReport(source=str(self.path))

    def applied(self, settings):
        """The settings as they apply to this model: an export's graph runs as it was
        exported, so a --precision given does not apply, and must not change the id."""
        if self.onnx is None or getattr(settings, "precision", "fp32") == "fp32":
            return settings
        return settings.model_copy(update={"precision": "fp32"})

    def runtime(self, device: str, precision: str) -> tuple[Any, str, str]:
        """(device, precision, what the manifest records as the precision) for running this
        model: an export runs its graph as written, with onnxruntime on the CPU."""
        if self.onnx is None:
            resolved = hardware.resolve_device(device)
            hardware.check_precision(precision, resolved)
            return resolved, precision, precision
        return hardware.resolve_device("cpu"), "fp32", self.onnx.runtime

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
    """A plain Hugging Face directory is identified by the hashes of the files that define it:
    the model's, the tokenizer's and sentence-transformers' layout (its modules' folders)."""
    layout = [path / n for n in SENTENCE_FILES if (path / n).is_file()]
    if (path / "modules.json").is_file():
        folders = sorted({p.parent for p in path.glob("[0-9]*_*/*") if p.is_file()})
        layout += sorted(p for folder in folders for p in folder.iterdir()
                         if p.is_file() and not p.is_symlink())
    files = [path / n for n in MODEL_FILES + TOKENIZER_FILES if (path / n).is_file()] + layout
    digest, size = _digest(path, files)
    from bertctl.model import lora   # here: it imports torch, which inspect and --help need not

    base = lora.base_of(path)
    if base is not None:   # a LoRA adapter computes what its base and it compute together
        digest = hashlib.sha256(f"{digest}:{_hf_directory_ref(base, role).id}".encode()
                                ).hexdigest()
    return artifacts.InputRef(role=role, kind="hf-model", id=digest,
                              path=str(path.resolve()), size=size)


def data_input(path: Path, role: str = "data") -> artifacts.InputRef:
    """A data file by its content hash; a directory (save_to_disk's, or shards) or a glob
    pattern by the hashes of its files.
    A file of an artifact (a mined pairs.jsonl, a split's train.jsonl) is checked as the
    artifact records it and carries that artifact as its lineage (the id still hashes the
    file alone: the same rows from elsewhere are the same input)."""
    placement.recordable(path)
    if path.is_file():
        ref = artifacts.file_input(path, role)
        parent = path.parent
        if (parent / artifacts.MANIFEST).is_file():
            art = artifacts.read_artifact(parent)
            art.file(path.name)
            ref = ref.model_copy(update={"inputs": [art.as_input("artifact")]})
        return ref
    if not path.is_dir() and glob.has_magic(str(path)):   # shards named by a pattern
        root = Path(*next(([*path.parts[:i]] for i, part in enumerate(path.parts)
                           if glob.has_magic(part))))
        digest, size = _digest(root, tables.table_files(path))
        return artifacts.InputRef(role=role, kind="files", id=digest,
                                  path=os.path.abspath(path), size=size)
    if not path.is_dir():
        raise tables.no_such_path(path)
    digest, size = _digest(path, sorted(p for p in path.rglob("*") if p.is_file()))
    if size == 0 and not any(path.iterdir()):
        raise BertctlError(f"{path}: empty directory")
    return artifacts.InputRef(role=role, kind="directory", id=digest,
                              path=str(path.resolve()), size=size)


def data_inputs(path: Path, role: str = "data") -> list[artifacts.InputRef]:
    """`data_input`, and for one judgements file of a BEIR directory (eval MODEL
    BEIR/qrels/test.tsv) the corpus and the queries it is read with too: the id covers every
    file read, whichever path was named."""
    inputs = [data_input(path, role)]
    if path.is_file() and reader.is_beir(path):
        root = path.parent.parent
        inputs += [data_input(root / name, f"{role}-{name.split('.')[0]}")
                   for name in (reader.CORPUS, reader.QUERIES) if (root / name).is_file()]
    return inputs


def pretrain_data_artifact(data: str | Path) -> artifacts.Artifact | None:
    """`eval`'s DATA: a pretrain-data artifact (returned), or a task data file or directory
    (None); any other artifact is an error."""
    data = Path(data)
    if not data.exists() and not glob.has_magic(str(data)):
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
    from bertctl.model.hf import read_config, read_config_dict

    path = Path(path)
    onnx = None
    if (path / artifacts.MANIFEST).exists():
        art = artifacts.read_artifact(path, ("model", "export") if exports else "model")
        ref = art.as_input(role)
        # Every file a model is built from (its weights, config, tokenizer, a sentence
        # layout's Dense weights), checked by the one rule before any is read.
        for name in art.manifest.files:
            art.file(name)
        if art.kind == "export":
            onnx = ExportFacts.from_stats(art.manifest.stats.get("onnx") or {})
            # Checked whole on every open, whatever its size, before any work: an edited graph
            # is still a valid graph, and runs.
            file = artifacts.checked_file(path, ONNX_FILE)
            if artifacts.sha256_file(file) != art.manifest.files[ONNX_FILE].sha256:
                raise BertctlError(f"{file}: changed since it was exported (checksum mismatch)")
    else:
        if not path.is_dir():
            raise BertctlError(f"{path}: no such model directory")
        ref = _hf_directory_ref(path, role)
    _check_adapter_base(path, ref)
    config = read_config(path)  # a clear error now if this is not a BERT we can build
    tokenizer_files(path)
    hf_config = read_config_dict(path)
    _check_lowercasing(path, hf_config)
    _check_tokenizer_fits(path, config, architectures.of_config(hf_config, str(path)))
    task = None
    if (path / TASK_FILE).is_file():
        task = read_json_object(path / TASK_FILE, "the model's task file")
    return ModelSource(path, ref, hf_config, task, onnx, config)


def _check_tokenizer_fits(path: Path, config, arch) -> None:
    """The tokenizer's padding and a pair's token types must be what the model reads: a
    RoBERTa or XLM-R checkpoint (one token type; positions counted from its padding id) beside
    a WordPiece tokenizer (a pair's second text is type 1, padding at 0) reads past its type
    table. (Elsewhere the padding id only names an embedding row: not checked.)"""
    if not any((path / n).is_file() for n in ("tokenizer.json", "vocab.txt")):
        return
    tok, _, _ = from_hf_directory(path)
    pad = special_ids(tok).get(PAD)
    want = getattr(config, "pad_token_id", None)
    if arch.positions_past_padding and pad is not None and want is not None and pad != want:
        raise BertctlError(f"{path}: the tokenizer pads with id {pad}, config.json's "
                           f"pad_token_id is {want}: they are not one model's")
    types = getattr(config, "type_vocab_size", 0) or 0
    if types:
        used = max(tok.encode("a", "b").type_ids, default=0)
        if used >= types:
            raise BertctlError(f"{path}: the tokenizer gives a pair's second text token type "
                               f"{used}, but the model has {types} token type(s) (config.json's "
                               f"type_vocab_size): a {config.architecture} needs its own "
                               f"tokenizer")


def _check_lowercasing(path: Path, hf_config: dict[str, Any]) -> None:
    """sentence-transformers lowercases a model's texts when its sentence_bert_config.json
    says do_lower_case; bertctl's texts go through the tokenizer alone, so a tokenizer that
    does not lowercase them would give other vectors."""
    record = hf_config.get(sentence.KEY)
    if isinstance(record, dict) and record.get("do_lower_case") and \
            any((path / n).is_file() for n in ("tokenizer.json", "vocab.txt")):
        _, lowercase, _ = from_hf_directory(path)
        if not lowercase:
            raise BertctlError(f"{path / 'sentence_bert_config.json'}: do_lower_case with a "
                               f"tokenizer that keeps case is not computed by bertctl")


def tokenizer_files(source: Path) -> list[Path]:
    """The tokenizer files a new artifact will copy from `source`, checked now (before any
    work): an artifact's own, unchanged files, no link to a file elsewhere."""
    files = [artifacts.checked_file(source, name) for name in TOKENIZER_FILES
             if (source / name).is_file() or (source / name).is_symlink()]
    check_vocab_agrees(Path(source))
    return files


def copy_tokenizer(source: Path, directory: Path) -> None:
    for path in tokenizer_files(source):
        shutil.copyfile(path, directory / path.name)


def _check_adapter_base(path: Path, ref: artifacts.InputRef) -> None:
    """A LoRA adapter's base is there and, where the adapter's lineage records it, the very
    model it was trained on (by id): adapters on another base compute something else."""
    from bertctl.model import lora   # here: it imports torch

    base = lora.base_of(path)
    if base is None:
        return
    recorded = [i for i in ref.inputs or () if i.role == "model"]
    if recorded:
        found = open_model(base).ref.id
        if found != recorded[0].id:
            raise BertctlError(f"{path}: its base model {base} is not the one it was trained "
                               f"on (id {found[:12]}, recorded {recorded[0].id[:12]})")


def write_model(model, directory: Path, tokenizer_dir: Path, extra_config: dict | None = None,
                task: dict | None = None, max_length: int | None = None,
                base: Path | None = None) -> None:
    """A Hugging Face compatible model directory: weights, config, tokenizer and task.
    `max_length`: the length the model was trained to read, as the tokenizer's
    model_max_length (where another library truncates a reranker's pairs). A model with LoRA
    adapters is written as its adapters and head, naming `base`, the model they adapt."""
    from bertctl.model.hf import save_model

    save_model(model, directory, extra_config, base=base)
    copy_tokenizer(tokenizer_dir, directory)
    settings = directory / "tokenizer_config.json"
    if max_length is not None and settings.is_file():
        record = json.loads(settings.read_text(encoding="utf-8"))
        record["model_max_length"] = int(max_length)
        settings.write_text(json.dumps(record, indent=2) + "\n", encoding="utf-8")
    if task is not None:
        (directory / TASK_FILE).write_text(json.dumps(task, indent=2) + "\n", encoding="utf-8")


def model_length(source: ModelSource) -> int:
    """The longest input the model reads: its position table, at most SEQ_LENGTH's bound (a
    model trained with 128 positions cannot take 512)."""
    arch = architectures.of_config(source.hf_config, str(source.path))
    longest = min(SEQ_LENGTH["le"], arch.longest_input(source.hf_config, SEQ_LENGTH["le"]))
    record = source.hf_config.get(sentence.KEY)
    given = record.get("max_seq_length") if isinstance(record, dict) else None
    # a sentence-transformers model truncates at its own length (all-MiniLM-L6-v2: 256 of 512)
    return min(longest, given) if isinstance(given, int) and given > 0 else longest


def check_reads_task(source: ModelSource, tokenizer, max_seq_length: int) -> None:
    """The model reads ids of its own tokenizer, as long as `max_seq_length` (bertctl.stages.common.agreement,
    the one data/model check)."""
    agreement.check(str(source.path), model_vocab=source.vocab_size,
                    max_positions=architectures.of_config(
                        source.hf_config, str(source.path)).longest_input(source.hf_config),
                    pad_id=source.hf_config.get("pad_token_id"),
                    data_vocab=tokenizer.get_vocab_size(), seq_length=max_seq_length,
                    data_special_ids={PAD: special_id(tokenizer, PAD)}
                    if special_id(tokenizer, PAD) is not None else None,
                    positions_note=architectures.of_config(source.hf_config,
                                                           str(source.path)).positions_note)


def load_encoder(source: ModelSource):
    """The bare encoder of any model input (its ONNX graph for an export). A checkpoint without
    a pooler (a masked LM alone, a replaced-token detector, a tagging or span QA model) is a
    complete encoder: it is built without one, so nothing random is run or exported; any other
    missing weight is refused."""
    model, report = source.load("encoder")
    if report.missing and all(k.startswith("pooler.") for k in report.missing):
        model.pooler = None
        report.missing = []
    problems = report.missing + report.mismatched
    if problems:
        raise BertctlError(f"{source.path}: the checkpoint lacks encoder weights "
                           f"({', '.join(problems[:4])})")
    return model


def load_task_model(source: ModelSource, role: str | None = None):
    """The model with its task head (of `role`: the family's, which reads the checkpoint's
    own head; None: the head config.json names)."""
    model, report = source.load(role)
    pooler = getattr(getattr(model, "encoder", None), "pooler", None)
    if pooler is not None and not any(p.requires_grad for p in pooler.parameters()) and \
            report.missing and all(".pooler." in k for k in report.missing):
        model.encoder.pooler = None   # a frozen, unused pooler the checkpoint lacks: none
        report.missing = []
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
