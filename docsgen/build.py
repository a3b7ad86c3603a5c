"""Render every page and run every stale producer in memory, then write it all, or compare it with the tree.

A producer is stale when the key of its inputs and code differs from the one recorded in
docs/results/data/KEYS.json (or an output is missing); the pages then read its fresh output.
"""

from __future__ import annotations

import hashlib
import json
import sys
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path

from docsgen.errors import DocsInputError
from docsgen.registry import MARKER, PAGES, PRODUCERS, Producer, load
from docsgen.results import Results
from docsgen.studies import DATA

KEYS = f"{DATA}/KEYS.json"


@dataclass
class Outcome:
    files: dict[str, str] = field(default_factory=dict)  # repo-relative path -> text
    produced: list[str] = field(default_factory=list)  # producers that ran


def _sha(path: Path) -> str:
    return hashlib.sha1(path.read_bytes()).hexdigest()[:16]


def producer_key(root: Path, p: Producer) -> str:
    """A digest of the producer's input files and of the source of every module its code imports."""
    from lengthpred.stagegraph import module_closure

    files = {str(f.relative_to(root)): _sha(f) for f in sorted(p.inputs(root))}
    entries = [root / c for c in p.code]
    mods = module_closure(entries, root)
    code = {c: _sha(root / c) for c in p.code} | {m: _sha(f) for m, f in mods.items()}
    return hashlib.sha1(json.dumps({"inputs": files, "code": code}, sort_keys=True).encode()).hexdigest()[:16]


def run_producers(root: Path, names: Iterable[str] | None = None, log=print) -> tuple[Outcome, dict[str, str]]:
    keys_file = root / KEYS
    keys = json.loads(keys_file.read_text()) if keys_file.is_file() else {}
    out = Outcome()
    for name, p in PRODUCERS.items():
        if names is not None and name not in names:
            continue
        key = producer_key(root, p)
        fresh = keys.get(name) == key and all((root / o).is_file() for o in p.outputs)
        if fresh:
            continue
        log(f"docs: producing {name} (its inputs or code changed since {KEYS}); this may take minutes")
        made = p.run(root)
        if set(made) != set(p.outputs):
            raise RuntimeError(f"producer {name} wrote {sorted(made)}, declared {sorted(p.outputs)}")
        out.files.update(made)
        out.produced.append(name)
        keys[name] = key
    if out.produced:
        out.files[KEYS] = json.dumps(dict(sorted(keys.items())), indent=1) + "\n"
    return out, keys


def render_pages(root: Path, overlay: dict[str, str], only: Iterable[str] | None = None) -> dict[str, str]:
    pages = {}
    for out, pg in sorted(PAGES.items()):
        if only is not None and out not in only:
            continue
        pages[out] = pg.render(Results(root, out, overlay))
    return pages


def stale_generated(root: Path, written: set[str]) -> list[str]:
    """Pages in the tree that carry the generated marker but that no generator writes any more."""
    cands = [root / "README.md", *(root / "docs").rglob("*.md")]
    derived = {k for k, pg in PAGES.items() if not pg.committed}
    return sorted(str(f.relative_to(root)) for f in cands if f.is_file() and str(f.relative_to(root)) not in written
                  and str(f.relative_to(root)) not in derived and f.read_text(encoding="utf-8").startswith(MARKER))


def build(root: Path, check: bool = False, log=print, produce: bool = True, derived_pages: bool = True) -> int:
    """Exit status: 0 done (or, with `check`, the tree matches); 1 the tree differs; 2 bad input.
    `produce=False` renders from the committed rows as they are, running no producer (however stale);
    `derived_pages=False` leaves the uncommitted reference pages unwritten (a check that builds no site)."""
    load()
    try:
        produced, _ = run_producers(root, log=log) if produce else (Outcome(), {})
        files = {**produced.files, **render_pages(root, produced.files)}
    except DocsInputError as e:
        log(f"docs: {e}")
        return 2
    stale = stale_generated(root, set(files))
    derived = {k for k, pg in PAGES.items() if not pg.committed}
    for k in derived & set(files) if derived_pages else ():  # built, not committed: written in either mode
        _write(root / k, files[k])
    # a key alone moving (same output) is no drift
    compare = {k: v for k, v in files.items() if k != KEYS and k not in derived}
    differ = [k for k, v in compare.items() if not (root / k).is_file() or (root / k).read_text(encoding="utf-8") != v]
    if check:
        for k in differ:
            log(f"docs: {k} differs from what `make docs` renders (run make docs and commit the result)")
        for k in stale:
            log(f"docs: {k} is a generated page no generator writes any more")
        return 1 if differ or stale else 0
    for k, v in files.items():
        _write(root / k, v)
    for k in stale:
        (root / k).unlink()
    log(f"docs: {len(files)} files rendered, {len(differ)} changed, {len(stale)} stale removed"
        + (f"; produced {', '.join(produced.produced)}" if produced.produced else ""))
    return 0


def _write(f: Path, text: str) -> None:
    f.parent.mkdir(parents=True, exist_ok=True)
    if not f.is_file() or f.read_text(encoding="utf-8") != text:
        f.write_text(text, encoding="utf-8")


def main(argv: list[str]) -> int:
    import argparse

    ap = argparse.ArgumentParser(prog="python -m docsgen", description="Render README.md and docs/ from the "
                                 "committed results (`make docs`).")
    ap.add_argument("--check", action="store_true", help="render in memory and fail where the tree differs")
    a = ap.parse_args(argv)
    root = Path(__file__).resolve().parent.parent
    return build(root, check=a.check)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
