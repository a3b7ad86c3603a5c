"""Where a prefill-first serve run's yielded decodes stall, real against the simulator
(lengthpred.lab.stall_anatomy):

    python scripts/serve_stall_anatomy.py RUN_DIR [--window-s 10]

prints two Markdown tables per folder, over the runs served prefill first (the engine readout, fcfs-pf): the
decodes that yielded their slot in the run and in the replays (at each run's own speed, and at its speed over
--window-s second windows) with their stalls; and per policy, the re-prefilled tail tokens against the model, the
steps that ended a stall (measured / modelled time) and TPOT's mean error per run in both replays.
"""

from __future__ import annotations

import sys

import numpy as np
import pandas as pd

from lengthpred.lab.anatomy_cli import summarize_folder
from lengthpred.lab.stall_anatomy import summarize
from lengthpred.serve.tables_cli import md_table


def _mean(x: pd.Series) -> str:
    return f"{np.nanmean(x):.2f}" if np.isfinite(x).any() else "–"


def yields_table(req: pd.DataFrame) -> str:
    rows = []
    for name, g in [*req.groupby("policy", sort=False), ("all", req)]:
        both = g[g["yielded_real"] & g["yielded_own"]]
        agree = (g["yielded_real"] == g["yielded_own"]).mean()
        rows.append([name, str(len(g)), str(int(g["yielded_real"].sum())), str(int(g["yielded_own"].sum())),
                     str(int(g["yielded_win"].sum())), f"{agree:.0%}", str(len(both)),
                     f"{_mean(both['stall_real'])} / {_mean(both['stall_own'])} / {_mean(both['stall_win'])}"])
    return md_table(["policy", "decodes", "yielded: real", "replay, own speed", "replay, speed windows",
                "same choice (real vs own speed)", "yielded in both", "stall real / own speed / windows (s)"], rows)


def runs_table(run: pd.DataFrame) -> str:
    rows = []
    for name, g in [*run.groupby("policy", sort=False), ("all", run)]:
        w = g["stall_steps"].to_numpy(float)
        ratio = np.nansum(g["stall_step_ratio"] * w) / w.sum() if w.sum() else float("nan")
        own, win = g["tpot_err_own"].abs(), g["tpot_err_win"].abs()
        rows.append([name, str(len(g)), f"{int(g['tail_real'].sum())} / {int(g['tail_model'].sum())}",
                     f"{int(g['stall_steps'].sum())}: {ratio:.3f}", f"{own.mean():.1%} ({own.max():.1%})",
                     f"{win.mean():.1%} ({win.max():.1%})"])
    return md_table(["policy", "runs", "re-prefilled tail tokens: engine / model", "steps that ended a stall: n, "
                "measured / modelled", "TPOT mean abs err, own speed (worst run)", "same, speed windows"], rows)


def main(argv: list[str]) -> int:
    got = summarize_folder(argv, __doc__.strip().splitlines()[0], summarize)
    if got is None:
        return 2
    run_dir, window_s, (req, run) = got
    if run.empty:
        print(f"error: {run_dir} has no run served prefill first (policies fcfs-pf, or a predictor reading "
              f"the engine's own prefill)", file=sys.stderr)
        return 2
    print(f"{run_dir}: {len(run)} runs served prefill first, each replayed at its own speed and over "
          f"{window_s:g} s speed windows\n")
    print("Decodes (answers of 2 tokens or more) that yielded their slot when their prefill ended:\n")
    print(yields_table(req))
    print("Per policy, over its runs:\n")
    print(runs_table(run), end="")
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
