"""The helpers every template may call: a table from its committed rows, where the rows came from, a committed
fragment, a figure and a link, each relative to the page being rendered."""

from __future__ import annotations

import csv
import io
import os

from docsgen import mdtable
from docsgen.registry import helper
from docsgen.render import rel
from docsgen.results import Results
from docsgen.studies import DATA, RESULTS

SOURCES = f"{DATA}/SOURCES.csv"


def sources(res: Results) -> dict[str, dict[str, str]]:
    """SOURCES.csv by file (relative to docs/results/data/)."""
    rows = list(csv.DictReader(io.StringIO(res.text(SOURCES))))
    if not rows or "file" not in rows[0]:
        res.fail(SOURCES, "no rows with a `file` column")
    return {r["file"]: r for r in rows}


@helper
def table(res: Results, name: str) -> str:
    """The Markdown table of docs/results/data/<name> (alignment as recorded in SOURCES.csv)."""
    path = f"{DATA}/{name}"
    text = res.text(path)
    src = sources(res).get(name)
    try:
        t = mdtable.from_csv(text, src["align"].split() if src and src.get("align") else None)
    except ValueError as e:
        res.fail(path, f"malformed CSV ({e})")
    if len(t.align) != len(t.header):
        res.fail(SOURCES, f"{name}: {len(t.align)} alignments for {len(t.header)} columns")
    if not t.rows:
        res.fail(path, "no rows")
    return mdtable.render(t)


@helper
def provenance(res: Results) -> str:
    """Where this page's rows came from: one line per source (run command, commit, date), with the files."""
    stem = os.path.splitext(os.path.basename(res.page))[0]
    study = os.path.basename(os.path.dirname(res.page))
    mine = {k: v for k, v in sources(res).items()
            if k.startswith(f"{study}/{stem}.") or k.startswith(f"{study}/{stem}-")}
    if not mine:
        return ""
    by_origin: dict[tuple[str, str, str], list[str]] = {}
    for k, v in sorted(mine.items(), key=lambda kv: _order(kv[0])):
        by_origin.setdefault((v["made_by"], v["commit"], v["committed_on"]), []).append(k)
    lines = []
    for (made, commit, day), files in by_origin.items():
        links = ", ".join(f"[{os.path.basename(f)}]({rel(res, f'{DATA}/{f}')})" for f in files)
        when = f" (commit `{commit}`, {day})" if commit else ""
        lines.append(f"_Rows: {links}. Written by `{made}`{when}; this page renders them (`make docs`), and the text "
                     "beside them is as written with that run._")
    return "\n\n".join(lines)


def _order(name: str) -> tuple[str, int]:
    stem, _, k = os.path.splitext(name)[0].rpartition("-")
    return (stem, int(k)) if k.isdigit() else (name, 0)


@helper
def fragment(res: Results, name: str) -> str:
    """A committed Markdown fragment of docs/results/data/<name> (a producer's output), without its final newline."""
    return res.text(f"{DATA}/{name}").rstrip("\n")


@helper
def figure(res: Results, name: str, alt: str) -> str:
    """An inline figure of docs/figures/<name>; missing is an error, as for rows."""
    path = f"docs/figures/{name}"
    if not (res.root / path).is_file():
        res.fail(path, "missing")
    return f"![{alt}]({rel(res, path)})"


@helper
def link(res: Results, target: str) -> str:
    """A relative link target from this page to `target` (repo-relative; `results/...` means docs/results/...)."""
    if target.startswith("results/"):
        target = f"{RESULTS}/{target[len('results/'):]}"
    if not (res.root / target).exists() and target not in _generated():
        res.fail(target, "missing (a link target)")
    return rel(res, target)


def _generated() -> set[str]:
    from docsgen.registry import PAGES

    return set(PAGES)
