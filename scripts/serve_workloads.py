"""The simulator's fidelity across serving workloads (issue 24, item 5): stored serve runs, one folder per workload,
each replayed on the profile it was given; one table of per-run |simulated − real| / real (mean over runs, worst run)
per workload, so a miss at one setting cannot hide behind another.

    python scripts/serve_workloads.py NAME=RUN_DIR [NAME=RUN_DIR ...] [--out table.md]
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import pandas as pd

from lengthpred.serve.report import FID_COLUMNS

SHOWN = [m for m, _ in FID_COLUMNS]
IN_SAMPLE = ("per_token_latency_mean", "ttft_mean", "jct_mean")


def workload_rows(name: str, run_dir: Path) -> pd.DataFrame:
    fid = pd.read_csv(run_dir / "serve_fidelity.csv")
    meta = json.loads((run_dir / "serve.json").read_text())
    fid = fid[fid["metric"].isin(SHOWN)].assign(workload=name, max_batch=meta["limits"]["max_batch"],
                                                capacity=meta["capacity_req_s"])
    ins = run_dir / "fidelity_in_sample_summary.csv"
    if ins.is_file():  # the same model refitted on this workload's own steps: is a miss the form or the calibration?
        f = pd.read_csv(ins).set_index("metric")
        fid = fid.assign(**{f"in_sample_{m}": float(f.loc[[m], "max_abs_err"].max()) if m in f.index else float("nan")
                            for m in IN_SAMPLE})
    return fid


def table(fid: pd.DataFrame) -> str:
    head = ["workload", "runs", "step-time drift", *(c[1] for c in FID_COLUMNS),
            "refitted on its own steps: worst ptl / TTFT / JCT mean"]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for name, g in fid.groupby("workload", sort=False):
        runs = g.drop_duplicates(["policy", "load", "seed"])
        cells = []
        for m in SHOWN:
            e = g.loc[g["metric"] == m, "abs_err"]
            cells.append(f"{100 * e.mean():.1f}% ({100 * e.max():.1f}%)" if e.notna().any() else "—")
        drift = f"{runs['drift'].min():.3f}–{runs['drift'].max():.3f}" if "drift" in runs else "—"
        cols = [f"in_sample_{m}" for m in IN_SAMPLE]
        ins = " / ".join(f"{100 * g[c].max():.0f}%" for c in cols) if all(c in g for c in cols) else "—"
        lines.append(f"| {name} | {len(runs)} | {drift} | " + " | ".join(cells) + f" | {ins} |")
    means = fid[fid["metric"].str.endswith("_mean")]
    lines += ["", f"Cells: |simulated − real| / real of each run, mean over the workload's runs (worst run). Worst run "
              f"on a mean: {100 * means['abs_err'].max():.1f}% (goal ≤ 5%); on any metric shown: "
              f"{100 * fid['abs_err'].max():.1f}% (goal ≤ 10% on p90). {int((means['abs_err'] > 0.05).sum())} of "
              f"{int(means['abs_err'].notna().sum())} run × mean cells miss 5%."]
    return "\n".join(lines)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("runs", nargs="+", help="NAME=RUN_DIR (a serve run folder)")
    ap.add_argument("--out", type=Path, help="also write the table (markdown) here")
    a = ap.parse_args()
    parts = []
    for item in a.runs:
        name, sep, d = item.partition("=")
        if not sep:
            ap.error(f"{item!r}: give NAME=RUN_DIR")
        if not (Path(d) / "serve_fidelity.csv").is_file():
            ap.error(f"{d}: not a serve run folder (no serve_fidelity.csv)")
        parts.append(workload_rows(name, Path(d)))
    t = table(pd.concat(parts, ignore_index=True))
    print(t)
    if a.out:
        a.out.write_text(t + "\n")


if __name__ == "__main__":
    main()
