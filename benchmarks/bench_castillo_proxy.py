"""What one MiniLM proxy fit costs on CASTILLO, per max_seq_len: the unit of a proxy search's cost (issue 25).

Reads a finished castillo run directory (union/, split.json; any heads) and fits one proxy by the castillo
stage's own path (lengthpred.crossmodel.fits.fit_one → lengthpred.heads.run_training) on a per-dataset
slice of its split, on the all-models target:

    .venv/bin/python benchmarks/bench_castillo_proxy.py --run-dir outputs/castillo/runs/<time> \
        --max-seq-len 128 512 --epochs 1 --per-dataset 15 6 9
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

from lengthpred.crossmodel.fits import HeadSpec, fit_one
from lengthpred.crossmodel.inputs import PromptInputs
from lengthpred.crossmodel.table import ALL_MODELS, LengthTable
from lengthpred.heads import HeadSettings


def slice_split(split: dict[str, list[str]], dataset_of: dict[str, str], per: dict[str, int]) -> dict[str, list[str]]:
    """The first per[part] prompts of each dataset in each part of the run's split."""
    out: dict[str, list[str]] = {}
    for part, ids in split.items():
        seen: dict[str, int] = {}
        out[part] = []
        for i in ids:
            if seen.get(dataset_of[i], 0) < per[part]:
                out[part].append(i)
                seen[dataset_of[i]] = seen.get(dataset_of[i], 0) + 1
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--run-dir", type=Path, required=True)
    ap.add_argument("--head", default="proxy_reg")
    ap.add_argument("--max-seq-len", type=int, nargs="+", default=[128, 512])
    ap.add_argument("--epochs", type=int, default=1)
    ap.add_argument("--per-dataset", type=int, nargs=3, default=[15, 6, 9], metavar=("TRAIN", "VAL", "TEST"))
    a = ap.parse_args()
    need = [a.run_dir / "union" / "lengths.npz", a.run_dir / "union" / "prompts.jsonl", a.run_dir / "split.json"]
    missing = [str(p) for p in need if not p.is_file()]
    if missing:
        raise SystemExit(f"error: --run-dir is not a finished castillo run: missing {', '.join(missing)}")
    table = LengthTable.load(need[0])
    recs = {r["id"]: r for r in map(json.loads, need[1].read_text(encoding="utf-8").splitlines())}
    sub = slice_split(json.loads(need[2].read_text()), {i: r["dataset"] for i, r in recs.items()},
                      dict(zip(("train", "val", "test"), a.per_dataset, strict=True)))
    ids = [i for part in sub.values() for i in part]
    inputs = PromptInputs.build([recs[i] for i in ids], None, [], dict.fromkeys(ids, 0))
    for msl in a.max_seq_len:
        cfg = HeadSettings(params={"epochs": a.epochs, "max_seq_len": msl, "progress": False, "random_state": 0})
        t0 = time.perf_counter()
        rec, _ = fit_one(HeadSpec(a.head, cfg, None, (ALL_MODELS,)), ALL_MODELS, inputs, table, sub, 2)
        print(f"{a.head} max_seq_len={msl} epochs={a.epochs} train={rec['n_train']} val={rec['n_val']} "
              f"test={len(sub['test'])}: {rec['status']}, {time.perf_counter() - t0:.1f} s", flush=True)


if __name__ == "__main__":
    main()
