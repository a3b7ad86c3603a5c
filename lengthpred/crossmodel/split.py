"""One train/val/test split of the prompt union, by prompt and stratified by dataset, shared by every model.

The split is made on prompt ids before any model's lengths are looked at, so a prompt never sits in
train for one model and in test for another; near-duplicate prompts (`data.near_duplicates`, word n-gram
Jaccard, lengthpred.data.near_duplicates) are grouped first and a group never straddles two parts. A model's own split is the part of each split it has
samples for; `coverage` counts those, and `coverage_warnings` names every model that has train
prompts but too few test prompts (its rows stay in the tables, marked, rather than being dropped).
"""

from __future__ import annotations

import random
from collections.abc import Mapping, Sequence
from typing import Any

import pandas as pd

from lengthpred.crossmodel.table import LengthTable, short_model
from lengthpred.data.splits import split_ids
from lengthpred.errors import ConfigError

PARTS = ("train", "val", "test")


def by_dataset(ids: Sequence[str], dataset_of: Mapping[str, str]) -> dict[str, list[str]]:
    out: dict[str, list[str]] = {}
    for i in sorted(ids):
        out.setdefault(dataset_of[i], []).append(i)
    return dict(sorted(out.items()))


def sample_per_dataset(ids: Sequence[str], dataset_of: Mapping[str, str], cap: int | None,
                       seed: int) -> list[str]:
    """At most `cap` prompts of each dataset (seeded shuffle of the sorted ids); None keeps every prompt."""
    if cap is None:
        return sorted(ids)
    if int(cap) < 1:
        raise ConfigError(f"data.per_dataset={cap}: use a positive count or null")
    out = []
    for ds_ids in by_dataset(ids, dataset_of).values():
        order = list(ds_ids)
        random.Random(seed).shuffle(order)
        out += order[: int(cap)]
    return sorted(out)


def stratified_split(ids: Sequence[str], dataset_of: Mapping[str, str], fractions: Mapping[str, float],
                     seed: int, group_of: Mapping[str, str] | None = None) -> dict[str, list[str]]:
    """train/val/test ids: each dataset cut by `fractions` (floats summing to 1), then pooled (sorted).

    `group_of` (id → group key, e.g. `lengthpred.data.near_duplicates.near_duplicate_groups`) keeps every group
    in one part: a group is stratified under its key's dataset and placed whole (`grouped_split_ids`). Without
    groups larger than one prompt the split is the ungrouped one."""
    fr = {k: float(fractions.get(k, 0.0)) for k in PARTS}
    if any(v < 0 for v in fr.values()) or abs(sum(fr.values()) - 1.0) > 1e-9 or fr["train"] <= 0 or fr["test"] <= 0:
        raise ConfigError(f"data.split={dict(fractions)}: train, val, test fractions >= 0 summing to 1, "
                          "train and test > 0")
    out: dict[str, list[str]] = {k: [] for k in PARTS}
    if group_of is None:
        for ds_ids in by_dataset(ids, dataset_of).values():
            parts = split_ids(ds_ids, fr, seed)
            for k in PARTS:
                out[k] += parts[k]
        return {k: sorted(v) for k, v in out.items()}
    members: dict[str, list[str]] = {}
    for i in sorted(ids):
        members.setdefault(group_of[i], []).append(i)
    home = {g: dataset_of[g] if g in dataset_of else dataset_of[m[0]] for g, m in members.items()}
    for ds in sorted(set(home.values())):
        groups = {g: m for g, m in members.items() if home[g] == ds}
        parts = grouped_split_ids(groups, fr, seed)
        for k in PARTS:
            out[k] += parts[k]
    return {k: sorted(v) for k, v in out.items()}


def grouped_split_ids(groups: Mapping[str, Sequence[str]], fractions: Mapping[str, float],
                      seed: int) -> dict[str, list[str]]:
    """`split_ids` over groups of ids: the sorted group keys shuffled with `seed`, then train filled first, val
    next, test with the rest, a group always whole (a part may overshoot its count by a group's size − 1). With
    every group a single id keyed by itself this is exactly `split_ids` on the ids."""
    keys = sorted(groups)
    random.Random(seed).shuffle(keys)
    n = sum(len(groups[k]) for k in keys)
    va_n, te_n = round(n * float(fractions.get("val", 0.0))), round(n * float(fractions.get("test", 0.0)))
    want = {"train": n - va_n - te_n, "val": va_n}
    out: dict[str, list[str]] = {k: [] for k in PARTS}
    for key in keys:
        part = next((p for p in ("train", "val") if len(out[p]) < want[p]), "test")
        out[part] += list(groups[key])
    return {k: sorted(v) for k, v in out.items()}


def coverage(table: LengthTable, split: Mapping[str, Sequence[str]], dataset_of: Mapping[str, str]) -> pd.DataFrame:
    """Prompts with samples per (model, dataset, part): columns model, dataset, train, val, test."""
    rows = []
    for m in table.models:
        for ds in sorted(set(dataset_of.values())):
            row: dict[str, Any] = {"model": m, "dataset": ds}
            for part in PARTS:
                ids = [i for i in split[part] if dataset_of[i] == ds]
                row[part] = int(table.has(m, ids).sum()) if ids else 0
            rows.append(row)
    return pd.DataFrame(rows, columns=["model", "dataset", *PARTS])


def coverage_warnings(cov: pd.DataFrame, min_train: int, min_test: int) -> list[str]:
    """One line per model that cannot be fitted or scored pooled, and per (model, dataset) with train
    prompts but too few test prompts to score (their table rows say so instead of vanishing)."""
    lines = []
    for m, g in cov.groupby("model", sort=True):
        n_tr, n_te = int(g["train"].sum()), int(g["test"].sum())
        if n_tr < min_train:
            lines.append(f"{short_model(m)}: {n_tr} train prompts (< {min_train}): no own fit; its rows read "
                         "'not fitted'")
        if n_te < min_test:
            lines.append(f"{short_model(m)}: {n_tr} train but {n_te} test prompts (< {min_test}): not scored; "
                         "its rows read 'no test prompts'")
        for r in g.itertuples(index=False):
            if r.train > 0 and r.test < min_test and n_te >= min_test:
                lines.append(f"{short_model(m)} on {r.dataset}: {r.train} train but {r.test} test prompts "
                             f"(< {min_test}): per-dataset cells read 'too few test prompts'")
    return lines
