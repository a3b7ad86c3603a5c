"""Measuring T6 costs of saved heads on a sample of real inputs (`measure_costs`), what each head captures
from the prefill (`capture_kind`, `capture_settings`), and `write_costs`. See lengthpred/costs/__init__.py."""

from __future__ import annotations

import contextlib
import dataclasses
import json
import logging
import statistics
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from lengthpred.costs.timing import (
    PREFILL,
    _ms,
    clock_name,
    extraction_times,
    overhead_pct,
    per_request,
    request_latencies,
    rls_latencies,
)
from lengthpred.errors import ConfigError, DataError
from lengthpred.features.settings import FeatureSettings
from lengthpred.heads.base import HeadInput, load_head
from lengthpred.heads.binned import torch_threads
from lengthpred.integrity import temp_path
from lengthpred.models.device import input_device
from lengthpred.names import FeatureKey, hidden_name, rls_name
from lengthpred.prompting import encode_prompt
from lengthpred.settings import settings_from

log = logging.getLogger(__name__)
CLOCKS = ("auto", "cpu", "wall", "device")  # auto: device on a GPU, cpu elsewhere (lengthpred.costs.timing.stopwatch)
LEARNED = "learned"  # pooling of heads that read token-level states (input kind `tokens`)
PREFILL_KINDS = ("features", "tokens")  # head input kinds captured from the prefill


@dataclass
class HeadRun:
    """A saved head and what its run recorded (metrics.json): `feature` (e.g. hs.L20.last) for heads that
    read a pooled column, `layer`/`pooling` (`learned` for token-level heads), the model, and `features`:
    the features settings it was trained under (its run's config; None: time it under the current one).
    `config` is the run's `.hydra/config.yaml`, read only by `lengthpred.stages.runs` and `.costs`."""

    name: str
    head_dir: Path
    feature: str | None = None
    layer: int | None = None
    pooling: str | None = None
    model: str | None = None
    config: Any = None
    features: FeatureSettings | None = None


@dataclass(frozen=True)
class CostSettings:
    """The keys of `conf/costs/default.yaml` (all optional: these are the defaults)."""

    heads: tuple[str, ...] = ("train", "train_proxy")  # stages whose saved heads are timed (experiment dir)
    online_summary: str | None = "auto"  # auto: the adapt stage's newest summary.csv; a path: that file; null: measure
    online: bool = True  # rls@λ rows (online.forgetting) on the online feature; needs a feature store
    split: str = "test"  # in-domain part the prompts are sampled from
    predict_prompts: int = 16
    predict_repeats: int = 5
    extract_prompts: int = 4  # picked at evenly spaced prompt-length quantiles of the split
    extract_repeats: int = 3
    threads: int = 1  # torch intra-op threads while timing extraction (heads keep their own n_threads)
    clock: str = "auto"  # extraction: process CPU time on the CPU (least disturbed on a shared machine), CUDA events on a GPU
    seed: int = 0

    def __post_init__(self) -> None:
        object.__setattr__(self, "heads", tuple(self.heads or ()))
        if self.clock not in CLOCKS:
            raise ConfigError(f"costs.clock={self.clock!r}: use one of {list(CLOCKS)}")
        for k in ("predict_prompts", "predict_repeats", "extract_prompts", "extract_repeats", "threads"):
            if int(getattr(self, k)) < 1:
                raise ConfigError(f"costs.{k} must be >= 1")

    @classmethod
    def from_cfg(cls, cfg: Mapping[str, Any] | None) -> CostSettings:
        """From the `costs` config group (absent: defaults); `name`/`experiment_dir` are read elsewhere."""
        return settings_from(cls, cfg, group="costs", skip=("name", "experiment_dir"))


@dataclass(frozen=True)
class OnlineCosts:
    """What the `rls@λ` rows read of the online group (`conf/online`): the adapt stage owns that group and
    checks its keys (`AdaptSettings`); the other keys are its, not unknown here."""

    feature: str  # the readout's feature key, e.g. hs.L20.last
    forgetting: tuple[float, ...] = ()  # one rls@λ row per λ
    alpha: float | None = None  # ridge prior; null (RidgeCV per pair): timed at 1, the cost is the same
    trace_cap: float | None = None
    blas_threads: int | None = None

    @classmethod
    def from_cfg(cls, online: Mapping[str, Any]) -> OnlineCosts:
        mine = {f.name for f in dataclasses.fields(cls)}
        return settings_from(cls, {k: v for k, v in online.items() if k in mine}, group="online")


@dataclass
class Sample:
    """Real inputs of a few prompts. `columns(name) -> [n, d]` and `tokens(layer) -> n arrays [t, d+2]`
    read the feature store (None without one); `messages` are the pool the extraction prompts are picked
    from (any size)."""

    ids: list[str]
    texts: list[str]
    domains: list[str]
    messages: list[list[dict]] = field(default_factory=list)
    columns: Callable[[str], np.ndarray] | None = None
    tokens: Callable[[int], list[np.ndarray]] | None = None
    n_prompt_tokens: np.ndarray | None = None


# -- what a head captures --------------------------------------------------------------------------------------
def capture_kind(pooling: str | None) -> str:
    """What a pooling needs on top of a plain prefill: none | hidden | hidden+entropy | hidden+attn |
    hidden+entropy+attn."""
    if pooling is None:
        return "none"
    if pooling in ("last", "mean"):
        return "hidden"
    if pooling == "entropy":
        return "hidden+entropy"
    if pooling == "attn":
        return "hidden+attn"
    if pooling.startswith("fused_") or pooling == LEARNED:
        return "hidden+entropy+attn"
    raise ConfigError(f"unknown pooling {pooling!r} (last | mean | entropy | attn | fused_<spec> | learned)")


def capture_settings(base: Any, layer: int, pooling: str) -> Any:
    """The features config reduced to what one head reads: its layer and its pooling only (`learned`: that
    layer's token-level states with per-token entropy and attention)."""
    capture_kind(pooling)  # validates
    tokens: tuple[int, ...] = ()
    if pooling.startswith("fused_"):
        pools, fused = (), (pooling.removeprefix("fused_"),)
    elif pooling == LEARNED:
        pools, fused, tokens = ("entropy", "attn"), (), (int(layer),)
    else:
        pools, fused = (pooling,), ()
    return dataclasses.replace(base, layers=(int(layer),), pools=pools, fused=fused, token_layers=tokens)


# -- the measurement -----------------------------------------------------------------------------------
def measure_costs(
    runs: Sequence[HeadRun],
    sample: Sample,
    settings: CostSettings,
    *,
    model: Any = None,
    tokenizer: Any = None,
    feature_settings: Any = None,
    max_prompt_tokens: int | None = None,
    online: OnlineCosts | None = None,
    online_summary: str | Path | None = None,
    progress: bool = True,
) -> dict[str, Any]:
    """`{"meta": ..., "rows": [...]}`: one row per head (and per `rls@λ` when `online` is given).

    `model`/`tokenizer`/`feature_settings` (the current features config: the fallback for heads without a
    run config, and the prompt overflow rule) are needed when a head reads prefill state; `online`: what the
    `rls@λ` rows read of the online config.
    """
    t0 = time.perf_counter()
    rows: dict[str, dict[str, Any]] = {}
    # capture kind -> (layer, pooling, features config) it is timed under; measured once per kind: which
    # layer is read or pooled does not change the cost (a hook keeps a reference)
    captures: dict[str, tuple[int, str, Any]] = {}
    predict_meta: dict[str, Any] = {}
    for run in runs:
        rows[run.name], predict_meta[run.name], capture = _head_costs(run, sample, settings)
        if capture is not None:
            captures.setdefault(rows[run.name]["capture"], capture)
    update_meta: dict[str, Any] = {}
    if online is not None:
        online_rows, update_meta, capture = _online_costs(online, sample, settings, online_summary)
        rows |= online_rows
        captures.setdefault(capture_kind(capture[1]), capture)
    t_predict = time.perf_counter() - t0

    extraction_meta: dict[str, Any] = {}
    if captures:
        if model is None or tokenizer is None or feature_settings is None:
            raise ConfigError(
                "heads read prefill state: timing its extraction needs the model and features config"
            )
        seqs = _encode(
            tokenizer, sample.messages, settings.extract_prompts, max_prompt_tokens, feature_settings.overflow
        )
        variants = {
            k: capture_settings(base or feature_settings, lay, pool)
            for k, (lay, pool, base) in captures.items()
        }
        with torch_threads(settings.threads):
            times = extraction_times(
                model,
                seqs,
                variants,
                repeats=settings.extract_repeats,
                clock=settings.clock,
                progress=progress,
            )
        pct = overhead_pct(times)
        for row in rows.values():
            if row["capture"] in pct:
                row["extraction_overhead_pct"] = pct[row["capture"]]
        base_s = statistics.median(times[PREFILL])
        extraction_meta = {
            "n_prompts": len(seqs),
            "prompt_tokens": [len(s) for s in seqs],
            "repeats": settings.extract_repeats,
            "threads": settings.threads,
            "clock": clock_name(settings.clock, input_device(model)),
            "batch_size": 1,
            "baseline": "decoder forward without capture hooks (no LM head, no KV cache)",
            "variants": {k: str(FeatureKey(lay, pool)) for k, (lay, pool, _) in captures.items()},
            "median_s": {k: statistics.median(v) for k, v in times.items()},
            # repetition spread of the plain prefill: overheads within it are noise
            "prefill_spread_pct": 100.0 * (max(times[PREFILL]) - min(times[PREFILL])) / base_s,
            "runs_s": times,
        }
    return {
        "meta": {
            "predict": {
                "n_prompts": len(sample.ids),
                "repeats": settings.predict_repeats,
                "batch_size": 1,
                "clock": "wall",
                "split": settings.split,
                "per_head": predict_meta,
            },
            "extraction": extraction_meta,
            "update": update_meta,
            "seconds": {"latencies": t_predict, "total": time.perf_counter() - t0},
        },
        "rows": [rows[k] for k in sorted(rows)],
    }


def _head_costs(
    run: HeadRun, sample: Sample, settings: CostSettings
) -> tuple[dict[str, Any], dict[str, float], tuple[int, str, Any] | None]:
    """(row, latency stats, what it captures: (layer, pooling, its features config) or None) of one head."""
    head = load_head(run.head_dir)
    kind_in = head.input_kind
    inputs = HeadInput(
        ids=list(sample.ids),
        features=_column(sample, run.feature) if kind_in == "features" else None,
        tokens=_tokens(sample, run) if kind_in == "tokens" else None,
        texts=list(sample.texts),
        domains=list(sample.domains),
        n_prompt_tokens=sample.n_prompt_tokens,
    )
    med, p90 = _ms(
        request_latencies(head.predict, per_request(inputs.x_for(kind_in)), settings.predict_repeats)
    )
    row: dict[str, Any] = {
        "head": run.name,
        "n_parameters": int(head.n_parameters),
        "predict_latency_ms": med,
    }
    if kind_in not in PREFILL_KINDS:
        row["capture"] = "proxy encoder (in predict latency)" if kind_in == "texts" else "none"
        row["extraction_overhead_pct"] = 0.0
        return row, {"median_ms": med, "p90_ms": p90}, None
    pooling = LEARNED if kind_in == "tokens" else str(run.pooling)
    row["capture"] = capture_kind(pooling)
    row["feature"] = run.feature or f"{hidden_name(int(run.layer))} (token-level)"
    return row, {"median_ms": med, "p90_ms": p90}, (int(run.layer), pooling, run.features)


def _online_costs(
    online: OnlineCosts, sample: Sample, settings: CostSettings, summary_path: str | Path | None
) -> tuple[dict[str, dict[str, Any]], dict[str, Any], tuple[int, str, Any]]:
    """Rows of the `rls@λ` heads on the online feature: predict latency measured, update latency from the
    online stage's summary when it has the head, else measured."""
    feat = online.feature
    layer, pooling = _parse_feature(feat)
    X = _column(sample, feat)
    summary = _online_update_ms(summary_path)
    rows, meta = {}, {}
    with _blas_threads(online.blas_threads):
        for lam in online.forgetting:
            name = rls_name(lam)
            pred, upd = rls_latencies(
                X,
                float(lam),
                settings.predict_repeats,
                alpha=float(online.alpha or 1.0),  # null (RidgeCV per pair): the cost is the same
                trace_cap=online.trace_cap,
            )
            rows[name] = {
                "head": name,
                "n_parameters": int(X.shape[1] + 1),
                "predict_latency_ms": _ms(pred)[0],
                "capture": capture_kind(pooling),
                "feature": feat,
            }
            if name in summary:
                rows[name]["update_latency_ms"] = summary[name]
                meta[name] = {"source": str(summary_path), "mean_over_pairs_ms": summary[name]}
            else:
                med, p90 = _ms(upd)
                rows[name]["update_latency_ms"] = med
                meta[name] = {"source": "measured", "median_ms": med, "p90_ms": p90}
    return rows, meta, (layer, pooling, None)


def _column(sample: Sample, name: str | None) -> np.ndarray:
    if name is None:
        raise DataError("a feature head's run records no feature (metrics.json lacks `feature`/`layer`)")
    if sample.columns is None:
        raise DataError(f"{name}: no feature store to read it from (run scripts/extract.py first)")
    return np.asarray(sample.columns(name), dtype=np.float32)


def _tokens(sample: Sample, run: HeadRun) -> list[np.ndarray]:
    if run.layer is None:
        raise DataError(f"{run.name}: its run records no layer (metrics.json) to read token-level states of")
    if sample.tokens is None:
        raise DataError(
            f"{run.name}: no feature store with token-level states (run scripts/extract.py first)"
        )
    return sample.tokens(int(run.layer))


def _parse_feature(name: str) -> tuple[int, str]:
    try:
        key = FeatureKey.parse(name)
    except ConfigError as e:
        raise ConfigError(f"online.{e}") from None
    return key.layer, key.pool


def _online_update_ms(path: str | Path | None) -> dict[str, float]:
    """head → mean update_ms over pairs from the online stage's summary.csv (as T6 reads it)."""
    if path is None or not Path(path).is_file():
        return {}
    import pandas as pd

    df = pd.read_csv(path)
    if not {"head", "update_ms"} <= set(df.columns):
        return {}
    ms = df.assign(update_ms=pd.to_numeric(df["update_ms"], errors="coerce")).dropna(subset=["update_ms"])
    return {str(h): float(g.mean()) for h, g in ms.groupby("head")["update_ms"]}


@contextlib.contextmanager
def _blas_threads(n: Any) -> Iterator[None]:
    if n is None:
        yield
        return
    from threadpoolctl import threadpool_limits

    with threadpool_limits(limits=int(n), user_api="blas"):
        yield


def _encode(
    tokenizer: Any,
    messages: Sequence[Sequence[Mapping[str, str]]],
    n: int,
    max_prompt_tokens: int | None,
    overflow: str,
) -> list[list[int]]:
    """Token ids of n prompts at evenly spaced length quantiles (so the sample spans short and long)."""
    seqs = []
    for m in messages:
        with contextlib.suppress(DataError):  # empty / over-long under overflow=reject: not a request
            seqs.append(
                encode_prompt(tokenizer, list(m), max_prompt_tokens=max_prompt_tokens, overflow=overflow)
            )
    if not seqs:
        raise DataError("no prompt of the sample could be encoded for the extraction timing")
    seqs.sort(key=len)
    picks = sorted({min(len(seqs) - 1, int((k + 0.5) * len(seqs) / n)) for k in range(n)})
    return [list(seqs[i]) for i in picks]


def write_costs(doc: Mapping[str, Any], path: str | Path) -> Path:
    """costs.json (atomically): `{"meta": ..., "rows": [...]}`."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = temp_path(path)  # this writer's own
    tmp.write_text(json.dumps(doc, indent=2, sort_keys=False) + "\n")
    tmp.replace(path)
    return path
