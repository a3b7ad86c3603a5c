"""Distributional heads scored against sampled lengths, and the censoring check against a known truth.

Inputs are plain arrays: per-prompt features X (one row per prompt), and `Observations` (one entry per
sampled length, a capped one right-censored at the cap; lengthpred.distributions). Every head is fitted on
the training prompts' samples in long format (a prompt with 3 samples is 3 rows of the same features), so
each predicts the distribution of **one** sampled length, not of a prompt's mean.

`score_table` ranks the distributions on held-out samples (pinball at 0.1/0.5/0.9, CRPS, coverage of the
central 50% and 80% intervals; capped samples as `lengthpred.distributions.scores` says; per-prompt means,
bootstrap over prompts, and the paired CRPS difference against a reference head). Its rows:
- `censored_lognormal`: Tobit on log1p length, capped samples censored;
- `censored_hetero`: the same with log σ linear in the features too (`scale="linear"`);
- `lognormal_naive`: the censored_lognormal model with capped samples taken as exact ("cap as value");
- `quantile_linear`: joint linear quantile readouts (capped samples as the cap);
- `egtp`, `probe`: the soft-bin heads' bin probabilities, fitted on the same long-format rows;
- `linear_point`: LEAP's readout (fitted on the same sample rows) taken as certain (its CRPS is its MAE);
- `linear_residuals`: its point with the validation samples' log residual quantiles added;
- `train_marginal`: every prompt gets the training samples' pooled distribution (no features);
- `ceiling_loo`: each sample predicted by its own prompt's other samples; with 2 of them the
  ensemble is coarse (its intervals cannot be calibrated), so a second row (`ceiling_fair`) gives their fair CRPS (Ferro
  2014), the unbiased estimate of the CRPS of the prompt's own length distribution: the ceiling.

`adaptation_curve` / `stream_curve` stream completions into `CensoredRLS` (lengthpred.online.censored) and
plain RLS and score CRPS on held-out prompts as labels arrive (`stream_curve` in a given order: T3's streams,
lengthpred.stages.dist).

`recap_check` is the known-truth setting: the samples re-capped at a shorter cap (256) for fitting, the
test samples kept at the trace's cap (512); what the re-capped fits say about lengths between the two
caps is checked against the samples that show them.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd

from lengthpred.distributions import (
    Empirical,
    LengthDistribution,
    LogNormal,
    Observations,
    PointMass,
    QuantileGrid,
    bootstrap_mean,
    crps,
    crps_fair,
    per_prompt,
    pit_histogram,
    recap,
    score_all,
)
from lengthpred.heads import CensoredLogNormalHead, EGTPHead, LinearHead, ProbeHead, QuantileLinearHead
from lengthpred.online.censored import CensoredRLS
from lengthpred.online.rls import RLSRegressor

RESIDUAL_LEVELS = tuple(np.round(np.linspace(0.02, 0.98, 49), 4))
ALL_HEADS = ("censored_lognormal", "censored_hetero", "lognormal_naive", "quantile_linear", "egtp", "probe", "linear_point",
             "linear_residuals", "train_marginal", "ceiling_loo")
CEILING = "ceiling_loo"
CEILING_FAIR = "ceiling_fair"
LABELS = {"linear_point": "linear (point mass)", "linear_residuals": "linear + val residuals",
          "train_marginal": "train marginal (no features)", "ceiling_loo": "ceiling: the prompt's 2 other samples",
          CEILING_FAIR: "ceiling: fair CRPS of the other samples"}


@dataclass(frozen=True)
class DistSplit:
    """Per-prompt features and their samples: X [n, d], obs with rows 0..n-1."""

    X: np.ndarray
    obs: Observations

    def long(self) -> np.ndarray:
        return self.X[self.obs.row]


def residual_quantiles(point: np.ndarray, val_point: np.ndarray, val_obs: Observations,
                       levels: Sequence[float] = RESIDUAL_LEVELS) -> QuantileGrid:
    """A point head's implied distribution: its prediction times the validation samples' residual quantiles
    on the log scale, log1p(y) − log1p(ŷ) (capped validation samples as the cap)."""
    r = np.log1p(val_obs.length) - np.log1p(np.maximum(val_point[val_obs.row], 0.0))
    qr = np.quantile(r, levels)
    return QuantileGrid(levels, np.maximum(np.expm1(np.log1p(np.maximum(point, 0.0))[:, None] + qr[None, :]), 0.0))


def leave_one_out(obs: Observations) -> Empirical:
    """One row per sample: the other samples of its prompt (capped ones at the cap)."""
    out = []
    for i in range(len(obs)):
        same = (obs.row == obs.row[i]) & (np.arange(len(obs)) != i)
        out.append(obs.length[same] if same.any() else obs.length[[i]])
    return Empirical(out)


def fit_distributions(train: DistSplit, val: DistSplit, test: DistSplit, heads: Sequence[str] = ALL_HEADS,
                      *, seed: int = 0, log: Callable[[str], None] = print) -> dict[str, LengthDistribution]:
    """Each head's predicted distribution of one sampled length for every test prompt (the ceiling: per sample)."""
    Xl, y, c = train.long(), train.obs.length, train.obs.capped
    out: dict[str, LengthDistribution] = {}
    lin: LinearHead | None = None
    for name in heads:
        log(f"[dist] fitting {name}")
        if name == "censored_lognormal":
            out[name] = CensoredLogNormalHead().fit(Xl, y, censored=c).predict_dist(test.X)
        elif name == "censored_hetero":
            out[name] = CensoredLogNormalHead(scale="linear").fit(Xl, y, censored=c).predict_dist(test.X)
        elif name == "lognormal_naive":
            out[name] = CensoredLogNormalHead(censoring="ignore").fit(Xl, y, censored=c).predict_dist(test.X)
        elif name == "quantile_linear":
            out[name] = QuantileLinearHead().fit(Xl, y).predict_dist(test.X)
        elif name in ("egtp", "probe"):
            klass = EGTPHead if name == "egtp" else ProbeHead
            head = klass(lr=1e-3, random_state=seed).fit(Xl.astype(np.float32), y)
            out[name] = head.predict_dist(test.X.astype(np.float32))
        elif name in ("linear_point", "linear_residuals"):
            lin = lin or LinearHead().fit(Xl, y)
            point = lin.predict(test.X)
            out[name] = (PointMass(point) if name == "linear_point"
                         else residual_quantiles(point, lin.predict(val.X), val.obs))
        elif name == "train_marginal":
            out[name] = Empirical([y] * len(test.X))
        elif name == CEILING:
            out[name] = leave_one_out(test.obs)
        else:
            raise ValueError(f"unknown distributional row {name!r}; valid: {list(ALL_HEADS)}")
    return out


def score_table(dists: dict[str, LengthDistribution], obs: Observations, *, reference: str = "censored_lognormal",
                n_boot: int = 1000, seed: int = 0) -> pd.DataFrame:
    """One row per head: value, low, high of every score, plus `crps_diff_vs_<reference>` (paired, per prompt)."""
    rows = []
    ref_crps = None
    if reference in dists:
        ref_crps = per_prompt(crps(dists[reference], _own(dists[reference], obs, reference)), obs)
    for name, d in dists.items():
        s = score_all(d, obs, n_boot=n_boot, seed=seed, per_sample=name == CEILING)
        row: dict[str, Any] = {"head": name, "kind": d.kind}
        for k, v in s.items():
            if isinstance(v, float):
                row[k] = v
            else:
                row[k], row[f"{k}_low"], row[f"{k}_high"] = v.value, v.low, v.high
        if ref_crps is not None and name != reference:
            diff = per_prompt(crps(d, _own(d, obs, name)), obs) - ref_crps
            iv = bootstrap_mean(diff, n_boot=n_boot, seed=seed)
            row["crps_diff"], row["crps_diff_low"], row["crps_diff_high"] = iv.value, iv.low, iv.high
        rows.append(row)
        if name == CEILING and isinstance(d, Empirical) and min(x.size for x in d.samples) >= 2:
            fair = per_prompt(crps_fair(d.samples, obs), obs)
            iv = bootstrap_mean(fair, n_boot=n_boot, seed=seed)
            row = {"head": CEILING_FAIR, "kind": "empirical", "crps": iv.value, "crps_low": iv.low,
                   "crps_high": iv.high}
            if ref_crps is not None:
                dv = bootstrap_mean(fair - ref_crps, n_boot=n_boot, seed=seed)
                row |= {"crps_diff": dv.value, "crps_diff_low": dv.low, "crps_diff_high": dv.high}
            rows.append(row)
    return pd.DataFrame(rows)


def _own(d: LengthDistribution, obs: Observations, name: str) -> Observations:
    """The observations as `d` indexes them (per sample for the ceiling)."""
    return Observations(np.arange(len(obs)), obs.length, obs.capped, obs.cap) if name == CEILING else obs


def pit_table(dists: dict[str, LengthDistribution], obs: Observations, n_bins: int = 10) -> pd.DataFrame:
    """[heads × n_bins] PIT histogram shares (flat at 1/n_bins when calibrated)."""
    return pd.DataFrame({name: pit_histogram(d, _own(d, obs, name), n_bins) for name, d in dists.items()}).T


def recap_check(train: DistSplit, test: DistSplit, short_cap: float, *, thresholds: Sequence[float] | None = None,
                levels: Sequence[float] = (0.5, 0.75, 0.9), log: Callable[[str], None] = print) -> pd.DataFrame:
    """Fits on the training samples re-capped at `short_cap`, checked on test samples at the trace's cap.

    Rows: `censored@<short>`, `naive@<short>` (cap as value), `quantile_linear@<short>`, and
    `censored@<cap>` (the same censored fit on the full-cap samples, the reference). Columns:
    `P(L>=t)` predicted mean share vs `observed P(L>=t)` for t in `thresholds` (every t ≤ the trace's cap is
    seen exactly: a sample capped at 512 is ≥ every such t), and `share <= q_τ` (the share of test samples at
    or below the predicted τ-quantile: τ when calibrated; a range where capped samples meet a q_τ beyond the
    trace's cap, which they may lie on either side of), and
    `E[min(L,cap)]` vs the observed mean of the capped test samples.
    """
    cap = test.obs.cap
    thresholds = thresholds or (short_cap, (short_cap + cap) / 2, cap)
    short = recap(train.obs, short_cap)
    Xl = train.long()
    fits = {
        f"censored@{short_cap:g}": CensoredLogNormalHead().fit(Xl, short.length, censored=short.capped),
        f"naive@{short_cap:g}": CensoredLogNormalHead(censoring="ignore").fit(Xl, short.length,
                                                                               censored=short.capped),
        f"quantile_linear@{short_cap:g}": QuantileLinearHead().fit(Xl, short.length),
        f"censored@{cap:g} (reference)": CensoredLogNormalHead().fit(Xl, train.obs.length, censored=train.obs.capped),
    }
    y, rows = test.obs.length, []
    truth: dict[str, Any] = {"fit": f"observed (test samples, cap {cap:g})"}
    for t in thresholds:
        truth[f"P(L>={t:g})"] = float((y >= t).mean())
    for tau in levels:
        truth[f"share<=q{tau:g}"] = f"{tau:.3f}"
    truth[f"E[min(L,{cap:g})]"] = float(y.mean())
    for name, head in fits.items():
        log(f"[dist] recap check: {name}")
        d = head.predict_dist(test.X)
        row: dict[str, Any] = {"fit": name}
        for t in thresholds:
            row[f"P(L>={t:g})"] = float((1 - d.cdf(np.full(len(test.X), t - 0.5))).mean())
        q = d.quantile(levels)[test.obs.row]  # [N, m]
        for k, tau in enumerate(levels):
            # a sample capped at the trace's cap is above q when q < cap; when q >= cap it is undecided:
            # the share lies between counting those as above q and as below it
            undecided = test.obs.capped & (q[:, k] >= cap)
            below = (y <= q[:, k]) & ~undecided
            lo, hi = float(below.mean()), float((below | undecided).mean())
            row[f"share<=q{tau:g}"] = f"{lo:.3f}" if hi == lo else f"{lo:.3f}–{hi:.3f}"
        row[f"E[min(L,{cap:g})]"] = float(d.mean(cap=cap)[test.obs.row].mean())
        if isinstance(d, LogNormal):
            row["sigma"] = float(np.median(d.sigma))
        rows.append(row)
    return pd.DataFrame([truth, *rows])


def synthetic_check(n_prompts: int = 1440, k: int = 3, d: int = 8, cap: float = 256.0, sigma: float = 0.6,
                    seed: int = 0) -> pd.DataFrame:
    """A synthetic trace with a known truth: log1p L = 4.9 + xᵀβ + N(0, σ²), k samples per prompt, capped.
    Rows: the censored and the naive fit; columns: σ̂ vs σ, mean |μ̂ − μ| on fresh prompts, and the
    predicted vs true share beyond 1.5 × the cap."""
    rng = np.random.default_rng(seed)
    beta = np.zeros(d)
    beta[:3] = [0.5, -0.3, 0.2]
    X = rng.normal(size=(n_prompts, d))
    Xl = np.repeat(X, k, axis=0)
    L = np.floor(np.expm1(4.9 + Xl @ beta + sigma * rng.normal(size=len(Xl))))
    capped = L >= cap
    Xt = rng.normal(size=(2000, d))
    mut = 4.9 + Xt @ beta
    t = 1.5 * cap
    true_share = float((1 - LogNormal(mut, sigma).cdf(np.full(len(mut), t))).mean())
    rows = [{"fit": "truth", "sigma": sigma, "mean abs mu error": 0.0, f"P(L>{t:g})": true_share,
             "capped share": float(capped.mean())}]
    for name, censoring in (("censored", "likelihood"), ("naive (cap as value)", "ignore")):
        dist = CensoredLogNormalHead(censoring=censoring).fit(Xl, np.minimum(L, cap), censored=capped).predict_dist(Xt)
        rows.append({"fit": name, "sigma": float(dist.sigma[0]), "mean abs mu error": float(np.abs(dist.mu - mut).mean()),
                     f"P(L>{t:g})": float((1 - dist.cdf(np.full(len(mut), t))).mean()),
                     "capped share": float(capped.mean())})
    return pd.DataFrame(rows)


__all__ = ["ALL_HEADS", "CEILING_FAIR", "LABELS", "DistSplit", "adaptation_curve", "fit_distributions", "leave_one_out", "pit_table", "recap_check",
           "residual_quantiles", "score_table", "synthetic_check"]


def adaptation_curve(source: DistSplit, stream: DistSplit, test: DistSplit, *, every: int = 40,
                     forgetting: float = 1.0, seed: int = 0) -> pd.DataFrame:
    """CRPS on `test` as a stream of completions arrives (one random sample per stream prompt, shuffled: a
    served request reveals one sampled length, capped or not); `stream_curve` does the rest."""
    rng = np.random.default_rng(seed)
    picks = []
    for r in rng.permutation(len(stream.X)):
        idx = np.flatnonzero(stream.obs.row == r)
        picks.append(int(rng.choice(idx)))
    p = np.array(picks, dtype=np.int64)
    return stream_curve(source, stream.X[stream.obs.row[p]], stream.obs.length[p], stream.obs.capped[p], test,
                        every=every, forgetting=forgetting)


def stream_curve(source: DistSplit, X: np.ndarray, length: np.ndarray, capped: np.ndarray, test: DistSplit, *,
                 every: int = 40, forgetting: float = 1.0, per_prompt_final: bool = False) -> pd.DataFrame:
    """CRPS on `test` as the completions (X[k], length[k], capped[k]) arrive in this order. Rows per labels
    seen: `static` (the censored head fitted on `source`), `censored_rls` (`CensoredRLS` from it: capped
    completions as censored), `rls_cap_as_value` (the ridge readout continued by plain RLS on capped-as-value
    lengths, with the naive log-normal's σ). `per_prompt_final`: also each test prompt's CRPS after the
    whole stream (rows with `labels` = -1 and a `prompt` column), for intervals over prompts."""
    Xs, ys, cs = source.long(), source.obs.length, source.obs.capped
    head = CensoredLogNormalHead().fit(Xs, ys, censored=cs)
    naive_sigma = float(np.exp(CensoredLogNormalHead(censoring="ignore").fit(Xs, ys).scale_intercept_))
    cens = CensoredRLS.from_censored_head(head, Xs, forgetting=forgetting)
    plain = RLSRegressor.from_linear_head(LinearHead(alpha=head.alpha_).fit(Xs, ys), Xs, forgetting=forgetting)
    static = head.predict_dist(test.X)
    rows: list[dict[str, Any]] = []

    def dists() -> tuple[tuple[str, LengthDistribution], ...]:
        return (("static", static), ("censored_rls", cens.predict_dist(test.X)),
                ("rls_cap_as_value", LogNormal(plain.predict_log(test.X), naive_sigma)))

    def score(n: int) -> None:
        for name, d in dists():
            rows.append({"labels": n, "model": name, "crps": float(per_prompt(crps(d, test.obs), test.obs).mean())})

    score(0)
    n = len(length)
    for k in range(n):
        x = X[k][None, :]
        cens.partial_fit(x, [length[k]], censored=[bool(capped[k])])
        plain.partial_fit(x, [length[k]])
        if (k + 1) % every == 0 or k + 1 == n:
            score(k + 1)
    if per_prompt_final:
        for name, d in dists():
            v = per_prompt(crps(d, test.obs), test.obs)
            rows += [{"labels": -1, "model": name, "crps": float(c), "prompt": int(j)} for j, c in enumerate(v)]
    return pd.DataFrame(rows)
