"""Data-parallel stages under torchrun / `accelerate launch`: one shard per process, a real process group.

    torchrun --nproc-per-node 4 scripts/extract.py device=cuda     # 4 GPUs, shard RANK/4 each
    torchrun --nproc-per-node 2 scripts/extract.py                 # 2 CPU processes (gloo)

`launcher_shard(cfg)` gives each process its slice, `RANK/WORLD_SIZE` (a `shard=` of its own under a launcher is
refused: every process would write the same slice). `process_group(device)` joins the launcher's group (NCCL on
CUDA, gloo elsewhere) for the stage's duration; `group.barrier()` waits for every rank, after which rank 0 checks
and reports the whole store while the others return. Outside a launcher (WORLD_SIZE unset or 1) the group is a
no-op of one process, so the same stage code runs alone, under a Slurm array (`shard=i/n` per job), or here.
"""

from __future__ import annotations

import contextlib
import datetime
import logging
import os
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from lengthpred.errors import ConfigError
from lengthpred.stages.shards import parse_shard

log = logging.getLogger(__name__)
# how long a rank waits at the barrier for the slowest: shards of a long extraction can finish hours apart
BARRIER_TIMEOUT = datetime.timedelta(hours=24)


def world() -> tuple[int, int]:
    """(RANK, WORLD_SIZE) as torchrun / accelerate set them; (0, 1) outside a launcher."""
    try:
        size = int(os.environ.get("WORLD_SIZE", "1"))
        rank = int(os.environ.get("RANK", "0"))
    except ValueError:
        raise ConfigError(f"RANK={os.environ.get('RANK')!r} / WORLD_SIZE={os.environ.get('WORLD_SIZE')!r} are not "
                          "integers") from None
    if size > 1 and not 0 <= rank < size:
        raise ConfigError(f"RANK={rank} is outside WORLD_SIZE={size}")
    return rank, max(size, 1)


def launcher_shard(cfg: Any) -> str:
    """This process's `shard`: `RANK/WORLD_SIZE` under a launcher (WORLD_SIZE > 1), else the config's own."""
    rank, size = world()
    if size == 1:
        return str(cfg.get("shard") or "0/1")
    if parse_shard(cfg.get("shard")) != (0, 1):
        raise ConfigError(f"shard={cfg.shard} given under a launcher with WORLD_SIZE={size}: leave shard unset, each "
                          f"process takes RANK/WORLD_SIZE (or run the shards as separate jobs without torchrun)")
    return f"{rank}/{size}"


@dataclass
class Group:
    """This process's place in the launcher's process group (a group of one outside a launcher)."""

    rank: int = 0
    size: int = 1
    backend: str | None = None

    @property
    def is_main(self) -> bool:
        return self.rank == 0

    def barrier(self) -> None:
        """Wait until every rank got here (no-op alone)."""
        if self.backend is not None:
            import torch.distributed as dist

            dist.barrier()


@contextlib.contextmanager
def process_group(device: Any) -> Iterator[Group]:
    """Join the launcher's process group for the block (NCCL when `device` is a GPU, gloo otherwise); alone:
    a group of one. The group is left at the end whatever happens, so a failing rank does not hang the others
    past their own barrier timeout."""
    rank, size = world()
    if size == 1:
        yield Group()
        return
    import torch
    import torch.distributed as dist

    cuda = getattr(device, "type", str(device)) == "cuda"
    backend = "nccl" if cuda else "gloo"
    if cuda:
        torch.cuda.set_device(device)
    owned = not dist.is_initialized()
    if owned:
        dist.init_process_group(backend=backend, timeout=BARRIER_TIMEOUT,
                                **({"device_id": device} if cuda else {}))
    log.info("rank %d of %d joined the process group (%s)", rank, size, backend)
    try:
        yield Group(rank, size, backend)
    finally:
        if owned and dist.is_initialized():
            dist.destroy_process_group()
