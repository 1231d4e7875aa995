"""Training checkpoints: everything needed to continue a run exactly where it stopped.

Layout, under the run's work directory:

    checkpoints/step-00001000/
        model.safetensors     the weights (plain state-dict names)
        optimizer.pt          AdamW moments and step counts
        state.pt              the GradScaler and every rank's RNG states (torch CPU/CUDA,
                              python `random`, numpy)
        trainer.json          step, epoch and position, the best metric so far, the last
                              evaluation, the unfinished log interval, the settings that fix the
                              data order
        best.safetensors      (when a metric selects the best weights) a hard link to best/'s
                              weights as they were at this step, so resuming never loses them
        checksums.json        sha256 and size of each file above; written last
    best/model.safetensors    the best weights so far (their step in the file's metadata)

A checkpoint is written into a hidden temporary directory and renamed into place, so a crash
leaves either the complete checkpoint or nothing. The .pt files are read back with
`torch.load(weights_only=True)`: tensors and plain containers only, never arbitrary pickles.
"""

from __future__ import annotations

import hashlib
import json
import os
import random
import re
import shutil
import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch
from safetensors import SafetensorError, safe_open
from safetensors.torch import load_file, save_file
from torch import nn

from bertctl.contract import signals
from bertctl.errors import BertctlError, DiskFull, is_disk_full

CHECKPOINTS = "checkpoints"
BEST = "best"
WEIGHTS = "model.safetensors"
BEST_LINK = "best.safetensors"
OPTIMIZER = "optimizer.pt"
STATE = "state.pt"
TRAINER = "trainer.json"
CHECKSUMS = "checksums.json"
_STEP_DIR = re.compile(r"^step-(\d{8})$")


def step_dir(work_dir: Path, step: int) -> Path:
    return Path(work_dir) / CHECKPOINTS / f"step-{step:08d}"


def list_checkpoints(work_dir: Path) -> list[tuple[int, Path]]:
    """Complete checkpoints (by name; not verified), oldest first."""
    root = Path(work_dir) / CHECKPOINTS
    if not root.is_dir():
        return []
    found = [(int(m.group(1)), p) for p in root.iterdir()
             if p.is_dir() and (m := _STEP_DIR.match(p.name))]
    return sorted(found)


# ---------------------------------------------------------------------------------------------
# RNG states


def rng_state(device: torch.device) -> dict[str, Any]:
    """This process's random generators, in types `torch.load(weights_only=True)` accepts."""
    name, keys, pos, has_gauss, gauss = np.random.get_state()
    state = {
        "torch": torch.get_rng_state(),
        "python": random.getstate(),
        "numpy": (name, torch.from_numpy(keys.astype(np.int64)), int(pos), int(has_gauss),
                  float(gauss)),
    }
    if device.type == "cuda":
        state["cuda"] = torch.cuda.get_rng_state(device)
    return state


def set_rng_state(state: dict[str, Any], device: torch.device) -> None:
    torch.set_rng_state(state["torch"])
    version, internal, gauss_next = state["python"]
    random.setstate((version, tuple(internal), gauss_next))
    name, keys, pos, has_gauss, gauss = state["numpy"]
    np.random.set_state((name, keys.numpy().astype(np.uint32), pos, has_gauss, gauss))
    if device.type == "cuda" and "cuda" in state:
        torch.cuda.set_rng_state(state["cuda"], device)


def seed_everything(seed: int) -> None:
    """Seed torch (CPU and all GPUs), python `random` and numpy's global generator."""
    random.seed(seed)
    np.random.seed(seed % 2**32)
    torch.manual_seed(seed)


# ---------------------------------------------------------------------------------------------
# Writing


def _sha256(path: Path) -> str:
    with open(path, "rb") as fh:
        return hashlib.file_digest(fh, "sha256").hexdigest()


def _state_dict(model: nn.Module) -> dict[str, torch.Tensor]:
    return {k: v.detach().contiguous().cpu() for k, v in model.state_dict().items()}


def _link_or_copy(src: Path, dst: Path) -> None:
    try:
        os.link(src, dst)  # free: best/ is replaced by rename, so this inode never changes
    except OSError:
        shutil.copy2(src, dst)


def save_checkpoint(work_dir: Path, step: int, model: nn.Module, optimizer: torch.optim.Optimizer,
                    scaler_state: dict[str, Any], rng_states: list[dict[str, Any]],
                    trainer: dict[str, Any], keep_last: int | None,
                    average: dict[str, Any] | None = None) -> Path:
    """Write checkpoint `step` atomically, then delete all but the newest `keep_last`. A SIGTERM
    meanwhile waits for the checkpoint to be complete (bertctl.contract.signals). `average`:
    the weight average's state (--ema)."""
    with signals.deferred():
        return _save_checkpoint(work_dir, step, model, optimizer, scaler_state, rng_states,
                                trainer, keep_last, average)


def _save_checkpoint(work_dir, step, model, optimizer, scaler_state, rng_states, trainer,
                     keep_last, average) -> Path:
    final = step_dir(work_dir, step)
    root = final.parent
    root.mkdir(parents=True, exist_ok=True)
    tmp = root / f".tmp-{final.name}-{os.getpid()}"
    if tmp.exists():
        shutil.rmtree(tmp)
    tmp.mkdir()
    try:
        save_file(_state_dict(model), str(tmp / WEIGHTS), metadata={"step": str(step)})
        torch.save(optimizer.state_dict(), tmp / OPTIMIZER)
        torch.save({"scaler": scaler_state, "rng": rng_states,
                    **({"average": average} if average is not None else {})}, tmp / STATE)
        best = Path(work_dir) / BEST / WEIGHTS
        if trainer.get("best") and best.is_file():
            _link_or_copy(best, tmp / BEST_LINK)
        (tmp / TRAINER).write_text(json.dumps(trainer, indent=1) + "\n", encoding="utf-8")
        sums = {p.name: {"sha256": _sha256(p), "size": p.stat().st_size}
                for p in sorted(tmp.iterdir())}
        (tmp / CHECKSUMS).write_text(json.dumps(sums, indent=1) + "\n", encoding="utf-8")
        if final.exists():  # a step re-run after resuming from an earlier checkpoint
            shutil.rmtree(final)
        os.replace(tmp, final)
    except BaseException as exc:
        shutil.rmtree(tmp, ignore_errors=True)   # the earlier checkpoints stay as they were
        if is_disk_full(exc):
            raise DiskFull(final) from None
        raise
    if keep_last:
        for _, old in list_checkpoints(work_dir)[:-keep_last]:
            shutil.rmtree(old, ignore_errors=True)
    return final


def remove_stale_tmp(work_dir: Path) -> None:
    """Half-written checkpoints of a killed run (rank 0 calls this before training)."""
    root = Path(work_dir) / CHECKPOINTS
    if root.is_dir():
        for p in root.glob(".tmp-step-*"):
            shutil.rmtree(p, ignore_errors=True)


def write_best(work_dir: Path, model: nn.Module, step: int) -> None:
    """Replace best/model.safetensors by rename, so it is never half-written."""
    best = Path(work_dir) / BEST
    best.mkdir(parents=True, exist_ok=True)
    tmp = best / f".{WEIGHTS}.tmp-{os.getpid()}"
    with signals.deferred():
        save_file(_state_dict(model), str(tmp), metadata={"step": str(step)})
        os.replace(tmp, best / WEIGHTS)


def best_step_on_disk(work_dir: Path) -> int | None:
    path = Path(work_dir) / BEST / WEIGHTS
    try:
        with safe_open(str(path), "pt") as f:
            return int((f.metadata() or {}).get("step", -1))
    except (OSError, SafetensorError, ValueError):
        return None


def restore_best(work_dir: Path, ckpt: Path, best_step: int | None) -> None:
    """Make best/ hold the best weights as of checkpoint `ckpt`.

    best/ may be newer than the checkpoint (an evaluation after it, in a run that then died);
    the checkpoint's own link has the weights its trainer state calls best.
    """
    best = Path(work_dir) / BEST
    if best_step is None:
        clear_best(work_dir)
        return
    if best_step_on_disk(work_dir) == best_step or not (ckpt / BEST_LINK).is_file():
        return
    best.mkdir(parents=True, exist_ok=True)
    tmp = best / f".{WEIGHTS}.tmp-{os.getpid()}"
    shutil.copy2(ckpt / BEST_LINK, tmp)
    os.replace(tmp, best / WEIGHTS)


def clear_best(work_dir: Path) -> None:
    shutil.rmtree(Path(work_dir) / BEST, ignore_errors=True)


def load_weights(path: Path, model: nn.Module) -> None:
    try:
        model.load_state_dict(load_file(str(path), device="cpu"))
    except RuntimeError as exc:  # other names or shapes: another model wrote this checkpoint
        last = str(exc).strip().splitlines()[-1].strip()
        raise BertctlError(f"{path}: does not fit this model ({last}); use the model it was "
                           f"trained with, or another work directory") from None


# ---------------------------------------------------------------------------------------------
# Reading


class CorruptCheckpoint(BertctlError):
    pass


@dataclass
class Checkpoint:
    path: Path
    step: int
    trainer: dict[str, Any]
    remedy: str = ""   # how to get past this checkpoint if it turns out corrupted

    def load_model(self, model: nn.Module) -> None:
        load_weights(self.path / WEIGHTS, model)

    def _load(self, name: str) -> Any:
        # Checksums catch a damaged file; a file written damaged (or replaced together with
        # its checksum) still fails here, and must read like any other corrupted checkpoint,
        # not as torch's multi-line advice to unpickle with weights_only=False.
        try:
            with warnings.catch_warnings():  # its pickle-protocol warnings are not for users
                warnings.simplefilter("ignore")
                return torch.load(self.path / name, map_location="cpu", weights_only=True)
        except Exception as exc:  # noqa: BLE001 - UnpicklingError, RuntimeError, EOFError, ...
            problem = " ".join(str(exc).split("\n")[0].split())[:200] or type(exc).__name__
            raise CorruptCheckpoint(f"{self.path}: checkpoint is corrupted: {name} cannot be "
                                    f"read ({type(exc).__name__}: {problem}); "
                                    f"{self.remedy}") from None

    def load_optimizer(self, optimizer: torch.optim.Optimizer) -> None:
        state = self._load(OPTIMIZER)
        try:
            optimizer.load_state_dict(state)
        except ValueError as exc:
            raise BertctlError(f"{self.path / OPTIMIZER}: does not fit this model's "
                               f"parameters ({exc})") from None

    def load_state(self) -> dict[str, Any]:
        return self._load(STATE)


def load_optimizer_state(path: Path, optimizer: torch.optim.Optimizer) -> None:
    """An earlier phase's optimizer state (torch.save of its state_dict, as a model artifact
    keeps it) into `optimizer`: the same groups of the same sizes, each moment tensor the
    shape of its parameter (torch checks the groups only; a grown vocabulary differs here)."""
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            state = torch.load(path, map_location="cpu", weights_only=True)
        params = [p for g in optimizer.param_groups for p in g["params"]]
        for index, moments in state["state"].items():
            for name, value in moments.items():
                if torch.is_tensor(value) and value.dim() and value.shape != params[index].shape:
                    raise ValueError(f"{name} of parameter {index} is {tuple(value.shape)}, the "
                                     f"parameter {tuple(params[index].shape)}")
        optimizer.load_state_dict(state)
    except Exception as exc:  # noqa: BLE001 - unpickling, a foreign layout, a shape
        problem = " ".join(str(exc).split("\n")[0].split())[:200] or type(exc).__name__
        raise BertctlError(f"{path}: not this model's optimizer state ({problem})") from None


def verify_checkpoint(path: Path) -> str | None:
    """What is wrong with checkpoint `path` (None: every file is there and matches its sha256)."""
    sums_path = path / CHECKSUMS
    try:
        sums = json.loads(sums_path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        return f"{CHECKSUMS} is missing"
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        return f"{CHECKSUMS} is unreadable ({exc})"
    if not isinstance(sums, dict) or not all(
            isinstance(v, dict) and {"sha256", "size"} <= v.keys() for v in sums.values()):
        return f"{CHECKSUMS} is malformed"
    for name in (WEIGHTS, OPTIMIZER, STATE, TRAINER):
        if name not in sums:
            return f"{CHECKSUMS} does not list {name}"
    for name, entry in sorted(sums.items()):
        f = path / name
        if not f.is_file():
            return f"{name} is missing"
        if f.stat().st_size != entry["size"] or _sha256(f) != entry["sha256"]:
            return f"{name} does not match its checksum"
    return None


def open_checkpoint(path: Path, step: int, earlier: list[int]) -> Checkpoint:
    """Verify and read checkpoint `path`; a corrupted one raises with how to get past it."""
    problem = verify_checkpoint(path)
    trainer: dict[str, Any] = {}
    if problem is None:
        try:
            trainer = json.loads((path / TRAINER).read_text(encoding="utf-8"))
            if trainer.get("step") != step:
                problem = f"{TRAINER} says step {trainer.get('step')}, not {step}"
        except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
            problem = f"{TRAINER} is unreadable ({exc})"
    if earlier:
        how = (f"to resume from the previous checkpoint instead, set resume_from to "
               f"{earlier[-1]} (or delete {path})")
    else:
        how = f"there is no earlier checkpoint: delete {path} to start from scratch"
    if problem is not None:
        raise CorruptCheckpoint(f"{path}: checkpoint is corrupted: {problem}; {how}")
    return Checkpoint(path, step, trainer, remedy=how)


def find_resume_checkpoint(work_dir: Path, resume_from: int | str) -> Checkpoint | None:
    """The checkpoint to continue from: the newest ("latest"), a given step, or none
    ("never": start over, only in an empty work directory)."""
    found = list_checkpoints(work_dir)
    steps = [s for s, _ in found]
    if resume_from == "never":
        if found:
            raise BertctlError(f"{Path(work_dir) / CHECKPOINTS}: holds checkpoints "
                               f"(steps {', '.join(map(str, steps))}) but resume_from is "
                               f"'never'; delete them or choose another work directory")
        return None
    if not found:
        if resume_from != "latest":
            raise BertctlError(f"resume_from {resume_from}: no checkpoints in "
                               f"{Path(work_dir) / CHECKPOINTS}")
        return None
    if resume_from == "latest":
        step, path = found[-1]
    else:
        if resume_from not in steps:
            raise BertctlError(f"resume_from {resume_from}: no such checkpoint in "
                               f"{Path(work_dir) / CHECKPOINTS} (have steps "
                               f"{', '.join(map(str, steps))})")
        step, path = found[steps.index(resume_from)]
    return open_checkpoint(path, step, [s for s in steps if s < step])


def set_aside_later(work_dir: Path, step: int) -> list[Path]:
    """Rename checkpoints newer than `step` out of the way (resume_from an earlier step): the
    new run rewrites those steps, and rotation must not count them. Kept, not deleted, since
    they may be what the user wants to inspect."""
    moved = []
    for s, path in list_checkpoints(work_dir):
        if s > step:
            target = path.with_name(f"{path.name}.set-aside-{os.getpid()}")
            os.replace(path, target)
            moved.append(target)
    return moved


__all__ = ["BEST", "CHECKPOINTS", "Checkpoint", "CorruptCheckpoint", "best_step_on_disk",
           "clear_best", "find_resume_checkpoint", "list_checkpoints", "load_optimizer_state",
           "load_weights",
           "open_checkpoint", "remove_stale_tmp", "restore_best", "rng_state", "save_checkpoint",
           "seed_everything", "set_aside_later", "set_rng_state", "step_dir", "verify_checkpoint",
           "write_best"]
