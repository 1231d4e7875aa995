"""`bertctl pretrain`: pretrain-data [+ model] -> model artifact, trained with a pretraining
objective from the registry (bertctl.objectives: its model, data check, metrics, validation).

The settings that must agree between the data and the model (vocabulary, special tokens,
sequence length) are read from the data artifact and checked against the model, never
re-typed. A rerun of the same command after a crash resumes from the run's last checkpoint,
kept in a hidden sibling of --out keyed by the artifact id.
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import torch

from bertctl import console, objectives

from bertctl.stages.common import agreement

from bertctl.contract import modelcard
from bertctl.contract import artifacts
from bertctl.stages.settings.pretrain import PretrainSettings
from bertctl.data.tokenizer import extension
from bertctl.data.tokenizer.files import load as load_tokenizer
from bertctl.data.tokenizer.specials import SPELLINGS, spelling
from bertctl.data.pretraining.build import check_mask_coverage
from bertctl.data.pretraining.dataset import (PretrainingDataset, check_mask_rate,
                                              read_pretraining_info)
from bertctl.data.settings import PretrainingDataSettings
from bertctl.errors import BertctlError, read_json_object
from bertctl.model import ARCHITECTURES, architectures, build
from bertctl.model.dropout import set_training_dropout
from bertctl.model.vocabulary import grow_vocabulary
from bertctl.stages.common import models, runtime, training
from bertctl.train import distributed as dist
from bertctl.train.loop import train
from bertctl.train.settings import LoopSettings

def _build_model(settings: PretrainSettings, objective, init: models.ModelSource | None,
                 new_config, init_updates: dict):
    """The model to train (from --init-from, or new of `new_config`) and what loading it found
    (logged once it is known to fit)."""
    torch.manual_seed(settings.seed)  # the initial weights are part of what --seed fixes
    kwargs = objective.model_kwargs(settings)
    notes = []   # what loading --init-from found
    if init is not None:
        model, report = init.load(objective.head, init_updates, **kwargs)
        notes.append(str(report))
        if settings.train_only == "new":
            notes.append(_freeze_loaded(model, report.missing, init))
    else:
        model = build(objective.head, new_config, **kwargs)
    if settings.dropout is not None:
        set_training_dropout(model, settings.dropout)
    return model, notes


def _freeze_loaded(model, new: list[str], init: models.ModelSource) -> str:
    """--train-only new: the weights the model came with stay as they are (what is trained is
    returned, to be said)."""
    params = dict(model.named_parameters())   # a tied decoder is the (loaded) embeddings
    missing = set(new)
    trained = [n for n in params if n in missing]
    if not trained:
        raise BertctlError(f"{init.path}: has every weight this objective trains; "
                           f"--train-only new has nothing to train")
    for name, p in params.items():
        p.requires_grad_(name in missing)
    return (f"training only the {len(trained)} weights {init.path} was saved without "
            f"({sum(params[n].numel() for n in trained):,} values): " + ", ".join(trained))


def model_shape(settings: PretrainSettings, init: models.ModelSource | None,
                model_config: Path | None, info) -> tuple[str, object | None, dict]:
    """What the run trains, worked out once: the architecture (the one config.json says, with
    --init-from or --model-config, which a --architecture given must name; else
    --architecture); for a new model, its config (--model-config's, else the preset's),
    sized to the data's vocabulary and naming the data's special tokens; for an --init-from
    model, the config fields this run changes."""
    ARCHITECTURES.get_known(settings.architecture)
    if init is None and model_config is None:
        arch = ARCHITECTURES[settings.architecture]
        _check_spelling(arch, info.path / "tokenizer.json")
        positions = settings.max_position_embeddings
        if not arch.position_table and "max_position_embeddings" not in settings.model_fields_set:
            # rotary positions have no table to size: the model reads the data's length
            positions = max(positions, int(info.settings["max_seq_length"]))
        new = arch.config_class.from_preset(
            settings.model_size, num_hidden_layers=settings.num_hidden_layers,
            hidden_size=settings.hidden_size, num_attention_heads=settings.num_attention_heads,
            intermediate_size=settings.intermediate_size, vocab_size=info.vocab_size,
            max_position_embeddings=positions)
        new = replace(new, **_config_changes(settings, arch, None, f"--architecture {arch.name}"))
        return arch.name, new.with_special_ids(info.special_ids), {}
    where = str(init.path if init is not None else model_config)
    hf = init.hf_config if init is not None else _read_model_config(model_config)
    arch = architectures.of_config(hf, where)
    if "architecture" in settings.model_fields_set and arch.name != settings.architecture:
        raise BertctlError(f"{where}: is a {arch.name} model; --architecture "
                           f"{settings.architecture} cannot start from it")
    if init is not None:
        return arch.name, None, _config_changes(settings, arch, hf, where)
    new = arch.config_from_hf({**hf, "vocab_size": hf.get("vocab_size", info.vocab_size)}, where)
    new = replace(new, **_config_changes(settings, arch, None, where))
    _check_spelling(arch, info.path / "tokenizer.json")
    return arch.name, new.with_special_ids(info.special_ids), {}


def _config_changes(settings: PretrainSettings, arch, hf: dict | None, where: str) -> dict:
    """The config fields this run sets that hold no weight: --rope-theta, and, continuing a
    model without a position table (`hf`, its config.json), a --max-position-embeddings given
    (ModernBERT's context extension: longer rows, the rotary base raised)."""
    changes = {}
    if settings.rope_theta is not None:
        if arch.rope_base is None:
            raise BertctlError(f"{where}: --rope-theta sets a rotary base; {arch.name} has no "
                               f"rotary positions")
        changes[arch.rope_base] = settings.rope_theta
    if hf is not None and "max_position_embeddings" in settings.model_fields_set:
        has = arch.longest_input(hf)
        if settings.max_position_embeddings != has:
            if arch.position_table:
                raise BertctlError(
                    f"{where}: reads {has} positions from a learned table; "
                    f"--max-position-embeddings {settings.max_position_embeddings} cannot change "
                    f"its size (a model without a position table, as modernbert, can)")
            changes["max_position_embeddings"] = settings.max_position_embeddings
    return changes


def _check_spelling(arch, path: Path) -> None:
    """A new model's vocabulary spells its special tokens as the architecture does: RoBERTa's
    <s> and </s> are not a WordPiece vocabulary's [CLS] and [SEP]."""
    if not path.is_file():
        return
    wanted = SPELLINGS[arch.spelling]
    got = spelling(load_tokenizer(path)) or wanted   # neither: VocabInfo says
    if got is not wanted:
        raise BertctlError(
            f"{path}: spells its special tokens as {got.name} does ({got.words()}); "
            f"--architecture {arch.name} reads {wanted.name}'s ({wanted.words()}): train its "
            f"vocabulary with bertctl tokenize {wanted.trained_by}")

def _read_model_config(model_config: Path) -> dict:
    return read_json_object(model_config, "model config")


def _grow_vocabulary(model, data: artifacts.Artifact,
                     init: models.ModelSource | None) -> dict | None:
    """Continuing from a model whose tokenizer the data's extends (tokenize --extend): the
    model's vocabulary grows to the data's, each new piece starting from the mean of the pieces
    the model's own tokenizer splits it into (bertctl.model.vocabulary)."""
    if init is None or not init.has_tokenizer():
        return None
    base = init.tokenizer()[0]
    extended = load_tokenizer(data.path / "tokenizer.json")
    if not extension.is_extension(base, extended):
        return None
    before = int(model.config.vocab_size)
    after = grow_vocabulary(model, base.get_vocab_size(),
                            extension.base_pieces(base, extended))
    console.log(f"vocabulary grown from {before:,} to {after:,}: each new piece starts from the "
                f"mean of the embeddings of the pieces {init.path} splits it into")
    return {"from": before, "to": after, "new_pieces": extended.get_vocab_size()
            - base.get_vocab_size(), "initialised": "mean of the base pieces' rows"}


def _check_agreement(model, data: artifacts.Artifact, init: models.ModelSource | None,
                     grown: bool = False) -> None:
    """Refuse a model that cannot read this data (bertctl.stages.common.agreement): ids past its embeddings,
    sequences past its positions, or, continuing from a model, another tokenizer's ids (an
    extension of its tokenizer, once grown, reads as its own)."""
    tok = data.manifest.stats.get("tokenizer", {})
    model_tokenizer = (init.tokenizer()[0] if init is not None and init.has_tokenizer()
                       and not grown else None)
    agreement.check(
        str(init.path if init else "model"), model_vocab=model.config.vocab_size,
        max_positions=architectures.longest_input(model.config), pad_id=model.config.pad_token_id,
        data_vocab=tok.get("vocab_size", 0),
        seq_length=int(data.manifest.config["max_seq_length"]),  # the recorded setting
        data_special_ids=tok.get("special_ids"), model_tokenizer=model_tokenizer,
        data_tokenizer=data.path / "tokenizer.json",
        hint=(f"; build the data with the model's tokenizer (bertctl tokenize "
              f"--from-pretrained {init.path})" if init is not None else ""),
        positions_note=(architectures.of_model(model).positions_note if init is not None
                        else "; --max-position-embeddings sets a new model's"))


def _schedule(settings: PretrainSettings, init: models.ModelSource | None,
              data: artifacts.Artifact) -> dict:
    """start_step/total_steps: fresh, or continuing the parent run's schedule (phase 2)."""
    if not settings.continue_schedule:
        return {}
    if settings.time_budget is not None:
        raise BertctlError("--continue-schedule continues a step schedule; a --time-budget run "
                           "lays its own schedule over its budget")
    if init is None or init.ref.kind != "model" or not init.ref.config:
        raise BertctlError("--continue-schedule needs --init-from a bertctl model artifact")
    parent = artifacts.read_artifact(init.path, "model").manifest
    theirs, ours = parent.config.get("schedule", "linear"), settings.schedule
    if theirs != ours:
        raise BertctlError(f"{init.path}: --continue-schedule: the run was scheduled {theirs}, "
                           f"this one {ours}; give --schedule {theirs}")
    start = int(parent.stats.get("step", 0))
    total = settings.total_steps or parent.stats.get("total_steps")
    # On the parent's own data its order goes on (a decay branched from a stable phase sees
    # what the whole run would have); other data (phase 2's longer rows) starts at its start.
    same_data = any(i.role == "data" and i.id == data.manifest.id for i in parent.inputs)
    return {"start_step": start, "total_steps": total, "order_start": 0 if same_data else None}


# A run that stops before its schedule's end keeps its optimizer state in the artifact, and
# --continue-schedule starts from it: a decay branched from a stable phase (WSD), or phase 2,
# goes on with the moment estimates, not with fresh ones that make its first updates
# sign-sized.
OPTIMIZER_FILE = "optimizer.pt"


def _carried_optimizer(settings: PretrainSettings, init: models.ModelSource | None) -> Path | None:
    if not settings.continue_schedule or init is None:
        return None
    art = artifacts.read_artifact(init.path, "model")
    return art.file(OPTIMIZER_FILE) if OPTIMIZER_FILE in art.manifest.files else None


class PretrainJob:
    """What `training.train_to_artifact` calls, in order: `prepare`, `fit`, `write`."""

    def __init__(self, settings: PretrainSettings, objective, data: artifacts.Artifact,
                 init: models.ModelSource | None, new_config, init_updates: dict):
        self.settings, self.objective, self.data = settings, objective, data
        self.init, self.new_config, self.init_updates = init, new_config, init_updates

    def prepare(self) -> None:
        settings = self.settings
        schedule = _schedule(settings, self.init, self.data)   # a refusal before any work
        self.train_data = PretrainingDataset(self.data.path, "train",
                                             mask_rate=settings.mask_rate)
        # From the data's own summaries (read_pretraining_info), not the manifest's stats: a
        # hand-edited manifest must not decide what is read.
        self.validation = (PretrainingDataset(self.data.path, "validation")
                           if self.train_data.info.stats["validation"].get("instances") else None)
        self.model, notes = _build_model(settings, self.objective, self.init,
                                          self.new_config, self.init_updates)
        self.grown = _grow_vocabulary(self.model, self.data, self.init)
        _check_agreement(self.model, self.data, self.init, grown=self.grown is not None)
        for line in notes:   # said once the model is known to read the data: a refusal is one line
            console.log(line)
        self.loop_settings = LoopSettings.of(
            settings, find_unused_parameters=self.objective.unused_parameters(self.train_data),
            **schedule)
        self.optimizer_from = _carried_optimizer(settings, self.init)
        if self.optimizer_from is not None and self.grown is not None:
            self.optimizer_from = None   # its embedding moments are the old vocabulary's
            console.log("the vocabulary grew: the optimizer state starts afresh")
        elif settings.continue_schedule and self.optimizer_from is None and dist.is_main():
            console.log(f"{self.init.path}: no optimizer state kept (its run reached its "
                        f"schedule's end, or predates it): the optimizer starts afresh")
        if self.validation is None and dist.is_main():
            console.log("no validation split in the data (build it with --validation-fraction):"
                        " training without evaluation")

    def evaluate(self, model) -> dict:
        return self.objective.evaluate(model, self.validation, self.loop_settings.micro_batch_size
                                       or self.settings.batch_size, next(model.parameters()).device,
                                       self.settings.precision, max_batches=self.settings.eval_batches)

    def progress(self) -> tuple[str, int | None, int]:
        return "pretraining", self.settings.steps, self.loop_settings.start_step

    def fit(self, work: Path, sink=None):
        return train(self.model, self.train_data, self.loop_settings, work,
                     evaluate=self.evaluate if self.validation is not None else None,
                     on_log=sink, step_metrics=self.objective.step_metrics,
                     optimizer_state=self.optimizer_from)

    def write(self, result, tmp: Path) -> dict:
        models.write_model(result.model, tmp, self.data.path)
        train_records = [r for r in result.history if r.get("split", "train") == "train"]
        stats = {"architecture": architectures.of_model(result.model).name,
                 "model_class": type(result.model).__name__, "objective": self.objective.name,
                 "step": result.step,
                 "total_steps": self.loop_settings.total_steps or result.step,
                 "epochs": round(result.epoch, 4),
                 "parameters": sum(p.numel() for p in result.model.parameters()),
                 "final_train": train_records[-1] if train_records else {},
                 "tokenizer": self.data.manifest.stats.get("tokenizer", {})}
        if self.train_data.info.masking == "dynamic":   # drawn in training: say how
            stats["masking"] = self.train_data.masking
        if result.resumed_from is not None:
            stats["resumed_from_step"] = result.resumed_from
        if self.optimizer_from is not None:
            stats["optimizer_from"] = "init"
        if result.step < stats["total_steps"]:   # a phase the next run continues
            torch.save(result.optimizer.state_dict(), tmp / OPTIMIZER_FILE)
        if self.grown is not None:
            stats["vocabulary_grown"] = self.grown
        # What the run bought: tokens and time (over resumed runs too), and the budget.
        stats.update(tokens=modelcard.tokens_trained(result.history),
                     elapsed_s=round(result.elapsed, 1))
        if self.settings.time_budget is not None:
            stats["time_budget_s"] = self.settings.time_budget
        stats.update(result.fits())
        return {**stats, "metrics": result.eval_metrics or {}}


def run(settings: PretrainSettings, target: artifacts.Target, data_dir: Path,
        init_from: Path | None = None, model_config: Path | None = None):
    settings = runtime.applied(settings)
    if init_from and model_config:
        raise BertctlError("give either --init-from or --model-config, not both")

    if settings.train_only == "new" and init_from is None:
        raise BertctlError("--train-only new trains the weights an --init-from model was saved "
                           "without: give --init-from")
    objective = objectives.get(settings.objective)
    data = artifacts.read_artifact(data_dir, "pretrain-data")
    info = read_pretraining_info(data.path)
    objective.check_settings(settings, "pretrain")
    objective.check_data(info, str(data.path))
    check_mask_rate(info, settings.mask_rate)
    if settings.mask_rate is None:
        check_mask_coverage(info.stats["train"], PretrainingDataSettings(**info.settings),
                            str(data.path))
    models.tokenizer_files(data.path)   # copied into the model at the end: checked first
    inputs = [data.as_input("data")]
    init = models.open_model(init_from, "init") if init_from else None
    if init:
        inputs.append(init.ref)
    if model_config:
        inputs.append(artifacts.file_input(model_config, "model-config"))
    architecture, new_config, init_updates = model_shape(settings, init, model_config, info)
    objective.check_architecture(architecture, "pretrain")
    job = PretrainJob(settings, objective, data, init, new_config, init_updates)
    return training.train_to_artifact(settings, inputs, target, job)
