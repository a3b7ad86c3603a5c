"""Rerun the numeric tests (marker `numeric`) under every CPU kernel level torch can be forced to and with 1 and
2 threads: `make test-portable` (extra arguments go to pytest).

float32 results change with the kernels a CPU selects (AVX2, AVX-512, AMX), so a tolerance that passes on one
machine can fail on another (tests/tolerances.py derives them from the arithmetic instead). This check forces
what can be forced here: ATEN_CPU_CAPABILITY=default and avx2, and the native level, each with 1 and 2
threads. A level the CPU lacks is reported as the level torch actually ran, not counted as covered.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
LEVELS = ("default", "avx2", None)  # None: whatever torch picks on this CPU
THREADS = (1, 2)


def environment(level: str | None, threads: int) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k != "ATEN_CPU_CAPABILITY"}
    if level is not None:
        env["ATEN_CPU_CAPABILITY"] = level
    n = str(threads)
    env.update(OMP_NUM_THREADS=n, MKL_NUM_THREADS=n, OPENBLAS_NUM_THREADS=n, LENGTHPRED_TEST_THREADS=n)
    return env


def capability(env: dict[str, str]) -> str:
    """The kernel level torch reports under `env` (what ran, whatever was asked)."""
    out = subprocess.run([sys.executable, "-c", "import torch; print(torch.backends.cpu.get_cpu_capability())"],
                         env=env, capture_output=True, text=True, check=True)
    return out.stdout.strip()


def main(pytest_args: list[str]) -> int:
    rows = []
    for level in LEVELS:
        for threads in THREADS:
            env = environment(level, threads)
            ran = capability(env)
            asked = level or "native"
            print(f"\n== ATEN_CPU_CAPABILITY={asked} (torch runs {ran}), {threads} thread(s)", flush=True)
            t0 = time.perf_counter()
            rc = subprocess.run([sys.executable, "-m", "pytest", "-q", "-m", "numeric", "-p", "no:cacheprovider",
                                 *pytest_args], cwd=ROOT, env=env).returncode
            rows.append((asked, ran, threads, rc, time.perf_counter() - t0))
    print("\nlevel asked | torch ran | threads | result | seconds")
    for asked, ran, threads, rc, sec in rows:
        print(f"{asked:>11} | {ran:>9} | {threads:>7} | {'pass' if rc == 0 else f'FAIL ({rc})':>6} | {sec:7.0f}")
    forced = {ran for asked, ran, *_ in rows if asked != "native"}
    if len(forced) < 2:
        print(f"note: only {sorted(forced)} could be forced on this CPU")
    return 0 if all(r[3] == 0 for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
