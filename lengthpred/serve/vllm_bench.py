"""One measured run: a real `vllm serve` (stock, or with lengthpred's plugin) and vLLM's own client,
`vllm bench serve`, unmodified, against it over HTTP. What the client writes is vLLM's result JSON.

A run starts its own server (so every run starts from the same readout and an empty cache), warms it with one
request outside the measurement, runs the client, and stops the server with SIGINT (the plugin writes its
checkpoint and stats at shutdown: `--shutdown-timeout`). The commands are built here and nowhere else, so the
docs can print exactly what ran (`serve_command`, `bench_command`).
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import time
import urllib.error
import urllib.request
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from lengthpred.errors import ConfigError, ModelError

SCHEDULER_CLS = "lengthpred.vllm_plugin.scheduler.LengthAwareScheduler"
READOUT_ENV = "LENGTHPRED_READOUT"


@dataclass(frozen=True)
class Arm:
    """A way to serve: stock vLLM (`plugin` None) or the plugin with these `--additional-config` options."""

    name: str
    plugin: Mapping[str, Any] | None = None


ARMS = {
    "stock-fcfs": Arm("stock-fcfs"),
    "plugin-fcfs": Arm("plugin-fcfs", {"policy": "fcfs"}),
    "plugin-sjf": Arm("plugin-sjf", {"policy": "sjf"}),
    "plugin-sjf-aging": Arm("plugin-sjf-aging", {"policy": "sjf", "aging_weight": 300.0}),
    "plugin-srpt": Arm("plugin-srpt", {"policy": "srpt", "max_yields": 2}),
}


_TUNED = re.compile(r"plugin-(?P<policy>sjf|srpt)(?:-aging@(?P<weight>[^-]*))?(?:-y(?P<yields>[^-]*))?"
                    r"(?:-d(?P<deadline>[^-]*))?")
_GRAMMAR = "plugin-<sjf|srpt>[-aging@<weight>][-y<max_yields>][-d<deadline_s>]"
_PARTS = (("weight", "aging_weight", float, 0, "the aging weight after '@' (tokens²/s)"),
          ("yields", "max_yields", int, 0, "the yield cap after '-y'"),
          ("deadline", "deadline_s", float, 1, "the deadline after '-d' (seconds)"))


def arm(name: str) -> Arm:
    """An arm by name. Beside the named ones, `plugin-<sjf|srpt>[-aging@<weight>][-y<max_yields>][-d<deadline_s>]`
    sets the aging weight (whole tokens²/s), the yield cap and the deadline (whole seconds) to tune them (the name is
    part of each run's file name, so the numbers are digits only): `plugin-sjf-aging@3000-y1` is SJF aged at 3000
    whose decodes yield at most once; `plugin-sjf-d30` is SJF where a request 30 s old is passed over no more."""
    if name in ARMS:
        return ARMS[name]
    m = _TUNED.fullmatch(name)
    if m is None or all(m[part] is None for part, *_ in _PARTS):
        raise ConfigError(f"serve arm {name!r}; valid: {', '.join(ARMS)}, or {_GRAMMAR}")
    opts: dict[str, Any] = dict(ARMS[f"plugin-{m['policy']}"].plugin or {})
    for part, option, kind, least, what in _PARTS:
        if m[part] is None:
            continue
        if not m[part].isdigit() or int(m[part]) < least:
            raise ConfigError(f"serve arm {name!r}: {what} must be a whole number >= {least}")
        opts[option] = kind(m[part])
    return Arm(name, opts)


@dataclass(frozen=True)
class ServerSpec:
    """The server every arm shares: the vLLM venv, the model folder and the engine's settings."""

    venv: Path
    model: str
    served_name: str = "served"
    dtype: str = "bfloat16"
    max_model_len: int = 2048
    max_num_seqs: int = 4
    port: int = 8035
    env: Mapping[str, str] = field(default_factory=dict)
    extra_args: tuple[str, ...] = ()

    @property
    def vllm(self) -> str:
        return str(self.venv / "bin" / "vllm")

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}"


def serve_command(spec: ServerSpec, a: Arm, *, checkpoint: Path | None = None, request_log: Path | None = None
                  ) -> list[str]:
    cmd = [spec.vllm, "serve", spec.model, "--served-model-name", spec.served_name, "--dtype", spec.dtype,
           "--max-model-len", str(spec.max_model_len), "--max-num-seqs", str(spec.max_num_seqs),
           "--port", str(spec.port), "--shutdown-timeout", "30", *spec.extra_args]
    if a.plugin is not None:
        opts = dict(a.plugin) | {"stats_every_s": 0}
        if checkpoint is not None:
            opts["checkpoint_path"] = str(checkpoint)
        if request_log is not None:
            opts["request_log"] = str(request_log)
        cmd += ["--scheduler-cls", SCHEDULER_CLS, "--additional-config", json.dumps({"lengthpred": opts})]
    return cmd


def serve_env(spec: ServerSpec, a: Arm, readout: Path | None) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k != READOUT_ENV} | dict(spec.env)
    if a.plugin is not None:
        if readout is None:
            raise ConfigError(f"arm {a.name} serves with the plugin: it needs a readout file")
        env[READOUT_ENV] = str(readout)
    return env


@dataclass(frozen=True)
class Workload:
    """What `vllm bench serve` sends: a custom dataset file in order, at a rate with a burstiness."""

    dataset: Path  # JSON lines {"prompt": <templated text>}; sent as is (--skip-chat-template, --disable-shuffle)
    n_requests: int
    request_rate: float  # requests per second; inf: all at once
    burstiness: float = 1.0
    seed: int = 0
    max_tokens: int = 512  # natural end of sequence, capped here
    temperature: float = 0.7
    top_p: float = 0.9
    ignore_eos: bool = False  # every request generates exactly max_tokens (identical work across arms)


def bench_command(spec: ServerSpec, w: Workload, result_dir: Path, result_file: str, tokenizer: str) -> list[str]:
    return [spec.vllm, "bench", "serve", "--backend", "openai", "--base-url", spec.base_url,
            "--endpoint", "/v1/completions", "--model", spec.served_name, "--tokenizer", tokenizer,
            "--dataset-name", "custom", "--dataset-path", str(w.dataset), "--skip-chat-template", "--disable-shuffle",
            "--custom-output-len", str(w.max_tokens), "--num-prompts", str(w.n_requests),
            "--request-rate", str(w.request_rate), "--burstiness", str(w.burstiness), "--seed", str(w.seed),
            "--temperature", str(w.temperature), "--top-p", str(w.top_p), "--extra-body", json.dumps({"seed": w.seed}),
            "--percentile-metrics", "ttft,tpot,itl,e2el", "--metric-percentiles", "50,90,99",
            "--save-result", "--save-detailed", "--result-dir", str(result_dir), "--result-filename", result_file,
            "--disable-tqdm", *(["--ignore-eos"] if w.ignore_eos else [])]


class Server:
    """A `vllm serve` process for one run (a context manager: stopped with SIGINT on exit)."""

    def __init__(self, spec: ServerSpec, a: Arm, readout: Path | None, log_path: Path, *,
                 checkpoint: Path | None = None, request_log: Path | None = None, start_timeout_s: float = 600.0):
        self.spec, self.arm, self.log_path = spec, a, log_path
        self.cmd = serve_command(spec, a, checkpoint=checkpoint, request_log=request_log)
        self.env = serve_env(spec, a, readout)
        self.start_timeout_s = start_timeout_s
        self.proc: subprocess.Popen | None = None
        self.start_s = float("nan")

    def __enter__(self) -> Server:
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        t0 = time.monotonic()
        with open(self.log_path, "w") as log:
            self.proc = subprocess.Popen(self.cmd, env=self.env, stdout=log, stderr=subprocess.STDOUT,
                                         start_new_session=True)
        while time.monotonic() - t0 < self.start_timeout_s:
            if self.proc.poll() is not None:
                raise ModelError(f"vllm serve ({self.arm.name}) exited with {self.proc.returncode} before it was "
                                 f"ready: {_last_line(self.log_path)} (log: {self.log_path})")
            if _ready(self.spec.base_url):
                self.start_s = time.monotonic() - t0
                return self
            time.sleep(1.0)
        self.stop()
        raise ModelError(f"vllm serve ({self.arm.name}) not ready after {self.start_timeout_s:.0f} s (log: {self.log_path})")

    def warm_up(self) -> None:
        """One short request outside the measurement (the first request pays for lazy initialisation)."""
        body = json.dumps({"model": self.spec.served_name, "prompt": "Hello, who are you?", "max_tokens": 8}).encode()
        req = urllib.request.Request(self.spec.base_url + "/v1/completions", body,
                                     {"Content-Type": "application/json"})
        with urllib.request.urlopen(req, timeout=120) as r:
            r.read()

    def stop(self) -> int | None:
        if self.proc is None or self.proc.poll() is not None:
            return None if self.proc is None else self.proc.returncode
        os.killpg(self.proc.pid, signal.SIGINT)
        try:
            return self.proc.wait(timeout=90)
        except subprocess.TimeoutExpired:
            os.killpg(self.proc.pid, signal.SIGKILL)
            return self.proc.wait()

    def __exit__(self, *exc: object) -> None:
        self.stop()


def _ready(base_url: str) -> bool:
    try:
        with urllib.request.urlopen(base_url + "/v1/models", timeout=2) as r:
            return r.status == 200
    except (urllib.error.URLError, OSError):
        return False


def _last_line(path: Path) -> str:
    try:
        lines = [ln.strip() for ln in path.read_text(errors="replace").splitlines() if ln.strip()]
    except OSError:
        return "no log"
    errors = [ln for ln in lines if "lengthpred:" in ln or "Error" in ln]
    return (errors or lines or ["no output"])[-1][:300]


def run_bench(spec: ServerSpec, w: Workload, result_path: Path, tokenizer: str, log_path: Path) -> dict[str, Any]:
    """vLLM's client against a running server; its result JSON (loaded). A failed client is one line."""
    result_path.parent.mkdir(parents=True, exist_ok=True)
    cmd = bench_command(spec, w, result_path.parent, result_path.name, tokenizer)
    with open(log_path, "w") as log:
        rc = subprocess.run(cmd, stdout=log, stderr=subprocess.STDOUT, env=dict(os.environ)).returncode
    if rc != 0 or not result_path.is_file():
        raise ModelError(f"vllm bench serve failed (exit {rc}): {_last_line(log_path)} (log: {log_path})")
    return json.loads(result_path.read_text())
