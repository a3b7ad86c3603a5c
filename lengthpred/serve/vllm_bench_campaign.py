"""Paired repeats of `vllm bench serve` against stock vLLM and the lengthpred plugin: one folder per cell
(a load and a burstiness), resumable, committed as it is written.

Per cell:
- the capacity: the median over bursts of vLLM's own `request_throughput` when `n_requests` validation prompts
  arrive at once under stock FCFS (a drained burst; its tail runs a partly empty batch, so this is a little
  below the full-batch rate); a cell may reuse another cell's (`capacity.json`);
- repeat k serves its own `n_requests` test prompts, drawn without replacement from the pool (disjoint across the
  cell's repeats), at `load` × capacity with request seed `seed · 1000 + k`: the same prompts and arrivals for
  every arm of the repeat (the paired unit);
- the arms run in an order rotated from repeat to repeat, so a steady drift of the machine's speed does not
  become a policy effect;
- each run starts its own server from the same readout (its checkpoint goes to a scratch file), so no run
  learns from another.

Files: `manifest.json` (settings, commands, versions, machine), `capacity.json`, `prompts/repeat_kk.ids.json`
(prompt ids only: the texts stay in the datasets), and per run `runs/rkk_<arm>.json.gz` (vLLM's result JSON
with its per-request detail, generated texts left out), `.requests.jsonl` (the plugin's per-request log) and
`.stats.json` (the plugin's counters).
"""

from __future__ import annotations

import datetime as dt
import gzip
import hashlib
import json
import logging
import math
import shutil
import tempfile
import time
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import numpy as np

from lengthpred.errors import ConfigError, DataError
from lengthpred.machine import git_commit, machine
from lengthpred.serve.vllm_bench import (
    Arm,
    Server,
    ServerSpec,
    Workload,
    bench_command,
    run_bench,
    serve_command,
)

log = logging.getLogger("lengthpred.serve")


@dataclass(frozen=True)
class Cell:
    name: str
    load: float
    burstiness: float = 1.0
    n_requests: int = 40
    repeats: int = 10
    seed: int = 0
    capacity_bursts: int = 3
    capacity_from: str | None = None  # another cell folder whose capacity.json this one reuses

    def validate(self, pool: int) -> None:
        if not (math.isfinite(self.load) and self.load > 0):
            raise ConfigError(f"serve_bench.load={self.load}: a positive fraction of capacity")
        if not (math.isfinite(self.burstiness) and self.burstiness > 0):
            raise ConfigError(f"serve_bench.burstiness={self.burstiness}: must be > 0 (1: Poisson)")
        if self.n_requests < 2 or self.repeats < 1:
            raise ConfigError(f"serve_bench: n_requests={self.n_requests} (>= 2), repeats={self.repeats} (>= 1)")
        if self.n_requests * self.repeats > pool:
            raise ConfigError(f"serve_bench: {self.repeats} repeats x {self.n_requests} requests without replacement "
                              f"need {self.n_requests * self.repeats} prompts; the pool has {pool}")


def prompt_sets(pool: Sequence[str], n: int, repeats: int, seed: int) -> list[list[str]]:
    """Disjoint draws without replacement: repeat k gets its own `n` prompts."""
    order = np.random.default_rng(seed).permutation(len(pool))
    return [[pool[i] for i in order[k * n:(k + 1) * n]] for k in range(repeats)]


def rotated(arms: Sequence[Arm], k: int) -> list[Arm]:
    """Repeat k's arm order: the list rotated by k, so each arm runs in each position equally often."""
    j = k % len(arms)
    return list(arms[j:]) + list(arms[:j])


def write_dataset(path: Path, ids: Sequence[str], texts: Mapping[str, str]) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "w") as f:
        for i in ids:
            f.write(json.dumps({"prompt": texts[i]}) + "\n")
    return path


def _slim(result: dict[str, Any]) -> dict[str, Any]:
    """vLLM's result JSON without the generated texts (the model's answers: large, and not needed)."""
    return {k: v for k, v in result.items() if k != "generated_texts"}


def _await_stats(path: Path, finished: int, timeout_s: float = 60.0) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        try:
            if json.loads(path.read_text()).get("finished", 0) >= finished:
                return
        except (OSError, ValueError):
            pass
        time.sleep(0.5)


def _lines(path: Path) -> int:
    return len(path.read_text().splitlines()) if path.is_file() else 0


def _file_sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


class Campaign:
    """One cell's folder: measure (or reuse) the capacity, then run every (repeat, arm) not yet on disk."""

    def __init__(self, folder: Path, cell: Cell, arms: Sequence[Arm], server: ServerSpec, readout: Path,
                 tokenizer: str, texts: Mapping[str, str], pool: Sequence[str], capacity_pool: Sequence[str],
                 vllm_version: str = "", max_tokens: int = 512) -> None:
        cell.validate(len(pool))
        if not readout.is_file():
            raise DataError(f"readout file {readout} does not exist (scripts/train.py head=linear writes one)")
        self.folder, self.cell, self.arms, self.server = Path(folder), cell, list(arms), server
        self.readout, self.tokenizer, self.texts = readout, tokenizer, texts
        self.sets = prompt_sets(list(pool), cell.n_requests, cell.repeats, cell.seed)
        self.capacity_pool = list(capacity_pool)
        self.scratch = Path(tempfile.mkdtemp(prefix="lengthpred-bench-"))
        self.vllm_version = vllm_version
        self.max_tokens = int(max_tokens)  # the client's answer cap (natural end of sequence below it)

    # -- files ---------------------------------------------------------------------------------------------------
    def run_stem(self, k: int, a: Arm) -> Path:
        return self.folder / "runs" / f"r{k:02d}_{a.name}"

    def write_manifest(self) -> None:
        spec = self.server
        example = Workload(Path("prompts/repeat_00.jsonl"), self.cell.n_requests, 0.0, self.cell.burstiness, 0,
                           self.max_tokens)
        manifest = {
            "cell": asdict(self.cell), "arms": [{"name": a.name, "plugin": a.plugin} for a in self.arms],
            "max_tokens": example.max_tokens,
            "order": {f"r{k:02d}": [a.name for a in rotated(self.arms, k)] for k in range(self.cell.repeats)},
            "server": {"model": spec.model, "served_name": spec.served_name, "dtype": spec.dtype,
                       "max_model_len": spec.max_model_len, "max_num_seqs": spec.max_num_seqs, "env": dict(spec.env),
                       "extra_args": list(spec.extra_args)},
            "readout": {"path": str(self.readout), "sha256": _file_sha256(self.readout)},
            "commands": {a.name: serve_command(spec, a) for a in self.arms} | {
                "bench": bench_command(spec, example, Path("runs"), "<run>.json", self.tokenizer)},
            "vllm": self.vllm_version, "commit": git_commit(), "started": dt.datetime.now(dt.timezone.utc).isoformat(),
            "machine": machine(),
        }
        self.folder.mkdir(parents=True, exist_ok=True)
        path = self.folder / "manifest.json"
        if path.is_file():  # resuming: keep the first start's record, add this one
            old = json.loads(path.read_text())
            manifest["resumed"] = old.get("resumed", []) + [manifest.pop("started")]
            manifest["started"] = old.get("started")
        path.write_text(json.dumps(manifest, indent=2) + "\n")
        for k, ids in enumerate(self.sets):
            p = self.folder / "prompts" / f"repeat_{k:02d}.ids.json"
            p.parent.mkdir(parents=True, exist_ok=True)
            p.write_text(json.dumps(ids) + "\n")

    # -- capacity ----------------------------------------------------------------------------------------------------
    def capacity(self) -> float:
        path = self.folder / "capacity.json"
        if self.cell.capacity_from:
            src = Path(self.cell.capacity_from) / "capacity.json"
            if not src.is_file():
                raise DataError(f"serve_bench.capacity_from: {src} does not exist (run that cell first)")
            shutil.copyfile(src, path)
        if path.is_file():
            return float(json.loads(path.read_text())["capacity_rps"])
        stock = next((a for a in self.arms if a.plugin is None), Arm("stock-fcfs"))
        ids = self.capacity_pool[: self.cell.n_requests]
        if len(ids) < self.cell.n_requests:
            raise ConfigError(f"serve_bench: the capacity burst needs {self.cell.n_requests} prompts, the pool has {len(ids)}")
        data = write_dataset(self.scratch / "capacity.jsonl", ids, self.texts)
        bursts = []
        for b in range(self.cell.capacity_bursts):
            res = self._run(stock, Workload(data, len(ids), math.inf, 1.0, 10_000 + b, self.max_tokens),
                            self.folder / "capacity" / f"burst_{b}", scratch_readout=None)
            bursts.append({"burst": b, "request_throughput": res["request_throughput"], "duration": res["duration"],
                           "completed": res["completed"], "output_throughput": res["output_throughput"]})
        cap = float(np.median([b["request_throughput"] for b in bursts]))
        path.write_text(json.dumps({"capacity_rps": cap, "bursts": bursts, "prompts": ids,
                                    "how": "median over bursts of vLLM bench's request_throughput, all requests at "
                                           "once, stock FCFS"}, indent=2) + "\n")
        return cap

    # -- runs --------------------------------------------------------------------------------------------------------
    def _run(self, a: Arm, w: Workload, stem: Path, *, scratch_readout: Path | None) -> dict[str, Any]:
        stem.parent.mkdir(parents=True, exist_ok=True)
        logs = self.scratch / "logs"
        ckpt = self.scratch / f"{stem.name}.live.safetensors"
        ckpt.unlink(missing_ok=True)
        reqlog = self.scratch / f"{stem.name}.requests.jsonl"
        reqlog.unlink(missing_ok=True)
        with Server(self.server, a, scratch_readout, logs / f"{stem.name}.serve.log", checkpoint=ckpt,
                    request_log=reqlog) as srv:
            srv.warm_up()
            n_warm = _lines(reqlog)  # the warm-up request's line: not part of the run
            result = run_bench(self.server, w, self.scratch / f"{stem.name}.json", self.tokenizer,
                               logs / f"{stem.name}.bench.log")
            result["lengthpred_server_start_s"] = srv.start_s
            if a.plugin is not None:  # the plugin writes its stats when the last request has left
                _await_stats(ckpt.with_suffix(".stats.json"), n_warm + int(result["completed"]) + int(result["failed"]))
        with gzip.open(stem.with_suffix(".json.gz"), "wt") as f:
            json.dump(_slim(result), f)
        stats = ckpt.with_suffix(".stats.json")
        if a.plugin is not None:
            if not stats.is_file():
                raise DataError(f"{a.name}: the plugin wrote no stats at shutdown ({stats}); see {logs}")
            shutil.copyfile(stats, stem.with_suffix(".stats.json"))
            lines = reqlog.read_text().splitlines(keepends=True) if reqlog.is_file() else []
            stem.with_suffix(".requests.jsonl").write_text("".join(lines[n_warm:]))
        return result

    def run(self) -> list[Path]:
        self.write_manifest()
        rate_cap = self.capacity()
        rate = self.cell.load * rate_cap
        done = []
        for k, ids in enumerate(self.sets):
            data = write_dataset(self.scratch / f"repeat_{k:02d}.jsonl", ids, self.texts)
            w = Workload(data, len(ids), rate, self.cell.burstiness, self.cell.seed * 1000 + k, self.max_tokens)
            for a in rotated(self.arms, k):
                stem = self.run_stem(k, a)
                if stem.with_suffix(".json.gz").is_file():
                    continue
                log.info("%s: repeat %d, %s (%.3f req/s)", self.cell.name, k, a.name, rate)
                self._run(a, w, stem, scratch_readout=self.readout if a.plugin is not None else None)
                done.append(stem)
        return done
