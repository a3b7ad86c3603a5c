"""Is a serve folder's run-to-run step-time drift the machine's speed or the profile's coefficients?
(lengthpred.lab.steadiness.drift_sources): per stored folder, the spread of the runs' drift on the calibration
profile beside its spread on one profile fitted on all the folder's runs (in sample), how much it changed from
one run to the next, and how it follows the runs' mean batch.

    python scripts/serve_drift_sources.py RUN_DIR [RUN_DIR ...] [--out FILE.md]

A folder split in parts run on one profile (a/, b/) is merged first. Reads stored steps only: about a second a folder.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np

from lengthpred.errors import LengthpredError
from lengthpred.lab.steadiness import drift_sources
from lengthpred.lab.ttft_anatomy import load_stored
from lengthpred.serve.paired import RUN_KEYS
from lengthpred.serve.summary import serve_folder
from lengthpred.serve.tables_cli import emit, md_table

HEAD = ["folder", "runs", "drift", "sd over runs: calibration profile", "sd: one profile fitted on all runs (in sample)",
        "median change from the run before", "Spearman with mean batch"]


def main(argv: list[str]) -> int:
    ap = argparse.ArgumentParser(description=__doc__.strip().splitlines()[0])
    ap.add_argument("run_dirs", type=Path, nargs="+", help="serve run folders (scripts/serve.py's output)")
    ap.add_argument("--out", type=Path, help="also write the table to this Markdown file")
    a = ap.parse_args(argv)
    rows, cal, pooled = [], [], []
    try:
        for d in a.run_dirs:
            with serve_folder(d) as run:
                st = load_stored(run)
            runs = [s.reset_index(drop=True) for _, s in st.steps.groupby(RUN_KEYS, sort=False)]
            r = drift_sources(runs, st.profile, st.settings.fit_skip)
            cal.append(r["sd_calibration"])
            pooled.append(r["sd_pooled"])
            rows.append([d.name, str(r["runs"]), f"{r['drift_min']:.2f}–{r['drift_max']:.2f}",
                         f"{100 * r['sd_calibration']:.1f}%", f"{100 * r['sd_pooled']:.1f}%",
                         f"{100 * r['changed_previous']:.1f}%", f"{r['rho_batch']:+.2f}"])
    except (LengthpredError, ValueError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    rows.append(["**median**", "", "", f"**{100 * np.median(cal):.1f}%**", f"**{100 * np.median(pooled):.1f}%**", "", ""])
    return emit("**Each run's step-time drift, measured / modelled: its spread over a folder's runs**\n\n"
                + md_table(HEAD, rows), a.out)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
