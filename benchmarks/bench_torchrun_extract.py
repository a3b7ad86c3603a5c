"""Data-parallel extraction: `torchrun --nproc-per-node 2 scripts/extract.py` against one process, on the tiny model.

    .venv/bin/python benchmarks/bench_torchrun_extract.py                 # 600 prompts, 3 repetitions
    .venv/bin/python benchmarks/bench_torchrun_extract.py --n 300 --reps 1

A synthetic trace of `--n` prompts (60-240 words) is prepared once; each repetition extracts the tiny model's default
feature set (every layer, every pool and fusion) into a fresh data folder, first with one process, then with two
ranks over gloo (each rank one shard, a barrier, rank 0 checks the store). Reported: the wall time of each whole
command (Python start, imports, model load, extraction, the check), the extraction seconds each rank logs, and
`ratio` = two-rank wall / (one-process wall / 2): 1.0 is perfect scaling, the goal is at most 1.2. torchrun gives
each rank OMP_NUM_THREADS=1; the one process keeps torch's default threads (`--threads` to pin them). Run on quiet
cores: a shared machine's load moves both sides.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from lengthpred.machine import record

REPO = Path(__file__).resolve().parents[1]
WORDS = ("the model reads every prompt once and pools its hidden states into features that predict how long "
         "the answer will be before any token is generated").split()


def write_trace(path: Path, n: int) -> None:
    rows = []
    for i in range(n):
        k = 60 + (i * 37) % 181
        rows.append({"prompt": f"Q{i}: " + " ".join(WORDS[(i + j) % len(WORDS)] for j in range(k)), "length": 10 + i})
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))


def timed(cmd: list[str], env: dict[str, str]) -> tuple[float, list[float], str]:
    t0 = time.perf_counter()
    r = subprocess.run(cmd, cwd=REPO, env=env, capture_output=True, text=True)
    wall = time.perf_counter() - t0
    if r.returncode != 0:
        sys.exit(f"failed: {' '.join(cmd)}\n{r.stderr[-3000:]}")
    secs = [float(s) for s in re.findall(r"features: \d+ prompts, \d+ tokens in ([0-9.]+) s", r.stdout + r.stderr)]
    return wall, secs, r.stdout


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--n", type=int, default=600)
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--threads", type=int, default=None, help="torch threads of the one process (default: torch's)")
    ap.add_argument("--out", type=Path, help="also write the result, machine and commit here (JSON; the docs render "
                                             "docs/results/data/scale/torchrun_extract.json)")
    args = ap.parse_args()
    load0 = os.getloadavg()[0]
    tmp = Path(tempfile.mkdtemp(prefix="bench_torchrun_"))
    try:
        write_trace(tmp / "trace.jsonl", args.n)
        base = ["model=tiny", "data=trace", "data.name=bench_torchrun", f"data.train_path={tmp / 'trace.jsonl'}",
                f"data.out_dir={tmp / 'splits'}", f"paths.outputs_dir={tmp / 'outputs'}", "logger=disabled",
                "features.token_layers=[]"]
        env = {k: v for k, v in os.environ.items() if k not in ("RANK", "WORLD_SIZE", "LOCAL_RANK")}
        one_env = env | ({"OMP_NUM_THREADS": str(args.threads)} if args.threads else {})
        py, script = sys.executable, str(REPO / "scripts" / "extract.py")
        subprocess.run([py, str(REPO / "scripts" / "prepare_data.py"), *base, f"paths.data_dir={tmp / 'd0'}"],
                       cwd=REPO, env=env, check=True, capture_output=True)
        one, two, one_x, two_x = [], [], [], []
        for k in range(args.reps):
            wall, secs, _ = timed([py, script, *base, f"paths.data_dir={tmp / f'one{k}'}"], one_env)
            one.append(wall)
            one_x += secs
            torchrun = str(Path(py).parent / "torchrun")
            wall, secs, _ = timed([torchrun, "--standalone", "--nproc-per-node", "2", script, *base,
                                   f"paths.data_dir={tmp / f'two{k}'}"], env)
            two.append(wall)
            two_x.append(max(secs) if secs else float("nan"))
        w1, w2 = statistics.median(one), statistics.median(two)
        out = {
            "prompts": args.n, "reps": args.reps,
            "one_process_wall_s": [round(x, 2) for x in one], "torchrun_2_wall_s": [round(x, 2) for x in two],
            "one_process_extraction_s": [round(x, 2) for x in one_x],
            "torchrun_2_extraction_s (slowest rank)": [round(x, 2) for x in two_x],
            "ratio (wall, goal <= 1.2)": round(w2 / (w1 / 2), 3),
            "ratio (extraction only)": round(statistics.median(two_x) / (statistics.median(one_x) / 2), 3),
        }
        print(json.dumps(out, indent=1))
        if args.out:
            settings = {"n": args.n, "reps": args.reps, "threads": args.threads}
            args.out.parent.mkdir(parents=True, exist_ok=True)
            args.out.write_text(json.dumps(record(out, settings, load0), indent=1) + "\n")
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
