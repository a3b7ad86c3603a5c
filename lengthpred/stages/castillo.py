"""The castillo stage (`experiment=castillo`, scripts/castillo.py): the whole cross-model run, step by step,
each step timed (the library parts live in `lengthpred.crossmodel`).

union (read every CASTILLO file) → sample (`data.per_dataset` prompts per dataset) → split (shared, by
prompt, stratified by dataset, near-duplicates grouped: `data.near_duplicates`) → token counts (truncation counted) → features (one prefill per prompt,
only the columns the heads read) → fits (every head per fit target; `crossmodel.within_heads` once more per
dataset) → ceilings → scores → paired comparisons (`crossmodel.pairs`) → tables and plots.

Writes into `out_dir`: `union/` (prompts.jsonl, lengths.npz), `split.json`, `coverage.csv`, `fits.csv`,
`predictions.parquet` (each fit also kept in `crossmodel.fit_cache` on its content key, so a rerun or a
resumed crash fits only what changed), `results.csv`, `pairs.csv`, `ceilings_test.csv`, `ceilings_all.csv`, `transfer_<head>.csv`,
`tables/` (T7*.md/.tex/.csv), `plots/`, `summary.json` (sizes, warnings, stage times); with `docs_dir`,
the figures are copied into its `figures/` too. The tables reach the docs as committed rows:
`python -m docsgen.convert --ingest <out_dir>/tables --prefix castillo_ --made-by "make castillo"`, then `make docs`.
"""

from __future__ import annotations

import json
import logging
import shutil
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pandas as pd
from hydra.utils import instantiate
from omegaconf import DictConfig, ListConfig, OmegaConf

from lengthpred.artefacts import PREDICTIONS
from lengthpred.crossmodel.ceilings import POOLED, ceiling_lookup, ceiling_range, ceiling_table
from lengthpred.crossmodel.fit_cache import FitCache
from lengthpred.crossmodel.fits import HeadSpec, fit_all
from lengthpred.crossmodel.inputs import PromptInputs, prompt_tokens
from lengthpred.crossmodel.pairs import compare_pairs, parse_pairs, table_t7_pairs
from lengthpred.crossmodel.plots import achieved_vs_ceiling, heatmap_transfer
from lengthpred.crossmodel.scoring import score_all, transfer_matrix, write_results
from lengthpred.crossmodel.split import (
    PARTS,
    coverage,
    coverage_warnings,
    sample_per_dataset,
    stratified_split,
)
from lengthpred.crossmodel.table import ALL_MODELS, short_model
from lengthpred.crossmodel.tables import table_ceilings, table_t7, table_t7_datasets, table_t7_summary
from lengthpred.crossmodel.union import PromptUnion, read_union
from lengthpred.data.near_duplicates import NearDuplicates, cross_split_twins, near_duplicate_groups
from lengthpred.errors import ConfigError
from lengthpred.heads import HEADS, HeadSettings
from lengthpred.heads.assemble import prompt_text
from lengthpred.models import load_tokenizer
from lengthpred.paths import resolve
from lengthpred.stages.features import ensure_features, feature_settings
from lengthpred.stages.heads import check_features_config, feature_name, head_config
from lengthpred.stages.tracking import tracked

log = logging.getLogger("lengthpred.crossmodel")


class Timer:
    """Wall-clock seconds per named stage (summary.json `seconds`)."""

    def __init__(self) -> None:
        self.seconds: dict[str, float] = {}

    @contextmanager
    def stage(self, name: str) -> Iterator[None]:
        t0 = time.perf_counter()
        log.info("castillo: %s ...", name)
        try:
            yield
        finally:
            self.seconds[name] = round(time.perf_counter() - t0, 1)
            log.info("castillo: %s done in %.1f s", name, self.seconds[name])


def load_union(data: DictConfig) -> PromptUnion:
    if data.get("kind") != "castillo_union":
        raise ConfigError(f"experiment=castillo reads data=castillo_all (kind castillo_union), not data={data.name}")
    return read_union(resolve(str(data.root)), models=data.models, datasets=data.datasets,
                      prompt_field=str(data.prompt_field), length_field=str(data.length_field),
                      n_samples=int(data.n_samples), cap=data.cap, on_bad_input=str(data.on_bad_input))


def _targets(value: Any, models: Sequence[str], what: str) -> tuple[str, ...]:
    """`all` → every model then ALL_MODELS; else the listed names (each a model or ALL_MODELS)."""
    if value in (None, "all"):
        return (*models, ALL_MODELS)
    names = tuple(str(v) for v in value)
    unknown = [n for n in names if n not in models and n != ALL_MODELS]
    if unknown:
        raise ConfigError(f"crossmodel.{what}: unknown {unknown}; valid: {ALL_MODELS} or one of {list(models)}")
    return names


def _search_node(cfg: DictConfig) -> dict[str, Any] | None:
    """The root `search:` node (item 1's selection protocol: the same budget for every head), if configured."""
    node = cfg.get("search")
    return None if node is None else OmegaConf.to_container(node, resolve=True)


def head_specs(cfg: DictConfig, models: Sequence[str]) -> list[HeadSpec]:
    """`crossmodel.heads` on `crossmodel.fit_targets`, `crossmodel.proxy_heads` on `crossmodel.proxy_targets`,
    each from conf/head/<name>.yaml merged with `crossmodel.head_overrides.<name>`; `crossmodel.within_heads`
    once more on `fit_targets`, fitted within each dataset (lengthpred.crossmodel.fits), and a head listed
    in both `heads` and `within_heads` has its pooled fit labelled `(pooled fit)` and scored pooled only.
    Every head runs the standard `run_training` path, under the root `search:` node where one is set."""
    cm = cfg.crossmodel
    overrides = OmegaConf.to_container(cm.head_overrides, resolve=True) if cm.head_overrides else {}
    within = [str(h) for h in (cm.get("within_heads") or [])]
    search = _search_node(cfg)
    specs = []
    groups = ((cm.heads, "fit_targets", False), (cm.proxy_heads or [], "proxy_targets", False),
              (within, "fit_targets", True))
    for names, key, is_within in groups:
        targets = _targets(cm[key], models, key)
        for name in names:
            klass = HEADS.get(str(name))  # an unknown head lists the valid ones
            if klass.input_kind == "tokens":
                raise ConfigError(f"crossmodel: head {name!r} reads token-level states; this experiment stores "
                                  "pooled columns only (use linear, probe, egtp, estp)")
            merged = OmegaConf.merge(head_config(cfg, str(name)), overrides.get(str(name)) or {})
            hcfg = OmegaConf.to_container(merged, resolve=True)
            if search is not None and "search" not in hcfg:
                hcfg["search"] = search
            feature = feature_name(merged) if klass.input_kind == "features" else None
            settings = HeadSettings.from_mapping(hcfg | {"feature": feature}, group=f"head {name}")
            specs.append(HeadSpec(str(name), settings, feature, targets, within=is_within,
                                  pooled_only=not is_within and str(name) in within))
    return specs


def _check_heads(cm: DictConfig, specs: list[HeadSpec]) -> list[tuple[str, str]]:
    """The configured head names checked before any work; returns `crossmodel.pairs` as this run compares them."""
    names = {s.label for s in specs}
    if str(cm.primary_head) not in names:
        raise ConfigError(f"crossmodel.primary_head={cm.primary_head!r} is not among the heads {sorted(names)}")
    extra = sorted(set(map(str, cm.transfer_heads)) - names)
    if extra:
        raise ConfigError(f"crossmodel.transfer_heads: {extra} are not among the heads {sorted(names)}")
    return parse_pairs(_plain(cm.get("pairs")), {s.label: s.targets for s in specs}, sorted(set(HEADS) | names))


def feature_columns(cfg: DictConfig, specs: Sequence[HeadSpec]) -> list[str]:
    """The columns the heads read, checked against the features config before any extraction."""
    settings = feature_settings(cfg)
    cols = []
    for s in specs:
        if s.feature is not None:
            check_features_config(settings, s.feature, None, str(s.settings.pooling))
            cols.append(s.feature)
    return sorted(set(cols))


def _write_union(union: PromptUnion, out: Path) -> None:
    d = out / "union"
    d.mkdir(parents=True, exist_ok=True)
    with (d / "prompts.jsonl").open("w", encoding="utf-8") as f:
        for r in union.records:
            f.write(json.dumps({k: r[k] for k in ("id", "dataset", "domain", "messages")}, ensure_ascii=False) + "\n")
    union.table.save(d / "lengths.npz")


def split_prompts(cfg: DictConfig, union: PromptUnion) -> tuple[list[str], dict[str, list[str]]]:
    """The prompts a run reads (`data.per_dataset` of each dataset) and their train/val/test split (`data.seed`),
    near-duplicates (`data.near_duplicates`: word n-gram Jaccard at a threshold; null: none) grouped first so that
    a group sits in one part."""
    seed = int(cfg.data.seed)
    chosen = sample_per_dataset(union.table.ids, union.dataset_of, cfg.data.per_dataset, seed)
    near = NearDuplicates.from_cfg(_plain(cfg.data.get("near_duplicates")))
    groups = None
    if near is not None:
        text = {r["id"]: prompt_text(r["messages"]) for r in union.records}
        groups = near_duplicate_groups(chosen, [text[i] for i in chosen], near)
    return chosen, stratified_split(chosen, union.dataset_of, cfg.data.split, seed, group_of=groups)


def near_duplicate_report(cfg: DictConfig, union: PromptUnion, chosen: Sequence[str],
                          split: dict[str, list[str]]) -> dict[str, Any]:
    """summary.json `near_duplicates`: the rule, its groups, and the test prompts that still have a train or val
    twin at the rule's threshold (none by construction) and at Jaccard ≥ 0.94 (the audit's stricter level)."""
    near = NearDuplicates.from_cfg(_plain(cfg.data.get("near_duplicates")))
    text = {r["id"]: prompt_text(r["messages"]) for r in union.records}
    out: dict[str, Any] = {"rule": None if near is None else {"ngram": near.ngram, "threshold": near.threshold}}
    rule = near or NearDuplicates()
    if near is not None:
        groups = near_duplicate_groups(chosen, [text[i] for i in chosen], near)
        sizes = pd.Series(list(groups.values())).value_counts()
        out |= {"groups_over_one": int((sizes > 1).sum()), "prompts_in_them": int(sizes[sizes > 1].sum())}
    for th in sorted({rule.threshold, 0.94}):
        out[f"test_with_twin_at_{th:g}"] = cross_split_twins(split, text, rule.ngram, th)
    return out


def _plain(node: Any) -> Any:
    return OmegaConf.to_container(node, resolve=True) if isinstance(node, DictConfig | ListConfig) else node


def prompt_inputs(cfg: DictConfig, union: PromptUnion, chosen: Sequence[str], columns: Sequence[str], *,
                  model: Any = None, tokenizer: Any = None, timer: Timer | None = None
                  ) -> tuple[PromptInputs, dict[str, int]]:
    """What the heads read for the `chosen` prompts (token counts, texts and the prefill feature `columns`,
    extracted or read from the feature cache), and each prompt's token count."""
    timer = timer or Timer()
    by_id = {r["id"]: r for r in union.records}
    records = [by_id[i] for i in chosen]
    with timer.stage("tokens"):
        if tokenizer is None:
            tokenizer = load_tokenizer(instantiate(cfg.model))
        n_tokens = prompt_tokens(tokenizer, records)
    features = None
    if columns:
        with timer.stage("features"):
            prompts = [{"id": r["id"], "messages": r["messages"]} for r in records]
            features = ensure_features(cfg, prompts, model=model, tokenizer=tokenizer)
    return PromptInputs.build(records, features, list(columns), n_tokens), n_tokens


def run_castillo(cfg: DictConfig, out_dir: str | Path, *, model: Any = None, tokenizer: Any = None) -> dict[str, Any]:
    """Run every stage (module docstring); `model`/`tokenizer` replace the configured serving model (tests)."""
    cm, data = cfg.crossmodel, cfg.data
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    timer = Timer()
    seed = int(data.seed)
    with timer.stage("union"):
        union = load_union(data)
        specs = head_specs(cfg, union.table.models)
        pairs = _check_heads(cm, specs)
        columns = feature_columns(cfg, specs)
        _write_union(union, out)
    table, dataset_of = union.table, union.dataset_of
    with timer.stage("split"):
        chosen, split = split_prompts(cfg, union)
        cov = coverage(table, split, dataset_of)
        warnings = coverage_warnings(cov, int(cm.min_train), int(cm.min_test))
        for w in warnings:
            log.warning("castillo: %s", w)
        near = near_duplicate_report(cfg, union, chosen, split)
        log.info("castillo: near-duplicates %s", {k: v if not isinstance(v, list) else len(v) for k, v in near.items()})
        (out / "split.json").write_text(json.dumps(split, indent=1) + "\n")
        cov.to_csv(out / "coverage.csv", index=False)
    inputs, n_tokens = prompt_inputs(cfg, union, chosen, columns, model=model, tokenizer=tokenizer, timer=timer)
    fits_frames, pred_frames = [], []
    cache = FitCache(resolve(str(cm.fit_cache))) if cm.get("fit_cache") else None
    for kind in ("heads", "proxy_heads"):
        group = [s for s in specs if (s.name in (cm.proxy_heads or []) and not s.within) == (kind == "proxy_heads")]
        if not group:
            continue
        with timer.stage(f"fit {kind}"):
            f, p = fit_all(group, inputs, table, split, min_train=int(cm.min_train), cache=cache)
            fits_frames.append(f)
            pred_frames.append(p)
    fits, preds = pd.concat(fits_frames, ignore_index=True), pd.concat(pred_frames, ignore_index=True)
    fits.to_csv(out / "fits.csv", index=False)
    preds.to_parquet(out / PREDICTIONS, index=False)
    n_boot = int(cm.n_boot)
    with timer.stage("ceilings"):
        ceil_test = ceiling_table(table, split["test"], dataset_of, n_boot=n_boot, seed=seed)
        ceil_all = ceiling_table(table, table.ids, dataset_of, n_boot=0, seed=seed)
        ceil_test.to_csv(out / "ceilings_test.csv", index=False)
        ceil_all.to_csv(out / "ceilings_all.csv", index=False)
    with timer.stage("scores"):
        results = score_all(preds, fits, table, split["test"], dataset_of, n_boot=n_boot, seed=seed,
                            min_test=int(cm.min_test))
        write_results(results, out / "results.csv")
        paired = compare_pairs(preds, table, split["test"], pairs, min_test=int(cm.min_test), n_boot=n_boot,
                               seed=seed)
        paired.to_csv(out / "pairs.csv", index=False)
    with timer.stage("tables"):
        written = _report(cfg, union, results, fits, ceil_test, ceil_all, out)
        if len(paired):
            written.append(table_t7_pairs(paired, n_boot).write(out / "tables")["md"])
    summary = {
        "models": table.models, "datasets": union.datasets(), "union": union.report,
        "n_prompts_union": len(table.ids), "n_prompts_run": len(chosen),
        "per_dataset_run": {ds: {k: sum(dataset_of[i] == ds for i in split[k]) for k in PARTS}
                            for ds in union.datasets()},
        "split_sizes": {k: len(v) for k, v in split.items()},
        "near_duplicates": near, "pairs": [list(p) for p in pairs],
        "truncation": truncation_counts(n_tokens, dataset_of, cfg.features.get("max_prompt_tokens")),
        "feature_columns": columns, "coverage_warnings": warnings,
        "ceiling_range_loo": ceiling_range(ceil_all).to_dict("records"),
        "fits_from_cache": int(fits["from_cache"].sum()),
        "fits": fits.replace({float("nan"): None}).to_dict("records"),
        "seconds": timer.seconds | {"total": round(sum(timer.seconds.values()), 1)},
        "written": [str(p) for p in written],
    }
    (out / "summary.json").write_text(json.dumps(summary, indent=1, default=str) + "\n")
    return summary


def truncation_counts(n_tokens: dict[str, int], dataset_of: dict[str, str], limit: Any) -> dict[str, Any]:
    """Per dataset: prompts, tokens, and prompts over `limit` (truncated by `encode_prompt`'s rule)."""
    out: dict[str, Any] = {"max_prompt_tokens": limit}
    for i, n in sorted(n_tokens.items(), key=lambda kv: (dataset_of[kv[0]], kv[0])):
        d = out.setdefault(dataset_of[i], {"prompts": 0, "tokens": 0, "tokens_read": 0, "truncated": 0})
        d["prompts"] += 1
        d["tokens"] += n
        d["tokens_read"] += min(n, int(limit)) if limit else n
        d["truncated"] += int(bool(limit) and n > int(limit))
    return out


def _report(cfg: DictConfig, union: PromptUnion, results: pd.DataFrame, fits: pd.DataFrame, ceil_test: pd.DataFrame,
            ceil_all: pd.DataFrame, out: Path) -> list[Path]:
    cm = cfg.crossmodel
    models, datasets = union.table.models, union.datasets()
    missing = {tuple(x.split("/", 1)): "no file (not in CASTILLO)" for x in union.report["missing_by_design"]}
    missing |= {tuple(x.split("/", 1)): "no file" for x in union.report["missing"] if "/" in x}
    look = ceiling_lookup(ceil_test)
    primary = str(cm.primary_head)
    tables = [table_t7(results, fits, look, models), table_t7_summary(results, fits, look, models, primary),
              table_t7_datasets(results, fits, look, models, datasets, primary, missing),
              table_ceilings(ceil_all, models, datasets, missing)]
    written: list[Path] = []
    for t in tables:
        written.append(t.write(out / "tables")["md"])
    pooled = {m: float(look[(m, POOLED)]["ceiling_mean_k"]) for m in models if (m, POOLED) in look}
    for head in cm.transfer_heads:
        mat = transfer_matrix(results, str(head), models)
        mat.rename(index=short_model).to_csv(out / f"transfer_{head}.csv")
        p = heatmap_transfer(mat, out / "plots" / f"castillo_transfer_{head}.png", str(head), pooled)
        written += [p] if p else []
    p = achieved_vs_ceiling(results, look, models, primary, out / "plots" / "castillo_vs_ceiling.png")
    written += [p] if p else []
    if cm.docs_dir:  # figures only: tables are ingested as rows (module docstring)
        figures = resolve(str(cm.docs_dir)) / "figures"
        figures.mkdir(parents=True, exist_ok=True)
        for w in written:
            if w.suffix == ".png":
                shutil.copyfile(w, figures / w.name)
    return written


def run_castillo_stage(cfg: DictConfig, out: str | Path) -> Path:
    """The castillo stage (scripts/castillo.py): `run_castillo` into `out`, logged to W&B; prints T7's summary
    and what the union missed. Returns the folder."""
    out = Path(out)
    with tracked(cfg, "castillo") as tracker:
        s = run_castillo(cfg, out)
        tracker.summary({f"seconds/{k}": v for k, v in s["seconds"].items()})
    print((out / "tables" / "T7_summary.md").read_text(encoding="utf-8"))
    u = s["union"]
    if u["missing_by_design"]:
        print(f"not in CASTILLO (reported as 'no file'): {', '.join(u['missing_by_design'])}")
    for m in u["missing"]:
        print(f"warning: missing {m}")
    if u["bad_input_skipped"]:
        print(f"bad rows skipped: {u['bad_input_skipped']}")
    for w in s["coverage_warnings"]:
        print(f"warning: {w}")
    print(f"{s['n_prompts_run']} of {s['n_prompts_union']} union prompts; stage seconds {s['seconds']}")
    return out
