"""The simulator's fidelity over stored serve folders on one page (lengthpred.lab.fidelity_overview): each
folder replayed by the current simulator on its own calibration profile (as `scripts/serve.py
serve.resimulate=<folder>`), then per folder the per-run |simulated − real| / real of the means, the cells and the
runs that meet the goal (≤ 5% on means, ≤ 10% on p90s), under four replays: the calibration profile, the previous
run's speed, the speed of the window before, each run's own speed; then whether the simulator forecasts the
paired gains (each policy over FCFS, over prefill-first FCFS and, for aging, over SJF) that the engine measured
(lengthpred.lab.gain_fidelity).

    python scripts/serve_fidelity_overview.py RUN_DIR [RUN_DIR ...] [--window-s 2] [--out FILE.md]

A folder split in parts run on one profile (a/, b/) is merged first. No engine: 10–60 s a folder on 2 cores.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import pandas as pd
from tqdm import tqdm

from lengthpred.errors import LengthpredError
from lengthpred.lab.fidelity_overview import REPLAYS, folder_fidelity, overview_page
from lengthpred.lab.gain_fidelity import gain_fidelity
from lengthpred.serve.summary import BASELINES, describe, load_folder, serve_folder
from lengthpred.serve.tables_cli import emit
from lengthpred.stages.serve import resimulated


def folder_gains(fid: pd.DataFrame) -> pd.DataFrame:
    """Every policy over FCFS and over prefill-first FCFS, and aging over SJF (what it buys and costs, item 6)."""
    parts = [gain_fidelity(fid, b, skip=BASELINES[:i]) for i, b in enumerate(BASELINES)]
    aging = gain_fidelity(fid, "sjf")
    return pd.concat([*parts, aging[aging["policy"] == "sjf-aging"]], ignore_index=True)


def replay_rows(run_dirs: list[Path], window_s: float) -> tuple[dict[str, list], dict[str, list]]:
    """Per replay (`REPLAYS`): [(folder, workload, FolderFidelity)] and [(folder, gain rows)], each folder replayed
    once on its own calibration profile (docsgen commits these as the overview page's rows)."""
    rows: dict[str, list] = {attr: [] for attr in REPLAYS}
    gains: dict[str, list] = {attr: [] for attr in REPLAYS}
    for d in tqdm(run_dirs, desc="folders", unit="folder"):
        with serve_folder(d) as run:  # a folder in parts is merged once, here
            workload = describe(load_folder(run))
            res = resimulated(run, speed_window_s=window_s)[0]
        for attr in REPLAYS:
            rows[attr].append((d.name, workload, folder_fidelity(getattr(res, attr))))
            gains[attr].append((d.name, folder_gains(getattr(res, attr))))
    return rows, gains


def main(argv: list[str]) -> int:
    ap = argparse.ArgumentParser(description=__doc__.strip().splitlines()[0])
    ap.add_argument("run_dirs", type=Path, nargs="+", help="serve run folders (scripts/serve.py's output)")
    ap.add_argument("--window-s", type=float, default=2.0, help="speed windows of the tracking replay, s (default 2)")
    ap.add_argument("--out", type=Path, help="also write the tables to this Markdown file")
    a = ap.parse_args(argv)
    if not a.window_s > 0:
        print(f"error: --window-s must be a positive number of seconds, got {a.window_s}", file=sys.stderr)
        return 2
    try:
        rows, gains = replay_rows(a.run_dirs, a.window_s)
    except LengthpredError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    return emit(overview_page(rows, gains, a.window_s), a.out)


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
