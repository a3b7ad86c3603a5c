"""The plugin's settings: the readout file (environment variable `LENGTHPRED_READOUT`, read in every process vLLM
starts) and the scheduler's options (`--additional-config '{"lengthpred": {...}}'`, vLLM's own channel for a
plugin's options, read in the engine-core process). Every value is checked before the server starts; a bad one is
one line (`ConfigError`).

Options (`PluginSettings`, defaults in brackets):
- `policy` [sjf]: `fcfs` (vLLM's own order: the control, with prediction and updates running), `sjf` (prefill
  first, then decodes by predicted length), `srpt` (by predicted remaining length: prediction − tokens generated);
- `aging_weight` [0]: tokens² per second; a decode's key becomes p − weight · (seconds since arrival) / p, so a
  long request cannot wait for ever (`lengthpred.sched.core.policies.AgingSJF`);
- `max_yields` [null]: how many times one request may give up its slot after running (the preemption cap);
- `max_prefill_slots` [null]: while prefilled requests wait for a slot, at most this many of the batch's slots go to new
  prefills in one step (a slot none of them takes still goes to a new request; null: no limit);
- `deadline_s` [null]: seconds since arrival after which a request is no longer passed over: overdue requests take
  the slots oldest first, before new prefills that arrived after them (a hard bound beside aging's soft one);
- `updates` [thread]: where completions update the RLS readout: `thread` (off the step's path), `inline` (in the
  engine core between steps), `off` (a frozen readout);
- `checkpoint_every` [100]: write the adapted readout after this many updates (and at shutdown);
- `checkpoint_path` [<readout>.live.safetensors]: where; a restart resumes from it when it exists;
- `stats_every_s` [60]: period of the `lengthpred:` stats log line (0: only at shutdown);
- `rows_timeout_s` [30]: how long the scheduler waits for a step's prefill states from the worker;
- `row_cache` [1024]: prompts whose prefill state is kept by their token ids, for a prompt sent again (vLLM's prefix
  cache then recomputes only its last token, and the model sends no state for a one-token chunk);
- `request_log` [null]: a JSON-lines file getting one line per finished request (id, arrival, prompt tokens,
  predicted and actual output tokens, finish reason, yields): what the readout predicted beside what happened.
"""

from __future__ import annotations

import math
import os
from dataclasses import dataclass, fields
from pathlib import Path
from typing import Any

from lengthpred.errors import ConfigError

READOUT_ENV = "LENGTHPRED_READOUT"
CONFIG_KEY = "lengthpred"
POLICIES = ("fcfs", "sjf", "srpt")
UPDATE_MODES = ("thread", "inline", "off")


@dataclass(frozen=True)
class PluginSettings:
    readout: Path
    policy: str = "sjf"
    aging_weight: float = 0.0
    max_yields: int | None = None
    max_prefill_slots: int | None = None
    deadline_s: float | None = None
    updates: str = "thread"
    checkpoint_every: int = 100
    checkpoint_path: Path | None = None
    stats_every_s: float = 60.0
    rows_timeout_s: float = 30.0
    row_cache: int = 1024
    request_log: Path | None = None

    @property
    def checkpoint(self) -> Path:
        return self.checkpoint_path or self.readout.with_name(self.readout.name.removesuffix(".safetensors")
                                                              + ".live.safetensors")

    @classmethod
    def from_sources(cls, env: dict[str, str] | os._Environ, additional_config: dict[str, Any] | None
                     ) -> PluginSettings:
        """The readout from `env`, the options from vLLM's `additional_config["lengthpred"]`."""
        readout = readout_path(env)
        if readout is None:
            raise ConfigError(f"the lengthpred scheduler needs a readout file: set {READOUT_ENV}=<file> "
                              "(written by `scripts/train.py head=linear`, see docs/how-to/serve-with-vllm.md)")
        raw = (additional_config or {}).get(CONFIG_KEY)
        if raw is not None and not isinstance(raw, dict):
            raise ConfigError(f"--additional-config lengthpred={raw!r}: expected an object of options, e.g. "
                              '{"lengthpred": {"policy": "sjf"}}')
        opts = dict(raw or {})
        known = {f.name for f in fields(cls)} - {"readout"}
        unknown = sorted(set(opts) - known)
        if unknown:
            raise ConfigError(f"--additional-config lengthpred: unknown option(s) {unknown}; valid: {sorted(known)}")
        s = cls(readout=readout, **_typed(opts))
        s.validate()
        return s

    def validate(self) -> None:
        def bad(name: str, why: str) -> ConfigError:
            return ConfigError(f"--additional-config lengthpred.{name}={getattr(self, name)!r}: {why}")

        if self.policy not in POLICIES:
            raise bad("policy", f"valid: {', '.join(POLICIES)}")
        if not (math.isfinite(self.aging_weight) and self.aging_weight >= 0):
            raise bad("aging_weight", "must be a finite number >= 0 (tokens² per second)")
        if self.max_yields is not None and self.max_yields < 0:
            raise bad("max_yields", "must be >= 0 or null")
        if self.deadline_s is not None and not (math.isfinite(self.deadline_s) and self.deadline_s > 0):
            raise bad("deadline_s", "must be > 0 seconds or null")
        if self.max_prefill_slots is not None and self.max_prefill_slots < 1:
            raise bad("max_prefill_slots", "must be >= 1 or null")
        if self.updates not in UPDATE_MODES:
            raise bad("updates", f"valid: {', '.join(UPDATE_MODES)}")
        if self.checkpoint_every < 1:
            raise bad("checkpoint_every", "must be >= 1")
        if not (math.isfinite(self.stats_every_s) and self.stats_every_s >= 0):
            raise bad("stats_every_s", "must be >= 0 seconds")
        if self.row_cache < 0:
            raise bad("row_cache", "must be >= 0 prompts")
        if not (math.isfinite(self.rows_timeout_s) and self.rows_timeout_s > 0):
            raise bad("rows_timeout_s", "must be > 0 seconds")
        if self.policy == "fcfs":  # vLLM's own order: an option of the length policies would do nothing
            for name in ("aging_weight", "max_yields", "max_prefill_slots", "deadline_s"):
                if getattr(self, name):
                    raise bad(name, "shapes a length policy (sjf, srpt); with policy fcfs it would do nothing")

    @staticmethod
    def check_engine(scheduler_config: Any) -> None:
        """Refuse, in one line, vLLM scheduler settings the plugin cannot plan under."""
        if getattr(scheduler_config, "async_scheduling", False):
            raise ConfigError("lengthpred's scheduler plans each step from the one before: serve without "
                              "--async-scheduling")
        policy = str(getattr(scheduler_config, "policy", "fcfs"))
        if policy != "fcfs":
            raise ConfigError(f"lengthpred's scheduler orders vLLM's first-come-first-served queue itself: serve "
                              f"without --scheduling-policy {policy} (the plugin's option policy chooses the order)")


def readout_path(env: dict[str, str] | os._Environ) -> Path | None:
    """The readout file named by `LENGTHPRED_READOUT`, or None when the variable is unset or empty."""
    value = (env.get(READOUT_ENV) or "").strip()
    return Path(value).expanduser() if value else None


_KINDS: dict[str, type] = {"policy": str, "aging_weight": float, "max_yields": int, "max_prefill_slots": int,
                           "deadline_s": float,
                           "updates": str, "checkpoint_every": int, "checkpoint_path": Path, "stats_every_s": float,
                           "rows_timeout_s": float, "row_cache": int, "request_log": Path}


def _typed(opts: dict[str, Any]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for k, v in opts.items():
        kind = _KINDS[k]
        if v is None and k in ("max_yields", "max_prefill_slots", "deadline_s", "checkpoint_path", "request_log"):
            out[k] = None
            continue
        ok = (isinstance(v, str) if kind in (str, Path)
              else isinstance(v, int) and not isinstance(v, bool) if kind is int
              else isinstance(v, (int, float)) and not isinstance(v, bool))
        if not ok:
            raise ConfigError(f"--additional-config lengthpred.{k}={v!r}: expected a {kind.__name__}")
        out[k] = Path(v).expanduser() if kind is Path else kind(v)
    return out
