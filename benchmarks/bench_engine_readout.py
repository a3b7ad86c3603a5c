"""Added cost per request of the readout from the engine's own prefill (LEAP) on vLLM, against a plain request.

    VLLM_CPU_NUM_OF_RESERVED_CPU=0 VLLM_CPU_KVCACHE_SPACE=1 OMP_WAIT_POLICY=ACTIVE nice -n 10 \\
      .venv-vllm/bin/python benchmarks/bench_engine_readout.py --n-prompts 24 --reps 5 --max-tokens 4

Use the wait policy the serving runs use (ACTIVE): it sets the prefill step that the shares divide by (58 ms
ACTIVE, 122 ms PASSIVE on the same quiet cores), while the added milliseconds barely move.

One in-process engine as `make serve` runs it with `serve.predictor.source=engine` (layer-20 capture hook,
prefix caching salted per request, KV blocks of `--block-size`), one slot, so each request runs alone. For
each of the demo's test prompts (data/splits/demo, chat-templated; built-in prompts when absent), in
alternating order:
- plain: the request of `--max-tokens` tokens (add, then every step until it finishes);
- in-engine readout, the decode keeps its slot (what `lengthpred.serve.replay` does when the priority order
  would admit it at once, always when nothing waits): prefill with the state captured, the readout's
  prediction on the captured row (the RLS service of `EngineReadout`), its new priority set, then it runs on;
- in-engine readout, the decode yields its slot (when a prefill or a shorter-predicted decode waits): the
  same, then the request is aborted and its decode of `--max-tokens` − 1 tokens added, whose first step
  re-prefills the prompt's last partial KV block (the rest is in the prefix cache).
Each is timed `--reps` times per prompt and the fastest kept (the cores are shared: the minimum is the
cleanest). Added cost per prompt, against the plain request's prefill step (its first step); goal ≤ 5%:
- by parts (the headline): the hook, the readout, setting the priority, and when it yields the abort, the
  second add and its decode's first step over the plain request's second step (the re-prefilled tail); every
  other step does the same work as the plain request's;
- whole (a check, noisier): all steps, adds and readout minus the plain request's.
Also printed: each part, and the load average at the start and the end.

How often a decode yields depends on the queue. `--workload` (default: the committed demo runs) replays the
predicted-SJF runs stored there (their arrivals, prompt and answer lengths, and predictions) on the fake
engine with their fitted profile and these KV blocks (`lengthpred.serve.replay`'s two phases, no vLLM), and
prints per load the share of requests that yield, so the mean added cost per request at that load, and the
per-token latency, TTFT and JCT against FCFS and against the same predictions known at arrival (free).
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import sys
import time
from pathlib import Path

import numpy as np
import pandas as pd

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from bench_generate import prompts  # noqa: E402 (the demo's chat-templated prompts)

from lengthpred.models.serving import checkpoint_dir, load_tokenizer  # noqa: E402
from lengthpred.models.specs import embedded_serving_spec  # noqa: E402
from lengthpred.online.rls import RLSRegressor  # noqa: E402
from lengthpred.paths import REPO_ROOT  # noqa: E402
from lengthpred.serve import FakeEngine, NoPredictor, VirtualClock, get_policy, replay  # noqa: E402
from lengthpred.serve.fidelity import sim_metrics, simulate_run  # noqa: E402
from lengthpred.serve.metrics import SLO, real_run_metrics  # noqa: E402
from lengthpred.serve.predictor import EngineReadout  # noqa: E402
from lengthpred.serve.profile_fit import profile_from_dict  # noqa: E402
from lengthpred.serve.replay import PREFILL_PRIORITY, PREFILL_SUFFIX  # noqa: E402
from lengthpred.serve.vllm_engine import VLLMEngine  # noqa: E402
from lengthpred.serve.workload import ServeRequest  # noqa: E402


def _drain(eng: VLLMEngine) -> tuple[list[float], dict]:
    """Step until idle: each step's seconds and the last captured rows / first tokens seen."""
    steps, seen = [], {"captured": {}, "tokens": {}}
    while eng.has_unfinished():
        t = time.perf_counter()
        info = eng.step()
        steps.append(time.perf_counter() - t)
        seen["captured"].update(info.captured)
        seen["tokens"].update(info.token_ids)
    return steps, seen


def plain(eng: VLLMEngine, rid: str, ids: list[int], n: int) -> dict[str, float]:
    t = time.perf_counter()
    eng.add(rid, ids, n, 0, time.time())
    add = time.perf_counter() - t
    steps, _ = _drain(eng)
    return {"total": add + sum(steps), "add": add, "prefill": steps[0], "second": steps[1] if len(steps) > 1 else np.nan}


def in_engine(eng: VLLMEngine, readout: EngineReadout, rid: str, ids: list[int], n: int, split: bool
              ) -> dict[str, float]:
    pid = rid + PREFILL_SUFFIX
    hook0 = eng.capture.hook_s
    t = time.perf_counter()
    eng.add(pid, ids, n, PREFILL_PRIORITY, time.time(), capture=True, cache_salt=rid)
    add = time.perf_counter() - t
    t = time.perf_counter()
    info = eng.step()
    first = time.perf_counter() - t
    t = time.perf_counter()
    readout.predict_row(ServeRequest(rid, rid, ids, n, 0.0, float(n)), info.captured[pid])
    read = time.perf_counter() - t
    t = time.perf_counter()
    if split:  # as lengthpred.serve.replay._TwoPhase.decide does for a decode that yields its slot
        eng.abort([pid])
        eng.add(rid, ids + info.token_ids[pid][:1], n - 1, 3, time.time(), cache_salt=rid)
    else:
        eng.set_priority(pid, 3)
    add += time.perf_counter() - t
    rest, _ = _drain(eng)
    return {"total": add + read + first + sum(rest), "add": add, "prefill": first, "second": rest[0],
            "readout": read, "hook": eng.capture.hook_s - hook0}


class _Stored(NoPredictor):
    """An in-engine readout that answers with the predictions a stored run made."""

    in_engine = True

    def __init__(self, pred: dict[str, float]) -> None:
        super().__init__()
        self.pred = pred

    def predict_row(self, req: ServeRequest, row: np.ndarray) -> float:
        return self.pred[req.rid]


def yield_shares(run_dir: Path, block_size: int) -> pd.DataFrame:
    """Per stored predicted-SJF run: the share of requests whose decode yields its slot under the in-engine
    readout, and its latencies against FCFS and against the same predictions at arrival (fake engine)."""
    prof = dataclasses.replace(profile_from_dict(json.loads((run_dir / "profile.json").read_text())),
                               block_size=block_size)
    req = pd.read_parquet(run_dir / "serve_requests.parquet")
    rows = []
    for (load, seed), g in req[req["policy"] == "sjf"].groupby(["load", "seed"]):
        reqs = [ServeRequest(q.rid, q.prompt_id, [1] * int(q.prompt_tokens), int(q.target_tokens), float(q.arrival),
                             0.0) for q in g.itertuples()]
        m = {}
        for name, pred, pol in (("engine", _Stored(dict(zip(g["rid"], g["prediction"], strict=True))), "sjf"),
                                ("fcfs", NoPredictor(), "fcfs")):
            clock = VirtualClock()
            run = replay(reqs, FakeEngine(prof, clock), get_policy(pol), pred, clock)
            m[name] = real_run_metrics(run.requests, run.steps, run.end, SLO())
            if name == "engine":
                share = float(run.requests["split"].mean())
        at = simulate_run(g.assign(ready=g["arrival"], prefill_first=False), get_policy("sjf"), prof)
        m["at_arrival"] = sim_metrics(at, SLO())
        rows.append({"load": load, "seed": seed, "yield_share": share,
                     **{f"{k}_{v}": m[v][f"{k}_mean"] for k in ("per_token_latency", "ttft", "jct")
                        for v in ("fcfs", "engine", "at_arrival")}})
    return pd.DataFrame(rows)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--n-prompts", type=int, default=24)
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--max-tokens", type=int, default=4)
    ap.add_argument("--block-size", type=int, default=32)
    ap.add_argument("--layer", type=int, default=20)
    ap.add_argument("--data", default="demo")
    ap.add_argument("--workload", default=str(REPO_ROOT / "data/reference/smollm2-135m/serve_demo"),
                    help="a serve run folder whose predicted-SJF runs give the yield shares ('' for none)")
    a = ap.parse_args()
    spec = embedded_serving_spec()
    ids_all = prompts(a.n_prompts, load_tokenizer(spec), a.data)
    eng = VLLMEngine(checkpoint_dir(spec), max_model_len=2048, max_num_seqs=1, max_num_batched_tokens=2048,
                     capture_layer=a.layer, prefix_caching=True, engine_args={"block_size": a.block_size})
    rng = np.random.default_rng(0)
    d = 576
    readout = EngineReadout(RLSRegressor(10.0).fit(rng.normal(size=(2 * d, d)), rng.uniform(5, 500, 2 * d)),
                            capture=eng.capture)
    load0 = os.getloadavg()
    variants = {"plain": lambda tag, ids: plain(eng, tag, ids, a.max_tokens),
                "kept": lambda tag, ids: in_engine(eng, readout, tag, ids, a.max_tokens, split=False),
                "yielded": lambda tag, ids: in_engine(eng, readout, tag, ids, a.max_tokens, split=True)}
    for k in range(3):  # warm-up
        for name, f in variants.items():
            f(f"w{k}-{name}", ids_all[k % len(ids_all)])
    rows = []
    for i, ids in enumerate(ids_all):
        runs: dict[str, list[dict]] = {name: [] for name in variants}
        for rep in range(a.reps):
            order = list(variants)[rep % 3:] + list(variants)[: rep % 3]  # rotate, so drift hits all alike
            for name in order:
                runs[name].append(variants[name](f"r{rep}-p{i}-{name}", ids))
        best = {name: {k: min(x[k] for x in v) for k in v[0]} for name, v in runs.items()}
        pl = best["plain"]
        row = {"prompt_tokens": len(ids), "tail_tokens": len(ids) + 1 - a.block_size * (len(ids) // a.block_size),
               "prefill_s": pl["prefill"]}
        for name in ("kept", "yielded"):
            b = best[name]
            row[f"{name}_parts_s"] = (b["add"] - pl["add"]) + b["readout"] + b["hook"] + (b["second"] - pl["second"])
            row[f"{name}_whole_s"] = b["total"] - pl["total"]
            row[f"{name}_second_extra_s"] = b["second"] - pl["second"]
            row[f"{name}_hook_s"], row[f"{name}_readout_s"] = b["hook"], b["readout"]
        rows.append(row)
    readout.close()
    load1 = os.getloadavg()
    r = {k: np.array([x[k] for x in rows], dtype=float) for k in rows[0]}
    med = lambda k: float(np.median(r[k]))  # noqa: E731
    out = {"prompts": len(rows), "reps": a.reps, "max_tokens": a.max_tokens, "block_size": a.block_size,
           "prompt_tokens_median": med("prompt_tokens"), "tail_tokens_mean": float(r["tail_tokens"].mean()),
           "prefill_ms_median": 1e3 * med("prefill_s"), "loadavg_start": load0[0], "loadavg_end": load1[0]}
    for name in ("kept", "yielded"):
        out[name] = {"added_ms_median": 1e3 * med(f"{name}_parts_s"),
                     "added_over_prefill_median": float(np.median(r[f"{name}_parts_s"] / r["prefill_s"])),
                     "whole_over_prefill_median": float(np.median(r[f"{name}_whole_s"] / r["prefill_s"])),
                     "second_step_extra_ms_median": 1e3 * med(f"{name}_second_extra_s"),
                     "hook_ms_median": 1e3 * med(f"{name}_hook_s"), "readout_ms_median": 1e3 * med(f"{name}_readout_s")}
    print(json.dumps(out, indent=1))
    for name, what in (("kept", "keeps its slot"), ("yielded", "yields its slot")):
        o = out[name]
        print(f"added cost per request when its decode {what}: {o['added_ms_median']:.2f} ms median = "
              f"{100 * o['added_over_prefill_median']:.1f}% of its prefill step ({out['prefill_ms_median']:.1f} ms); "
              f"goal <= 5%. Hook {o['hook_ms_median']:.3f} ms, readout {o['readout_ms_median']:.3f} ms, next step "
              f"{o['second_step_extra_ms_median']:+.2f} ms; whole-request difference "
              f"{100 * o['whole_over_prefill_median']:.1f}% (noisier)")
    print(f"load average {load0[0]:.1f} -> {load1[0]:.1f}; re-prefilled tail {out['tail_tokens_mean']:.1f} tokens mean")
    if a.workload and (Path(a.workload) / "serve_requests.parquet").is_file():
        sh = yield_shares(Path(a.workload), a.block_size).groupby("load").mean(numeric_only=True).drop(columns="seed")
        kept, yld = out["kept"]["added_over_prefill_median"], out["yielded"]["added_over_prefill_median"]
        sh["mean_added_over_prefill"] = (1 - sh["yield_share"]) * kept + sh["yield_share"] * yld
        print(f"\nthe stored predicted-SJF runs of {a.workload} on the fake engine (their profile, blocks of "
              f"{a.block_size}), means over repeats:\n{sh.round(3).to_string()}")


if __name__ == "__main__":
    main()
