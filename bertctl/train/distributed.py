"""Data-parallel plumbing: torchrun detection, the process group, DDP and a few collectives.

Everything here also works in a plain single process (world size 1), where the collectives are
no-ops, so the training loop has one code path. Under `torchrun` the environment carries RANK,
WORLD_SIZE and LOCAL_RANK (and MASTER_ADDR/MASTER_PORT for the rendezvous); the process group uses
NCCL on CUDA and gloo on CPU.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from datetime import timedelta

import torch
import torch.distributed as dist
from torch import nn

from bertctl import hardware
from torch.nn.parallel import DistributedDataParallel as DDP


# How long a rank waits in a collective before the run fails: the other ranks wait at a
# barrier while rank 0 writes a checkpoint (a large model's weights and optimizer state to a
# network disk take minutes; NCCL's default gives up after 10).
COLLECTIVE_TIMEOUT = timedelta(hours=1)


@dataclass(frozen=True)
class DistInfo:
    rank: int
    world_size: int
    local_rank: int
    device: torch.device

    @property
    def is_main(self) -> bool:
        return self.rank == 0


def launched_by_torchrun() -> bool:
    return "RANK" in os.environ and "WORLD_SIZE" in os.environ


def resolve_device(device: str, local_rank: int = 0) -> torch.device:
    return hardware.resolve_device(device, local_rank)


def init(device: str = "auto") -> DistInfo:
    """Join the torchrun process group if launched by torchrun (idempotent) and pick the device.

    Call it before anything rank-dependent (the stages call it to know whether they are rank 0);
    `train` calls it too. The caller owns the group's lifetime: call `cleanup()` at the very end.
    """
    if not launched_by_torchrun():
        return DistInfo(0, 1, 0, resolve_device(device))
    rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    local_rank = int(os.environ.get("LOCAL_RANK", "0"))
    dev = resolve_device(device, local_rank)
    if dev.type == "cuda":
        # Before the group exists, so NCCL's communicator and every later CUDA call use this GPU.
        torch.cuda.set_device(dev)
    if world > 1 and not dist.is_initialized():
        backend = "nccl" if dev.type == "cuda" else "gloo"
        kwargs = {"device_id": dev} if dev.type == "cuda" else {}
        dist.init_process_group(backend=backend, rank=rank, world_size=world,
                                timeout=COLLECTIVE_TIMEOUT, **kwargs)
    return DistInfo(rank, world, local_rank, dev)


def active() -> bool:
    return dist.is_available() and dist.is_initialized() and dist.get_world_size() > 1


def rank() -> int:
    return dist.get_rank() if active() else 0


def world_size() -> int:
    return dist.get_world_size() if active() else 1


def is_main() -> bool:
    return rank() == 0


def barrier() -> None:
    if active():
        dist.barrier()


def all_reduce_sum(t: torch.Tensor) -> torch.Tensor:
    """Sum `t` over ranks in place (and return it); identity in a single process."""
    if active():
        dist.all_reduce(t, op=dist.ReduceOp.SUM)
    return t


def average_gradients(model: nn.Module) -> None:
    """The mean of the ranks' gradients, in place: what DDP does, for a model whose backward
    DDP cannot follow (one that runs its encoder again: cached negatives). One collective over
    the gradients flattened together."""
    if not active():
        return
    grads = [p.grad for p in model.parameters() if p.grad is not None]
    if not grads:
        return
    flat = torch._utils._flatten_dense_tensors(grads)
    dist.all_reduce(flat, op=dist.ReduceOp.SUM)
    flat /= world_size()
    for g, averaged in zip(grads, torch._utils._unflatten_dense_tensors(flat, grads)):
        g.copy_(averaged)


def all_gather_object(obj: object) -> list[object]:
    """Every rank's `obj` (a list in rank order). Used for the per-rank RNG states that rank 0
    stores in a checkpoint; the objects travel between our own processes only."""
    if not active():
        return [obj]
    out: list[object] = [None] * world_size()
    dist.all_gather_object(out, obj)
    return out


def wrap(model: nn.Module, info: DistInfo, find_unused_parameters: bool = False) -> nn.Module:
    """DDP-wrap `model` (already on info.device) when there is more than one process."""
    if not active():
        return model
    ids = [info.device.index] if info.device.type == "cuda" else None
    # Gradients as views of DDP's buckets: one copy of them, not two (memory.state_bytes).
    return DDP(model, device_ids=ids, find_unused_parameters=find_unused_parameters,
               gradient_as_bucket_view=True)


def cleanup() -> None:
    if dist.is_available() and dist.is_initialized():
        dist.destroy_process_group()


__all__ = ["DistInfo", "active", "all_gather_object", "average_gradients", "all_reduce_sum", "barrier", "cleanup",
           "init", "is_main", "launched_by_torchrun", "rank", "resolve_device",
           "world_size", "wrap"]
