"""Why the simulator's TTFT misses a stored serve run, replayed at each run's own speed (lengthpred.lab.ttft_anatomy):

    python scripts/serve_ttft_anatomy.py RUN_DIR [--window-s 10]

prints four Markdown tables per policy: requests admitted at once (in both the real run and the replay) against
those that waited for a slot; how much 1% of step time moves a run's mean TTFT and JCT; the spread of the
machine's speed (measured / modelled step time) over windows of --window-s seconds inside a run; and, replayed
while tracking the engine's speed over 2 s windows (as `serve.speed_window_s=2`), the mean TTFT's error per run
with and without the two requests whose first token moved most, and their share of the run's TTFT error.
"""

from __future__ import annotations

import sys

import numpy as np
import pandas as pd

from lengthpred.lab.anatomy_cli import summarize_folder
from lengthpred.lab.ttft_anatomy import summarize
from lengthpred.serve.tables_cli import md_table


def _pair(g: pd.DataFrame, col: str) -> str:
    return f"{g[f'{col}_real'].mean():.3f} / {g[f'{col}_sim'].mean():.3f}" if len(g) else "–"


def groups_table(req: pd.DataFrame) -> str:
    rows = []
    for name, g in [*req.groupby("policy", sort=False), ("all", req)]:
        once, waited, total = g[g["at_once"]], g[~g["at_once"]], np.nansum(np.abs(g["err"]))
        share = [f"{np.nansum(np.abs(x['err'])) / total:.1%}" if total > 0 else "–" for x in (once, waited)]
        rows.append([name, str(len(once)), _pair(once, "wait"), _pair(once, "step"), share[0],
                     str(len(waited)), _pair(waited, "wait"), share[1]])
    return md_table(["policy", "at once: n", "wait for the step, real / sim (s)", "prefill step, real / sim (s)",
                "share of Σ abs TTFT err", "waited: n", "wait for a slot, real / sim (s)",
                "share of Σ abs TTFT err"], rows)


def runs_table(run: pd.DataFrame, cols: dict[str, str]) -> str:
    g = run.groupby("policy", sort=False)
    rows = [[name, str(len(x)), *(f"{np.nanmean(np.abs(x[c])):.1%}" for c in cols)] for name, x in
            [*g, ("all", run)]]
    return md_table(["policy", "runs", *cols.values()], rows)


def main(argv: list[str]) -> int:
    got = summarize_folder(argv, __doc__.strip().splitlines()[0], summarize)
    if got is None:
        return 2
    run_dir, window_s, (req, run) = got
    print(f"{run_dir}: {len(run)} runs, each replayed at its own speed\n")
    print("Requests admitted at once (real and replay) vs those that waited for a slot, means:\n")
    print(groups_table(req))
    print("Per 1% of step time (own speed × 1.01 vs × 0.99), mean over runs:\n")
    print(runs_table(run, {"ttft": "abs Δ mean TTFT / real", "jct": "abs Δ mean JCT / real"}))
    print(f"The machine's speed inside a run, over {window_s:g} s windows, mean over runs:\n")
    print(runs_table(run, {"window_sd": "SD of measured / modelled step time (÷ run drift)"}))
    print("Tracking the engine's speed over 2 s windows (out of sample within the run), mean over runs:\n")
    print(runs_table(run, {"ttft_tracked": "abs err of mean TTFT", "ttft_tracked_wo_movers":
                           "the same without its 2 largest movers", "movers_share": "their share of Σ abs TTFT err"}),
          end="")
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
