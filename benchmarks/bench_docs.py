"""How long `make docs` takes from the committed results: the key check of every producer, each page's render
(the slowest listed first), and the strict site build; the goal is 60 s in all on 2 cores.

    .venv/bin/python benchmarks/bench_docs.py            # render and build in a scratch copy; the tree is untouched
    .venv/bin/python benchmarks/bench_docs.py --top 10   # more of the slowest pages
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))  # docsgen is tooling beside the package, not installed with it

from docsgen.build import KEYS, producer_key  # noqa: E402
from docsgen.registry import PAGES, PRODUCERS, load  # noqa: E402
from docsgen.results import Results  # noqa: E402

GOAL_S = 60.0


def main(argv: list[str]) -> int:
    ap = argparse.ArgumentParser(description=__doc__.strip().splitlines()[0])
    ap.add_argument("--top", type=int, default=5, help="how many of the slowest pages to list")
    a = ap.parse_args(argv)
    load()
    t0 = time.perf_counter()
    keys = {name: producer_key(ROOT, p) for name, p in PRODUCERS.items()}
    t_keys = time.perf_counter() - t0
    stored = (ROOT / KEYS).read_text() if (ROOT / KEYS).is_file() else ""
    stale = [n for n, k in keys.items() if k not in stored]
    pages = {}
    for out, pg in PAGES.items():
        t = time.perf_counter()
        pg.render(Results(ROOT, out))
        pages[out] = time.perf_counter() - t
    t_pages = sum(pages.values())
    with tempfile.TemporaryDirectory() as tmp:
        t = time.perf_counter()
        subprocess.run([str(ROOT / ".venv/bin/mkdocs"), "build", "--strict", "--quiet", "--site-dir", tmp],
                       cwd=ROOT, check=True, env={**os.environ, "NO_MKDOCS_2_WARNING": "1"})
        t_site = time.perf_counter() - t
        shutil.rmtree(tmp, ignore_errors=True)
    total = t_keys + t_pages + t_site
    print(f"producers' keys: {t_keys:.1f} s ({len(keys)} producers; stale: {', '.join(stale) or 'none'})")
    print(f"pages: {t_pages:.1f} s for {len(pages)}; slowest:")
    for out, s in sorted(pages.items(), key=lambda kv: -kv[1])[:a.top]:
        print(f"  {s:6.2f} s  {out}")
    print(f"site (mkdocs build --strict): {t_site:.1f} s")
    print(f"make docs from committed results: {total:.1f} s (goal {GOAL_S:g} s: {'met' if total <= GOAL_S else 'missed'})")
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
