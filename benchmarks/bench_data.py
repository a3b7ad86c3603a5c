"""How long the data stage takes: building demo (and, with --paper, paper) from the local sources,
and reading one CASTILLO model's files through the trace loader.

.venv/bin/python benchmarks/bench_data.py [--paper]
"""

from __future__ import annotations

import sys
import time

from hydra import compose, initialize_config_dir

import lengthpred.cli  # noqa: F401  (registers the ${lp.*} resolvers)
from lengthpred.data.build import build_from_sources
from lengthpred.data.trace import build_from_trace
from lengthpred.paths import REPO_ROOT


def timed(label: str, fn, *args) -> None:
    t0 = time.perf_counter()
    records, splits = fn(*args)
    print(f"{label}: {len(records)} prompts, {len(splits['cross'])} cross pairs, "
          f"{time.perf_counter() - t0:.1f} s")


def main() -> None:
    names = ["demo", "castillo"] + (["paper"] if "--paper" in sys.argv else [])
    for name in names:
        with initialize_config_dir(config_dir=str(REPO_ROOT / "conf"), version_base="1.3"):
            cfg = compose(config_name="config", overrides=[f"data={name}", "logger=disabled"])
        timed(f"data={name}", build_from_trace if cfg.data.kind == "trace" else build_from_sources, cfg.data)


if __name__ == "__main__":
    main()
