"""The adapt experiment: every selected cross-domain pair as a stream, all heads, curves and gains
(`lengthpred.stages.adapt.run_adaptation(cfg, out_dir)` builds its inputs from a config; scripts/adapt.py).

Per pair (`lengthpred.online.pairs`): the readout is fitted on the source, the target's train+val prompts
arrive as a stream served by the completion model (default: the serving model's calibrated CPU profile
at load 0.7), each completion reveals one sampled length, λ is chosen on the stream's validation
requests (`lengthpred.online.select`) and copied as `rls@val`. Every pair is replayed once per stream
seed (`online.stream_seeds`: arrival order, arrival times and revealed samples; λ chosen per pair and
seed); the ridge alpha (source only) is chosen once per pair. The curves, summary, gains, predictions
and plots come from the primary (first) seed; `per_target.csv` averages every seed.

Writes into `out_dir`:
- `stream_curves.csv`: the main adaptation curve, in-stream Spearman/MAE and their difference from static
  vs labels seen at prediction (`lengthpred.online.curves`), per pair and head;
- `curves.csv`: held-out target test Spearman/MAE vs labels learned, per pair and head;
- `summary.csv`: per pair and head, end-of-stream and in-stream metrics, labels seen, update cost;
- `pairs.csv`: per pair, served and prompt shift, load, arrival rate, capacity, chosen λ, alpha (primary
  seed); `pairs_seeds.csv`: the same per pair and stream seed (`stream_seed`);
- `gains.csv`: per pair and head, Spearman differences from static (in-stream and test);
- `per_target.csv`: per target and overall, seed-averaged ΔSpearman with prompt × seed bootstrap CIs
  and the sd over seeds (T3's input,
  `lengthpred.online.summary`);
- `predictions.parquet` (docs/DESIGN.md); `plots/*.png`; `adapt.json` (config + headline numbers).
"""

from __future__ import annotations

import dataclasses
import json
import logging
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar

import numpy as np
import pandas as pd

from lengthpred.artefacts import CURVES, ONLINE_SUMMARY, PREDICTIONS, STREAM_CURVES
from lengthpred.errors import ConfigError, DataError
from lengthpred.names import PAIR_SEP, forgetting_of, mean_oracle_name, rls_name
from lengthpred.online.config import select_alpha
from lengthpred.online.curves import labels_seen_curves
from lengthpred.online.pairs import (
    gains_table,
    label_pair,
    pair_stream,
    prediction_rows,
    run_pair,
    select_pairs,
)
from lengthpred.online.plots import plot_curves, plot_delta_grid, plot_delta_summary, plot_gain_vs_shift
from lengthpred.online.select import SELECTED, choose_forgetting, with_selected
from lengthpred.online.stream import HeadSpec
from lengthpred.online.summary import ALL, per_target_summary
from lengthpred.settings import settings_from
from lengthpred.targets import target_frame

log = logging.getLogger(__name__)


def feature_lookup(feature_set: Any, name: str) -> Callable[[Sequence[str]], np.ndarray]:
    """ids → rows of one FeatureSet column ([n, d] float64); an unknown id is a DataError."""
    X = np.asarray(feature_set.get(name), dtype=np.float64)
    row = {str(i): k for k, i in enumerate(feature_set.ids)}

    def get(ids: Sequence[str]) -> np.ndarray:
        missing = [i for i in ids if i not in row]
        if missing:
            raise DataError(f"{len(missing)} prompt(s) have no features in column {name}, e.g. {missing[0]}")
        return X[[row[i] for i in ids]]

    return get


@dataclass(frozen=True)
class AdaptSettings:
    """What the stream experiment reads of the `online` config group (conf/online/rls.yaml holds the
    defaults and their meaning), plus the run's `seed`."""

    feature: str
    forgetting: tuple[float, ...]
    mean_oracle: float | None
    alpha: float | None
    alphas: tuple[float, ...]
    pairs: tuple[str, ...] | None
    stream_parts: tuple[str, ...]
    val_part: str | None
    shift_key: str
    stream_seeds: int | tuple[int, ...]
    record_every: int
    window: int
    plot_pairs: int | None
    n_boot: int
    confidence: float
    seed: int = 0

    # keys of the `online` group read by the stage (lengthpred.stages.adapt), not by the experiment
    STAGE_KEYS: ClassVar[tuple[str, ...]] = ("name", "trace_cap", "blas_threads", "baselines", "completion",
                                             "export_readouts")

    @classmethod
    def from_mapping(cls, online: Mapping[str, Any], seed: int = 0) -> AdaptSettings:
        """From the (resolved) `online` group: the fields above; `STAGE_KEYS` left out, any other key an error."""
        s = settings_from(cls, online, group="online", skip=cls.STAGE_KEYS, seed=int(seed))
        return dataclasses.replace(s, forgetting=tuple(s.forgetting or ()), alphas=tuple(s.alphas or ()),
                                   stream_parts=tuple(s.stream_parts or ()), pairs=s.pairs or None)


def run_adaptation(
    settings: AdaptSettings,
    out_dir: str | Path,
    *,
    splits: Mapping[str, Any],
    feature_set: Any,
    targets: Any,
    make_heads: Callable[[float], dict[str, HeadSpec]],
    completion: Any,
    config: Mapping[str, Any] | None = None,
    tracker: Any = None,
    export: Callable[[str, Any], Path | None] | None = None,
) -> dict[str, Any]:
    """Stream every pair of `splits` (module docstring); `make_heads(alpha)` gives fresh heads (`static`
    among them), `completion` serves the stream. `config` is written into adapt.json. `export(pair, estimator)`
    receives each pair's chosen head after its first seed's stream (the readout adapted to the target) and
    returns where it wrote it (adapt.json's `readouts`)."""
    s = settings
    candidates = [rls_name(lam) for lam in s.forgetting]
    if not candidates:
        raise ConfigError("online.forgetting: at least one λ (the candidates chosen on validation)")
    oracle = mean_oracle_name(s.mean_oracle) if s.mean_oracle is not None else None
    targets = target_frame(targets)
    features = feature_lookup(feature_set, s.feature)
    pairs = select_pairs(splits.get("cross", []), list(s.pairs) if s.pairs else None)
    if not pairs:
        raise DataError("splits.json has no cross-domain pairs to stream")
    out = Path(out_dir)
    (out / "plots").mkdir(parents=True, exist_ok=True)
    compared = [h for h in ("static", SELECTED, oracle) if h]
    acc: dict[str, list[pd.DataFrame]] = {
        k: [] for k in ("curves", "stream", "summary", "preds", "test", "sp")
    }
    meta: list[dict[str, Any]] = []
    seeds = stream_seeds(s.stream_seeds, s.seed)
    base_seed = int(getattr(completion, "seed", 0) or 0)  # the completion model's own seed, for seeds[0]
    readouts: dict[str, str] = {}
    for pair in pairs:
        alpha = None  # seed-independent (the source fit): chosen once per pair
        for k, sd in enumerate(seeds):
            ps = pair_stream(
                pair,
                splits["indomain"],
                features,
                targets,
                stream_parts=list(s.stream_parts),
                val_part=s.val_part,
                shift_key=s.shift_key,
                seed=sd,
            )
            if alpha is None:
                alpha = s.alpha
                if alpha is None:
                    alpha = select_alpha(ps.data.X_source, ps.data.y_source, list(s.alphas))
            if hasattr(completion, "seed"):
                completion.seed = base_seed + sd - seeds[0]  # arrival times: one draw per stream seed
            frames = _one_pair(
                ps, s, make_heads, completion, candidates, compared, targets, float(alpha), primary=k == 0
            )
            frames["meta"]["stream_seed"] = sd
            adapted = frames.pop("estimator", None)
            if export is not None and adapted is not None:
                written = export(ps.name, adapted)
                if written is not None:
                    readouts[ps.name] = str(written)
            for key in ("sp", "test"):
                frames[key]["stream_seed"] = sd
            for key, df in frames.items():
                (meta if key == "meta" else acc[key]).append(df)
    curves_df, stream_df = (
        pd.concat(acc["curves"], ignore_index=True),
        pd.concat(acc["stream"], ignore_index=True),
    )
    summary_df, seeds_df = pd.concat(acc["summary"], ignore_index=True), pd.DataFrame(meta)
    pairs_df = seeds_df[seeds_df["stream_seed"] == seeds[0]].reset_index(drop=True)
    gains = gains_table(summary_df, [h for h in summary_df["head"].unique() if h != "static"])
    gains = gains.merge(pairs_df[["pair", "source", "target", "prompt_shift"]], on="pair", how="left")
    heads = {"rls": SELECTED, **({"mean_oracle": oracle} if oracle else {})}
    per_target = per_target_summary(
        pd.concat(acc["test"], ignore_index=True),
        pd.concat(acc["sp"], ignore_index=True),
        seeds_df,
        heads,
        n_boot=int(s.n_boot),
        confidence=float(s.confidence),
        seed=int(s.seed),
    )
    curves_df.to_csv(out / CURVES, index=False)
    stream_df.to_csv(out / STREAM_CURVES, index=False)
    summary_df.to_csv(out / ONLINE_SUMMARY, index=False)
    pairs_df.to_csv(out / "pairs.csv", index=False)
    seeds_df.to_csv(out / "pairs_seeds.csv", index=False)
    gains.to_csv(out / "gains.csv", index=False)
    per_target.to_csv(out / "per_target.csv", index=False)
    pd.concat(acc["preds"], ignore_index=True).to_parquet(out / PREDICTIONS, index=False)
    _plots(out / "plots", curves_df, stream_df, gains, pairs_df, s.plot_pairs, oracle)
    headline = headline_numbers(per_target, pairs_df, heads)
    headline["stream_seeds"] = seeds
    if readouts:
        headline["readouts"] = readouts
    (out / "adapt.json").write_text(
        json.dumps({"config": dict(config or {}), **headline}, indent=2, default=float)
    )
    if tracker is not None:
        tracker.summary(headline)
        for key, df in (
            ("summary", summary_df),
            ("gains", gains),
            ("curves", curves_df),
            ("stream_curves", stream_df),
            ("pairs", pairs_df),
            ("pairs_seeds", seeds_df),
            ("per_target", per_target),
        ):
            tracker.log_table(f"online/{key}", list(df.columns), df.astype(object).values.tolist())
        for png in sorted((out / "plots").glob("*.png")):
            tracker.log_image(f"online/{png.stem}", png)
    return {"out_dir": str(out), "n_pairs": len(pairs), **headline}


def _one_pair(
    ps: Any,
    s: AdaptSettings,
    make_heads: Callable[[float], dict[str, HeadSpec]],
    completion: Any,
    candidates: list[str],
    compared: list[str],
    targets: pd.DataFrame,
    alpha: float,
    *,
    primary: bool = True,
) -> dict[str, Any]:
    """Stream one pair for one stream seed: fit, replay, choose λ on validation; frames keyed as `acc`.

    Only the primary (first) seed records test curves, in-stream curves, the summary and predictions rows;
    the other seeds feed the per-target summary (`sp`, `test`) and `meta` only.
    """
    res = run_pair(
        ps,
        lambda a=float(alpha): make_heads(a),
        completion,
        # test curves only for the primary seed (start and end are always recorded)
        record_every=int(s.record_every) if primary else max(len(ps.data.y_stream), 1),
        window=int(s.window),
        progress=False,
    )
    chosen = choose_forgetting(res.summary, candidates)
    res = with_selected(res, chosen)
    res.summary.insert(4, "alpha", float(alpha))
    info = dict(getattr(completion, "info_", {}))
    s0 = res.summary.set_index("head").loc["static"]  # labels seen: the same events for every head
    meta = {
        "pair": ps.name,
        "source": ps.source,
        "target": ps.target,
        "shift": ps.shift,
        "prompt_shift": ps.prompt_shift,
        "completion": info.get("model", type(completion).__name__),
        "load": info.get("load", np.nan),
        "arrival_rate": info.get("arrival_rate", np.nan),
        "capacity_req_s": info.get("capacity_req_s", np.nan),
        **{
            k: s0[k] for k in ("labels_seen_mean", "labels_seen_median", "labels_seen_ge10", "in_flight_mean")
        },
        "n_revealed": int(s0["n_revealed"]),
        "n_stream": len(ps.data.y_stream),
        "forgetting": forgetting_of(chosen),
        "alpha": float(alpha),
    }
    log.info(
        "pair %s seed %d: λ=%g on validation, labels seen %.1f (mean) of %d, %s",
        ps.name,
        int(getattr(completion, "seed", -1)),
        forgetting_of(chosen),
        s0["labels_seen_mean"],
        len(ps.data.y_stream),
        res.summary.set_index("head")["test_spearman"].round(3).to_dict(),
    )
    sp, tp = res.stream_predictions, res.test_predictions
    out: dict[str, Any] = {
        "meta": meta,
        "sp": label_pair(sp[sp["head"].isin(compared)].copy(), ps),
        "test": label_pair(tp[tp["head"].isin(compared)].copy(), ps),
    }
    if primary:
        curves = labels_seen_curves(sp, window=int(s.window), step=int(s.record_every))
        out.update(
            {
                "curves": res.curves,
                "stream": label_pair(curves, ps),
                "summary": res.summary,
                "preds": prediction_rows(ps, res, targets),
                "estimator": res.estimators.get(SELECTED),
            }
        )
    return out


def stream_seeds(spec: Any, seed: int = 0) -> list[int]:
    """`online.stream_seeds`: a count n (the seeds seed, seed+1, …, seed+n-1) or an explicit list."""
    if isinstance(spec, int | float) and not isinstance(spec, bool):
        if int(spec) < 1:
            raise ConfigError(f"online.stream_seeds={spec!r}: at least one seed")
        return [int(seed) + k for k in range(int(spec))]
    seeds = [int(v) for v in spec]
    if not seeds or len(set(seeds)) != len(seeds):
        raise ConfigError(f"online.stream_seeds={list(spec)!r}: a non-empty list of distinct seeds")
    return seeds


def _plots(
    pdir: Path,
    curves: pd.DataFrame,
    stream: pd.DataFrame,
    gains: pd.DataFrame,
    pairs: pd.DataFrame,
    n_plot: int | None,
    oracle: str | None,
) -> None:
    series = [(SELECTED, "RLS, λ chosen on validation")]
    if oracle:
        series.append((oracle, f"mean-label oracle ({oracle})"))
    plot_delta_summary(stream, curves, pdir / "adaptation_summary.png", series)
    plot_delta_grid(stream, pdir / "adaptation_by_target.png")
    plot_gain_vs_shift(gains, SELECTED, pdir / "gain_vs_shift.png")
    lam = dict(zip(pairs["pair"], pairs["forgetting"], strict=True))
    for name in _pairs_to_plot(pairs, n_plot):
        plot_curves(
            stream[stream["pair"] == name],
            curves[curves["pair"] == name],
            f"{name} (served-length shift {float(pairs.set_index('pair').at[name, 'shift']):.2f})",
            pdir / f"curves_{_slug(name)}.png",
            labels={
                SELECTED: f"rls, λ={lam[name]:g} (chosen on validation)",
                **({oracle: f"{oracle} (mean-label oracle)"} if oracle else {}),
            },
        )


def headline_numbers(per_target: pd.DataFrame, pairs: pd.DataFrame, heads: dict[str, str]) -> dict[str, Any]:
    """The overall row of the per-target summary (ΔSpearman with CIs), labels seen, load and λ choices."""
    out: dict[str, Any] = {}
    if per_target.empty:
        return out
    row = per_target.set_index("target").loc[ALL]
    for prefix, head in heads.items():
        for part in ("test", "stream"):
            for suffix in ("", "_lo", "_hi"):
                out[f"{head}/{part}_spearman_delta{suffix}"] = float(row[f"{prefix}_{part}_delta{suffix}"])
    for col in ("labels_seen_mean", "labels_seen_median", "labels_seen_ge10", "in_flight_mean", "load"):
        out[col] = float(row[col])
    out["forgetting_chosen"] = str(row["forgetting"])
    out["completion"] = str(pairs["completion"].iloc[0])
    out["shift_median"] = float(pairs["shift"].median())
    return out


def _pairs_to_plot(pairs: pd.DataFrame, n: int | None) -> list[str]:
    """All pairs (n = null) or the n/2 smallest- and n/2 largest-shift pairs (curves PNGs cost ≈1 s each)."""
    order = list(pairs.sort_values(["shift", "pair"])["pair"])
    if n is None or n >= len(order):
        return order
    k = int(n) // 2
    return order[:k] + order[-k:] if k else []


def _slug(name: str) -> str:
    return name.replace(PAIR_SEP, "_to_").replace("/", "_")
