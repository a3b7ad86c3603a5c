"""Helpers for the study pages: the list of a study's pages with their titles, a table's rows picked by one
column's value, and the serving index's per-folder table of predicted-SJF's gains."""

from __future__ import annotations

from docsgen import mdtable
from docsgen.numbers import pct, pct_interval
from docsgen.pages.helpers import sources
from docsgen.pages.serving import FOLDER_INFO, FOLDERS, GAINS
from docsgen.registry import PAGES, TEMPLATES, helper
from docsgen.render import rel
from docsgen.results import Results
from docsgen.studies import DATA, FLAT_PAGES, RESULTS, STUDIES, page_path


def page_title(out: str) -> str:
    t = TEMPLATES / f"{out}.j2"
    first = t.read_text(encoding="utf-8").split("\n", 1)[0] if t.is_file() else ""
    return first[2:].strip() if first.startswith("# ") else out.rsplit("/", 1)[-1]


@helper
def study(res: Results, slug: str) -> object:
    return STUDIES[slug]


@helper
def study_pages(res: Results, slug: str) -> str:
    """A Markdown list of the study's table pages, bench first, each linked with its title."""
    items = [f"- [{page_title(page_path(s))}]({rel(res, page_path(s))})" for s in FLAT_PAGES[slug]
             if page_path(s) in PAGES]
    return "\n".join(items)


@helper
def table_rows(res: Results, name: str, column: str, value: str, drop: bool = True,
               drop_columns: tuple[str, ...] | list[str] = ()) -> str:
    """The table of docs/results/data/<name> with only the rows whose `column` equals `value` (that column
    dropped unless `drop` is false, and `drop_columns` too)."""
    path = f"{DATA}/{name}"
    t = mdtable.from_csv(res.text(path))
    src = sources(res).get(name)
    align = src["align"].split() if src and src.get("align") else ["---"] * len(t.header)
    if column not in t.header:
        res.fail(path, f"no column {column!r}")
    i = t.header.index(column)
    rows = [r for r in t.rows if r[i] == value]
    if not rows:
        res.fail(path, f"no row with {column} = {value!r}")
    gone = [c for c in drop_columns if c not in t.header]
    if gone:
        res.fail(path, f"no column {gone[0]!r}")
    keep = [j for j in range(len(t.header)) if not (drop and j == i) and t.header[j] not in drop_columns]
    return mdtable.render(mdtable.MdTable([t.header[j] for j in keep], [align[j] for j in keep],
                                          [[r[j] for j in keep] for r in rows]))


@helper
def serving_folders_table(res: Results, policy: str = "sjf", predictor: str = "rls@1+engine") -> str:
    """Per ten-repeat folder: its workload and calibration, and predicted-SJF's paired gain over FCFS on the
    per-token mean (pooled ratio [95% paired bootstrap CI], exact sign-flip p, median of the per-repeat gains)
    and on E2E p99 (the tail)."""
    g = res.csv(GAINS, columns=("folder", "baseline", "policy", "predictor", "metric", "gain", "ci_low", "ci_high",
                                "p_value", "median_per_repeat", "n"), dtype=None)
    info = res.csv(FOLDER_INFO, columns=("folder", "workload", "calibration")).set_index("folder")
    g = g[(g["baseline"] == "fcfs") & (g["policy"] == policy) & (g["predictor"] == predictor)]
    head = ["folder", "workload", "calibration", "repeats", "per-token mean: pooled gain [95% CI]", "p (exact)",
            "median per repeat", "E2E p99: pooled gain [95% CI]", "p (exact)"]
    rows = []
    for folder in FOLDERS:
        x = g[g["folder"] == folder].set_index("metric")
        if x.empty:
            continue
        cells = []
        for m, with_median in (("per_token_latency_mean", True), ("jct_p99", False)):
            if m not in x.index:
                cells += ["—"] * (3 if with_median else 2)
                continue
            r = x.loc[m]
            cells += [pct_interval(r.gain, r.ci_low, r.ci_high), f"{r.p_value:.2g}"]
            cells += [pct(r.median_per_repeat)] if with_median else []
        rows.append([f"[{folder}]({folder}.md)", info.loc[folder, "workload"], info.loc[folder, "calibration"],
                     str(int(x["n"].max())), *cells])
    if not rows:
        res.fail(GAINS, f"no {policy} ({predictor}) rows over FCFS")
    return mdtable.render(mdtable.MdTable(head, ["---"] * 3 + ["---:"] * (len(head) - 3), rows))


@helper
def results_index(res: Results) -> str:
    """One line per study: its title linked, and the question it answers."""
    return "\n".join(f"- **[{s.title}]({rel(res, f'{RESULTS}/{slug}/index.md')})**: {s.question}"
                     for slug, s in STUDIES.items())


@helper
def serving_folder_names(res: Results) -> list[str]:
    return [f for f in FOLDERS if page_path(f) in PAGES]
