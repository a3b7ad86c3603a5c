"""Does the engine's speed on identical work hold over a serve folder's minutes? One burst, served again and again.

`bench_machine_steadiness.py` times the bare machine. This one asks the same of the vLLM engine: the demo's FCFS
calibration burst (the same 24 requests at t = 0, `serve.calibration_requests`) served N times on one engine,
with the fixed decode-like step (`steadiness.decode_like_step`) timed for 10 s before each burst in the same
process. The work is identical, so a burst's step time over the first burst's is the speed alone, and how its
2 s windows wander against the first burst's same steps is speed alone too; against the profile fitted on the
first burst (robust) they also carry the step model's misfit (`steadiness.repeated_bursts`). About 2 min a
burst on 2 cores; alone, on quiet cores, from the vLLM venv:

    VLLM_CPU_NUM_OF_RESERVED_CPU=0 VLLM_CPU_KVCACHE_SPACE=1 OMP_WAIT_POLICY=ACTIVE \\
        .venv-vllm/bin/python benchmarks/bench_engine_steadiness.py --bursts 15 --out outputs/engine_steadiness
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

import numpy as np
import pandas as pd
from hydra import compose, initialize_config_dir
from hydra.utils import instantiate

import lengthpred.cli  # noqa: F401  (registers conf/head_params)
from lengthpred.lab.steadiness import burst_table, changes, decode_like_step
from lengthpred.metrics import spearman_or_nan
from lengthpred.models import load_tokenizer
from lengthpred.serve.engine import EngineLimits
from lengthpred.serve.predictor import NoPredictor
from lengthpred.serve.priority import get_policy
from lengthpred.serve.replay import replay
from lengthpred.serve.workload import draw_requests, make_requests
from lengthpred.stages.serve import load_inputs, make_engine, settings_from_cfg

CONF = Path(__file__).resolve().parents[1] / "conf"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--bursts", type=int, default=15)
    ap.add_argument("--kernel-s", type=float, default=10.0, help="seconds of the fixed step before each burst")
    ap.add_argument("--out", type=Path, default=Path("outputs/engine_steadiness"))
    ap.add_argument("--stored", type=Path, help="summarize a stored run (its steps.parquet and kernel.parquet) instead")
    a = ap.parse_args()
    a.out.mkdir(parents=True, exist_ok=True)
    if a.stored:
        limits = EngineLimits(max_batch=4, token_budget=2048, kv_blocks=1 << 20, block_size=16, max_model_len=2048)
        summarize(pd.read_parquet(a.stored / "steps.parquet"), pd.read_parquet(a.stored / "kernel.parquet"), limits,
                  a.out)
        return
    if a.bursts < 2:
        raise SystemExit(f"--bursts {a.bursts}: need at least 2 bursts to compare")
    with initialize_config_dir(config_dir=str(CONF), version_base="1.3"):
        cfg = compose(config_name="config", overrides=["experiment=demo", "serve.policies=[fcfs]", "logger=disabled"])
    s = settings_from_cfg(cfg)
    pool, *_ = load_inputs(cfg, load_tokenizer(instantiate(cfg.model)))
    engine, clock = make_engine(cfg)
    picks = draw_requests(pool, s.calibration_requests, seed=10_000)  # the calibration burst's requests
    kernel = decode_like_step()
    steps, probe = [], []
    t0 = time.perf_counter()
    for i in range(a.bursts):
        times, end = [], time.perf_counter() + a.kernel_s
        while time.perf_counter() < end:
            t = time.perf_counter()
            kernel()
            times.append(time.perf_counter() - t)
        probe.append({"burst": i, "t": time.perf_counter() - t0, "kernel_ms": 1000 * float(np.median(times[2:]))})
        reqs = make_requests(pool, picks, np.zeros(len(picks)), tag=f"burst{i}", cap=s.natural_cap)
        run = replay(reqs, engine, get_policy("fcfs"), NoPredictor(), clock)
        steps.append(run.steps.assign(burst=i))
        print(f"burst {i}: {len(run.steps)} steps; fixed step {probe[-1]['kernel_ms']:.1f} ms at {probe[-1]['t']:.0f} s",
              flush=True)
        pd.concat(steps).to_parquet(a.out / "steps.parquet")  # after every burst: a crash loses one burst
        pd.DataFrame(probe).to_parquet(a.out / "kernel.parquet")
    summarize(pd.concat(steps, ignore_index=True), pd.DataFrame(probe), engine.limits, a.out)


def summarize(steps: pd.DataFrame, probe: pd.DataFrame, limits: EngineLimits, out: Path) -> None:
    """Per burst (`steadiness.burst_table`, 2 s and 10 s windows) into `out`/bursts.csv, and the spread printed."""
    table = burst_table(steps, probe, limits).merge(
        burst_table(steps, probe, limits, window_s=10.0)[["burst", "wander_profile", "wander_first"]],
        on="burst", suffixes=("_2s", "_10s"))
    table.to_csv(out / "bursts.csv", index=False)
    print(table.round(4).to_string(index=False))
    d, k, later = table["drift"].to_numpy(), table["kernel_vs_first"].to_numpy(), table.iloc[1:]
    print(f"engine: drift {d.min():.3f}–{d.max():.3f}, sd {d.std(ddof=1):.2%}, change from the burst before: median "
          f"{np.median(changes(d)):.2%}, largest {changes(d).max():.2%}")
    print(f"fixed step: {k.min():.3f}–{k.max():.3f} of the first, sd {k.std(ddof=1):.2%}, change from the burst "
          f"before: median {np.median(changes(k)):.2%}, largest {changes(k).max():.2%}; "
          f"Spearman with the engine's drift {spearman_or_nan(d, k):+.2f}")
    for w in ("2s", "10s"):
        print(f"inside a burst, {w} windows (median over bursts after the first): against the profile "
              f"{later[f'wander_profile_{w}'].median():.2%}, against the first burst's same steps "
              f"{later[f'wander_first_{w}'].median():.2%}")


if __name__ == "__main__":
    main()
