"""How much of a serve run's gain is the prefill-first order and how much the prediction: `python
scripts/serve_order_effect.py <serve run folder>`.

With `serve.predictor.source=engine` predicted-SJF serves every request's prefill first (its prediction comes
from that prefill), while the FCFS and oracle runs admit whole requests. The simulator, on the run's own
fitted profile, replays each repeat's requests four ways: FCFS and the predicted-SJF run's priorities, each
with and without the prefill-first order, so the two effects can be read apart. Means over the repeats.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import numpy as np
import pandas as pd

from lengthpred.serve.fidelity import sim_metrics, simulate_run
from lengthpred.serve.metrics import SLO
from lengthpred.serve.priority import get_policy
from lengthpred.stages.serve import load_profile_fit

METRICS = ("per_token_latency_mean", "per_token_latency_p50", "ttft_mean", "ttft_p50", "jct_mean")


def order_effect(run_dir: Path) -> pd.DataFrame:
    req = pd.read_parquet(run_dir / "serve_requests.parquet")
    profile = load_profile_fit(run_dir / "profile.json").profile
    meta = json.loads((run_dir / "serve.json").read_text())
    sim = (meta.get("config") or {}).get("sim") or {}  # the run's serve config
    rows = []
    for (load, seed), r in req.groupby(["load", "seed"]):
        fcfs = r[r["policy"] == "fcfs"].reset_index(drop=True)
        sjf = r[r["policy"] == "sjf"].reset_index(drop=True)
        if fcfs.empty or sjf.empty:
            continue
        cases = {"fcfs": (fcfs, "fcfs"), "sjf (predictions)": (sjf, "sjf")}
        for label, (base, pol) in cases.items():
            for first in (False, True):
                q = base.assign(prefill_first=first, ready=base["arrival"])  # predictions known at arrival
                m = sim_metrics(simulate_run(q, get_policy(pol), profile, sim), SLO())
                rows.append({"load": load, "seed": seed, "order": label, "prefill_first": first,
                             **{k: m[k] for k in METRICS}})
    return pd.DataFrame(rows)


def main(argv: list[str]) -> int:
    if len(argv) != 1 or not (Path(argv[0]) / "serve_requests.parquet").is_file():
        print("usage: python scripts/serve_order_effect.py <serve run folder with serve_requests.parquet>",
              file=sys.stderr)
        return 2
    t = order_effect(Path(argv[0]))
    means = t.groupby(["load", "order", "prefill_first"])[list(METRICS)].mean()
    fcfs = means.xs(("fcfs", False), level=("order", "prefill_first"))
    gain = 1 - means.div(fcfs, level="load")
    print(f"simulated, means over {t['seed'].nunique()} repeats (s; gain vs FCFS admitting whole requests):")
    print(pd.concat({"mean": means, "gain": gain}, axis=1).round(3).to_string())
    print("n seeds:", t.groupby(["load"])["seed"].nunique().to_dict(), "| rows:", len(t), "| nan:",
          int(np.isnan(t[list(METRICS)].to_numpy()).sum()))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
