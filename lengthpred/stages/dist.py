"""The distributional stage (`scripts/evaluate_dist.py`): fit the distributional heads of `cfg.distribution`
on the in-domain train prompts' sampled lengths, score them on the test prompts' samples, and run the
known-truth checks (a synthetic trace; the trace re-capped at `distribution.short_cap` against its own cap).

Writes into `out_dir`: `dist_scores.csv`, `dist_pit.csv`, `dist_recap.csv`, `dist_synthetic.csv`, `dist.md`
(the tables) and `dist_pit.png` (the PIT histograms); with `distribution.sched.enabled`, the schedulers
that use the distributions against point SJF (`dist_sched.csv`, `dist_sched_gains.csv`, a table per load), at loads listed or chosen where the
clairvoyant oracle's headroom over point SJF is largest (`dist_headroom.csv`), each key's gain beside that headroom.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from lengthpred.data import load_prompts, load_splits
from lengthpred.distributions import Observations, from_trace
from lengthpred.errors import ConfigError
from lengthpred.eval.dist_report import adapt_markdown, pit_figure, render, t3_adapt_markdown
from lengthpred.eval.dist_sched import (
    choose_loads,
    headroom_markdown,
    headroom_sweep,
    nulls_markdown,
    queue_tie_keys,
    run_uncertainty_sched,
    sched_markdown,
    uncertainty_keys,
)
from lengthpred.eval.distributional import (
    ALL_HEADS,
    DistSplit,
    adaptation_curve,
    fit_distributions,
    pit_table,
    recap_check,
    score_table,
    stream_curve,
    synthetic_check,
)
from lengthpred.heads.assemble import indomain_ids
from lengthpred.names import FeatureKey
from lengthpred.online.experiment import stream_seeds
from lengthpred.online.pairs import pair_stream, select_pairs
from lengthpred.stages.features import ensure_features
from lengthpred.stages.locations import reference_path
from lengthpred.stages.targets import load_targets
from lengthpred.targets import read_reference, target_frame

FEATURES = ("hs", "trace")


def feature_matrix(cfg: Any, prompts: Any, rows: pd.DataFrame, ids: list[str]) -> tuple[np.ndarray, str]:
    """[len(ids), d] features of `cfg.distribution.features` (and their description)."""
    kind = str(cfg.distribution.features)
    if kind not in FEATURES:
        raise ConfigError(f"distribution.features={kind!r}: use one of {list(FEATURES)}")
    if kind == "hs":
        key = FeatureKey(int(cfg.distribution.layer), str(cfg.distribution.pooling))
        fs = ensure_features(cfg, prompts, need=[(key.layer, key.pool)])
        where = {i: k for k, i in enumerate(fs.ids)}
        return np.asarray(fs.get(str(key)), dtype=np.float64)[[where[i] for i in ids]], str(key)
    tokens = rows.groupby(rows["id"].astype(str))["prompt_tokens"].first()
    domain = {r["id"]: r["domain"] for r in prompts}
    domains = sorted({domain[i] for i in ids})
    onehot = np.array([[domain[i] == d for d in domains] for i in ids], dtype=np.float64)
    return np.column_stack([np.log1p(tokens.loc[ids].to_numpy(np.float64)), onehot]), "log1p(prompt tokens) + domain"


def adaptation_by_domain(parts: dict[str, DistSplit], ids: dict[str, list[str]], domain: dict[str, str], *,
                         every: int, forgetting: float, seed: int) -> pd.DataFrame:
    """Per target domain T: the censored head fitted on the other domains' train prompts, T's train and val
    prompts streamed (one sample each), CRPS on T's test prompts (`adaptation_curve`)."""
    frames = []
    for t in sorted({domain[i] for i in ids["test"]}):
        def sub(part: str, keep, t=t) -> DistSplit:
            rows = [k for k, i in enumerate(ids[part]) if keep(domain[i] == t)]
            where = {r: n for n, r in enumerate(rows)}
            obs = parts[part].obs
            mask = np.isin(obs.row, rows)
            new = Observations(np.array([where[r] for r in obs.row[mask]], dtype=np.int64), obs.length[mask],
                               obs.capped[mask], obs.cap)
            return DistSplit(parts[part].X[rows], new)

        source = sub("train", lambda is_t: not is_t)
        tr, va = sub("train", bool), sub("val", bool)
        stream = DistSplit(np.vstack([tr.X, va.X]), Observations(
            np.concatenate([tr.obs.row, va.obs.row + len(tr.X)]), np.concatenate([tr.obs.length, va.obs.length]),
            np.concatenate([tr.obs.capped, va.obs.capped]), tr.obs.cap))
        curve = adaptation_curve(source, stream, sub("test", bool), every=every, forgetting=forgetting, seed=seed)
        frames.append(curve.assign(target=t))
    return pd.concat(frames, ignore_index=True)


def adaptation_on_t3_streams(cfg: Any, features: dict[str, np.ndarray], samples: Callable[[list[str]], Observations], *,
                             every: int, forgetting: float, log: Any = print) -> pd.DataFrame:
    """T3's own streams (`lengthpred.online.pairs.pair_stream`, settings from `cfg.online`): every cross pair of
    splits.json, the censored head fitted on the pair's source prompts (every sample), the target's train + val
    prompts streamed in T3's arrival order revealing T3's sample of each (a capped one censored for
    `censored_rls`), CRPS on the pair's test prompts; for each of T3's stream seeds. Labels are learned in
    arrival order (T3 learns them as requests complete, at most a few places later). `samples(ids)`: every
    sampled length of those prompts (`lengthpred.distributions.from_trace`)."""
    oc = cfg.online
    splits = load_splits(cfg.data)
    targets = target_frame(load_targets(cfg))
    if "finish_reasons" not in targets.columns:
        raise ConfigError("distribution.adapt: the targets record no finish reasons (no cap known)")
    pairs = select_pairs(splits.get("cross", []), list(oc.pairs) if oc.get("pairs") else None)
    if not pairs or "indomain" not in splits:
        raise ConfigError("distribution.adapt.streams=t3: splits.json has no cross-domain pairs to stream; "
                          "use distribution.adapt.streams=lodo")
    seeds = stream_seeds(oc.stream_seeds, int(cfg.seed))

    def rows(ids: list[str]) -> np.ndarray:
        missing = [i for i in ids if i not in features]
        if missing:
            raise ConfigError(f"distribution.adapt: {len(missing)} streamed prompts have no feature row")
        return np.stack([features[i] for i in ids])

    frames = []
    for pair in pairs:
        src_ids = [str(i) for i in pair["train"] if str(i) in targets.index]
        source = DistSplit(rows(src_ids), samples(src_ids))
        for sd in seeds:
            ps = pair_stream(pair, splits["indomain"], rows, targets, stream_parts=list(oc.stream_parts),
                             val_part=oc.val_part, seed=sd)
            test_ids = list(ps.data.ids_test)
            test = DistSplit(ps.data.X_test, samples(test_ids))
            curve = stream_curve(source, ps.data.X_stream, np.minimum(ps.labels.y, test.obs.cap), ps.labels.capped, test,
                                 every=every, forgetting=forgetting, per_prompt_final=True)
            final = curve["labels"] < 0  # per-prompt rows: the prompt's id, so a target's pairs average per prompt
            curve["prompt"] = [test_ids[int(j)] if f else "" for j, f in zip(curve["prompt"].fillna(0), final,
                                                                             strict=True)]
            frames.append(curve.assign(pair=ps.name, source=ps.source, target=ps.target, seed=sd))
        log(f"[dist] T3 stream {pair['name']}: {len(seeds)} seeds")
    return pd.concat(frames, ignore_index=True)


def run_dist(cfg: Any, out_dir: str | Path, log: Any = print) -> dict[str, pd.DataFrame]:
    d = cfg.distribution
    heads = list(d.heads)
    unknown = [h for h in heads if h not in ALL_HEADS]
    if unknown:
        raise ConfigError(f"distribution.heads: unknown {unknown}; valid: {list(ALL_HEADS)}")
    path = reference_path(cfg)
    rows, meta = read_reference(path)
    prompts = load_prompts(cfg.data)
    ids = indomain_ids(load_splits(cfg.data))
    every = [i for part in ("train", "val", "test") for i in ids[part]]
    X_all, feature = feature_matrix(cfg, prompts, rows, every)
    parts, start = {}, 0
    for part in ("train", "val", "test"):
        X = X_all[start:start + len(ids[part])]
        start += len(ids[part])
        parts[part] = DistSplit(X, from_trace(rows, meta, ids[part], where=str(path)))
    seed = int(cfg.seed)
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    synth = synthetic_check(cap=float(d.short_cap), seed=seed)
    recap = recap_check(parts["train"], parts["test"], float(d.short_cap), log=log)
    dists = fit_distributions(parts["train"], parts["val"], parts["test"], heads, seed=seed, log=log)
    scores = score_table(dists, parts["test"].obs, reference=str(d.reference), n_boot=int(d.n_boot), seed=seed)
    pit = pit_table(dists, parts["test"].obs)
    synth.to_csv(out / "dist_synthetic.csv", index=False)
    recap.to_csv(out / "dist_recap.csv", index=False)
    scores.to_csv(out / "dist_scores.csv", index=False)
    pit.to_csv(out / "dist_pit.csv")
    info = {"model": str(cfg.model.name), "data": str(cfg.data.name), "features": feature,
            "n_train": len(parts["train"].X), "n_test": len(parts["test"].X),
            "train_samples": len(parts["train"].obs), "test_samples": len(parts["test"].obs),
            "cap": parts["test"].obs.cap, "test_capped": parts["test"].obs.capped_frac,
            "train_capped_short": float((parts["train"].obs.length >= float(d.short_cap)).mean()),
            "short_cap": float(d.short_cap), "reference": str(d.reference)}
    sched_md = ""
    result = {"scores": scores, "recap": recap, "synthetic": synth, "pit": pit}
    sc = d.get("sched")
    if sc is not None and bool(sc.enabled):
        missing = [h for h in [*sc.heads, "linear_point"] if h not in dists]
        if missing:
            raise ConfigError(f"distribution.sched.heads need {missing} among distribution.heads")
        test = parts["test"]
        keys = {"linear": dists["linear_point"].mean(cap=test.obs.cap)}
        tails: dict[str, np.ndarray] = {}
        for h in sc.heads:
            keys |= uncertainty_keys(h, dists[h], test.obs.cap, float(sc.beta))
            k, t = queue_tie_keys(h, dists[h], test.obs.cap)
            keys |= k
            tails |= t
        samples = [test.obs.length[test.obs.row == r].astype(int).tolist() for r in range(len(test.X))]
        tokens = rows.groupby(rows["id"].astype(str))["prompt_tokens"].first().loc[ids["test"]].to_numpy(float)
        loads, head_md = sched_loads(sc, samples, tokens, keys["linear"], out, log)
        log(f"[dist] simulating the schedulers at loads {loads}")
        summary, gain = run_uncertainty_sched(samples, tokens, keys, hardware=str(sc.hardware),
                                              loads=loads, seeds=[int(x) for x in sc.seeds],
                                              n_requests=int(sc.n_requests), tails=tails,
                                              lower_bounds=["linear", *(f"{h}:q0.1" for h in sc.heads)])
        summary.to_csv(out / "dist_sched.csv", index=False)
        gain.to_csv(out / "dist_sched_gains.csv", index=False)
        sched_md = head_md + "\n\n".join(
            f"### Schedulers using the distribution: load {ld:g} ({sc.hardware}, {len(sc.seeds)} seeds × "
            f"{sc.n_requests} requests)\n\n" + sched_markdown(summary, gain, float(ld)) +
            f"\n\n#### Every key against point SJF at load {ld:g}, beside the oracle's headroom\n\n" +
            nulls_markdown(gain, float(ld)) for ld in loads)
        result |= {"sched": summary, "sched_gains": gain}
    adapt_md = ""
    ad = d.get("adapt")
    n_domains = len({r["domain"] for r in prompts})
    if ad is not None and bool(ad.enabled) and n_domains < 2:
        log("[dist] distribution.adapt skipped: leaving one domain out needs at least 2 domains")
    elif ad is not None and bool(ad.enabled):
        streams = str(ad.get("streams", "t3"))
        if streams == "t3":
            log("[dist] streaming T3's pairs")
            curves = adaptation_on_t3_streams(cfg, dict(zip(every, X_all, strict=True)),
                                              lambda ids: from_trace(rows, meta, ids, where=str(path)),
                                              every=int(ad.every), forgetting=float(ad.forgetting), log=log)
            adapt_md = t3_adapt_markdown(curves, n_boot=int(d.n_boot), seed=seed)
        elif streams == "lodo":
            log("[dist] streaming completions per target domain")
            curves = adaptation_by_domain(parts, ids, {r["id"]: r["domain"] for r in prompts}, every=int(ad.every),
                                          forgetting=float(ad.forgetting), seed=seed)
            adapt_md = adapt_markdown(curves)
        else:
            raise ConfigError(f"distribution.adapt.streams={streams!r}; valid: t3, lodo")
        curves.to_csv(out / "dist_adapt.csv", index=False)
        result["adapt"] = curves
    (out / "dist.md").write_text(render(scores, recap, synth, info) + "".join(
        "\n\n" + m for m in (sched_md, adapt_md) if m) + "\n")
    pit_figure(pit, out / "dist_pit.png", title=f"{info['data']}: PIT of one sampled length ({feature})")
    return result


def sched_loads(sc: Any, samples: list[list[int]], tokens: np.ndarray, point: np.ndarray, out: Path,
                log: Any = print) -> tuple[list[float], str]:
    """The loads the schedulers are compared at, and the markdown that says how they were chosen: the listed
    `sched.loads`, or under `loads: headroom` the `headroom.n_loads` loads of `headroom.candidates` where the
    clairvoyant oracle's gain over point SJF is largest on `headroom.seeds` (disjoint from the reported `seeds`,
    so the choice never sees the requests it is reported on; `dist_headroom.csv`)."""
    if not isinstance(sc.loads, str):
        return [float(x) for x in sc.loads], ""
    if sc.loads != "headroom":
        raise ConfigError(f"distribution.sched.loads={sc.loads!r}: a list of loads or 'headroom'")
    hr = sc.get("headroom")
    if hr is None:
        raise ConfigError("distribution.sched.loads=headroom needs distribution.sched.headroom "
                          "(candidates, seeds, n_loads)")
    sel, rep = [int(x) for x in hr.seeds], [int(x) for x in sc.seeds]
    if set(sel) & set(rep):
        raise ConfigError(f"distribution.sched.headroom.seeds {sorted(set(sel) & set(rep))} are also reported "
                          "seeds: choose the loads on other seeds")
    log("[dist] choosing loads by the oracle's headroom over point SJF")
    sweep = headroom_sweep(samples, tokens, point, hardware=str(sc.hardware),
                           loads=[float(x) for x in hr.candidates], seeds=sel, n_requests=int(sc.n_requests))
    loads = choose_loads(sweep, int(hr.n_loads))
    sweep.assign(chosen=sweep["load"].isin(loads)).to_csv(out / "dist_headroom.csv", index=False)
    md = ("### Where ordering can still matter: the oracle's headroom over point SJF\n\n" +
          headroom_markdown(sweep, loads, str(sc.hardware), sel) + "\n\n")
    return loads, md


def run_evaluate_dist(cfg: Any, out: str | Path) -> Path:
    """The evaluate_dist stage (scripts/evaluate_dist.py): `run_dist` into `out`; prints dist.md. Returns the folder."""
    run_dist(cfg, out)
    print((Path(out) / "dist.md").read_text())
    return Path(out)
