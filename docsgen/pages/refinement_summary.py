"""The refinement study's summary across every load its committed rows hold: one row per scheduling arm (the
policies and key sources a reader compares: prompt-only SJF and SRPT, refined SRPT/SJF on the head chosen on
validation, the oracles), one column group per load. Only rows chosen before test is read appear: the head the
curve stage chose on validation (`decode:best`), never a row picked by its test score."""

from __future__ import annotations

from docsgen import mdtable
from docsgen.registry import helper
from docsgen.results import Results
from docsgen.studies import DATA

ARMS = (("sjf", "prompt", "prompt-only SJF"),
        ("refined-srpt/cap2", "prompt", "prompt-only SRPT, cap 2 (the refined policy on the prompt-only head)"),
        ("refined-srpt/cap1", "decode:best", "refined SRPT, cap 1 (head chosen on val)"),
        ("refined-srpt/cap2", "decode:best", "refined SRPT, cap 2 (head chosen on val)"),
        ("refined-srpt/nocap", "decode:best", "refined SRPT, no cap (head chosen on val)"),
        ("refined-sjf/cap2", "decode:best", "refined SJF, cap 2 (head chosen on val)"),
        ("oracle-srpt", "clairvoyant", "oracle SRPT"))


@helper
def refinement_by_load(res: Results, stem: str, loads: list[str]) -> str:
    """`<stem>-<k>.csv` for k = 1.. (one per load, in `loads` order): per arm and load, the share of the oracle's
    gain [95% CI over seeds] and the mean and median per-token latency (ms/token)."""
    frames = [res.csv(f"{DATA}/refinement/{stem}-{k}.csv", columns=("policy", "source", "share of oracle gain",
                                                                     "ptl mean (ms/tok)", "ptl median"))
              for k in range(1, len(loads) + 1)]
    head = ["arm"] + [f"load {ld}: {what}" for ld in loads
                      for what in ("share of the oracle's gain", "mean (ms/token)", "median (ms/token)")]
    rows = []
    for policy, source, label in ARMS:
        cells = [label]
        for k, df in enumerate(frames, 1):
            r = res.row(f"{DATA}/refinement/{stem}-{k}.csv", df, policy=policy, source=source)
            cells += [r["share of oracle gain"], r["ptl mean (ms/tok)"], r["ptl median"]]
        rows.append(cells)
    return mdtable.render(mdtable.MdTable(head, ["---"] + ["---:"] * (len(head) - 1), rows))
