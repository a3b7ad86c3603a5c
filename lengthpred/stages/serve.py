"""The serve stage (scripts/serve.py): from a composed config to settings, prompt pool, engine and predictors of
a serving comparison (`lengthpred.serve`), then the comparison itself (`run_serve`: real engine vs simulator).

The prompts are a pooled in-domain split (`serve.split`, default every domain's test prompts), encoded as
generation encoded them (`lengthpred.prompting.encode_prompt`); their sampled lengths come from the same
targets the heads were fitted on (`lengthpred.stages.targets.load_targets`), capped samples counting as the cap.

The live RLS readout reads its row from the engine's own prefill (`serve.predictor.source=engine`, LEAP's
design: the engine captures layer L's last-prompt-token state, requests are served prefill first,
`lengthpred.serve.replay`) or from a second prefill of the embedded model on a CPU worker (`worker`).
"""

from __future__ import annotations

import fnmatch
import json
import logging
import math
from collections.abc import Callable
from dataclasses import asdict
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
from hydra.utils import instantiate
from omegaconf import DictConfig, OmegaConf

from lengthpred.data import load_prompts, load_splits
from lengthpred.data.serving_traces import load_trace
from lengthpred.distributions import tie_key
from lengthpred.errors import ConfigError, DataError
from lengthpred.heads.distributional import CensoredLogNormalHead
from lengthpred.models import load_tokenizer
from lengthpred.models.serving import checkpoint_dir
from lengthpred.names import FeatureKey, SplitName, rls_name
from lengthpred.online.config import select_alpha
from lengthpred.online.rls import RLSRegressor
from lengthpred.paths import default_datasets_root
from lengthpred.prompting import encode_prompt
from lengthpred.sched.core.hardware import get_profile
from lengthpred.sched.sweep.sources import read_prediction_files
from lengthpred.sched.sweep.summary import gains, summarize_runs
from lengthpred.serve import report, report_stats, starvation
from lengthpred.serve.calibration_check import CheckBounds
from lengthpred.serve.clock import VirtualClock, WallClock
from lengthpred.serve.engine import EngineLimits
from lengthpred.serve.experiment import GridResult, ServeSettings, fidelity_summary, resimulate, run_grid
from lengthpred.serve.fake import FakeEngine, fake_natural_length
from lengthpred.serve.featurize import CachedFeaturizer, PrefillFeaturizer
from lengthpred.serve.metrics import SLO
from lengthpred.serve.paired import HEADLINES, MIN_REPEATS, paired_gains
from lengthpred.serve.predictor import (
    DistEngineReadout,
    EngineReadout,
    NoPredictor,
    OnlineReadout,
    TablePredictor,
)
from lengthpred.serve.priority import DIST_POLICIES, POLICIES
from lengthpred.serve.profile_fit import ProfileFit, profile_from_dict, with_limits
from lengthpred.serve.replay import RunLog
from lengthpred.serve.run_folder import require_run_folder
from lengthpred.serve.vllm_engine import VLLMEngine
from lengthpred.serve.workload import PromptPool, build_pool
from lengthpred.stages.model import load_model, model_spec
from lengthpred.stages.targets import load_targets
from lengthpred.stages.tracking import tracked

log = logging.getLogger("lengthpred.serve")


def slo_from_cfg(sc: DictConfig) -> SLO:
    return SLO(float(sc.slo.ttft_s), float(sc.slo.tpot_s), int(sc.slo.get("short_tokens", SLO.short_tokens)))


def _predicting(policies: Any) -> list[str]:
    """The serving policies among `policies` that order by a prediction."""
    return [p for p in policies if p in POLICIES and POLICIES[p].needs_prediction]


def settings_from_cfg(cfg: DictConfig) -> ServeSettings:
    """The serve group's settings, after every check a bad combination of its keys needs (one line each)."""
    sc = cfg.serve
    trace = arrival_trace(cfg) if sc.arrival == "trace" else None
    bad = [p for p in sc.policies if p not in POLICIES]
    if bad:
        raise ConfigError(f"serve.policies {bad}: valid are {', '.join(POLICIES)}")
    predicting = _predicting(sc.policies)
    if predicting and sc.predictor.kind == "none":
        raise ConfigError(f"serve.policies has {predicting[0]} but serve.predictor.kind=none; choose rls or stored")
    source = predictor_source(sc)
    if source not in ("engine", "worker"):
        raise ConfigError(f"serve.predictor.source={source!r}; valid: engine, worker")
    live = sc.predictor.kind == "rls" and sc.predictor.features == "live" and bool(predicting)
    if sc.predictor.kind == "rls" and predicting:
        readout_key(sc)
    dist = [p for p in sc.policies if p in DIST_POLICIES]
    if dist and not (sc.predictor.kind == "rls" and sc.predictor.features == "live" and source == "engine"):
        raise ConfigError(f"serve.policies {dist} read a distributional head off the engine's own prefill: set "
                          "serve.predictor.kind=rls, features=live, source=engine")
    if dist:
        dist_settings(sc)
    if live and source == "worker" and sc.engine.kind == "fake" and sc.engine.fake_clock != "wall":
        raise ConfigError("a live predictor runs on the wall clock: set serve.engine.fake_clock=wall with the fake engine")
    if not sc.loads or min(sc.loads) <= 0:
        raise ConfigError(f"serve.loads={list(sc.loads)}: need positive fractions of capacity")
    return ServeSettings.from_mapping(
        OmegaConf.to_container(sc, resolve=True), data=str(cfg.data.name), cv=float(sc.arrival_cv), trace=trace,
        slo=slo_from_cfg(sc), natural_cap=natural_answers_cap(sc), **checks_from_cfg(sc))


def arrival_trace(cfg: DictConfig) -> list[float]:
    """The arrival times (s) of `serve.trace_name` (a stored serving trace, `lengthpred.data.serving_traces`) or of
    `serve.trace_path`'s `arrival` column."""
    sc = cfg.serve
    name, path = sc.get("trace_name"), sc.get("trace_path")
    if bool(name) == bool(path):
        raise ConfigError("serve.arrival=trace needs one of serve.trace_name (a stored serving trace) or "
                          "serve.trace_path (a CSV/Parquet with an `arrival` column)")
    if name:
        return load_trace(str(name), Path(cfg.paths.datasets_root))["arrival_s"].astype(float).tolist()
    p = Path(path)
    df = pd.read_parquet(p) if p.suffix == ".parquet" else pd.read_csv(p)
    if "arrival" not in df.columns:
        raise DataError(f"{p}: no `arrival` column")
    return df["arrival"].astype(float).tolist()


def natural_answers_cap(sc: DictConfig) -> int | None:
    """`serve.answers`: replay (None: each request replays a sampled length) or natural (the answers' cap,
    `serve.natural_max_tokens`: the engine stops at the end of sequence). An oracle needs a length known before
    the answer ends, which a natural answer does not have."""
    mode = str(sc.get("answers", "replay"))
    if mode == "replay":
        return None
    if mode != "natural":
        raise ConfigError(f"serve.answers={mode!r}; valid: replay, natural")
    oracles = [p for p in sc.policies if POLICIES[p].oracle]
    if oracles:
        raise ConfigError(f"serve.policies {oracles}: a natural answer's length is unknown until it ends, so there is "
                          "no oracle; drop it or use serve.answers=replay")
    cap = sc.get("natural_max_tokens")
    if cap is None or int(cap) < 1:
        raise ConfigError(f"serve.natural_max_tokens={cap}: natural answers need a cap >= 1 (tokens)")
    return int(cap)


def checks_from_cfg(sc: DictConfig) -> dict[str, Any]:
    """The calibration check's bounds, the re-measure burst and the drift bound (defaults where a stored
    config predates them)."""
    cc = sc.get("calibration_check") or {}
    d = CheckBounds()
    try:
        bounds = CheckBounds(min_r2=float(cc.get("min_r2", d.min_r2)), max_spread=float(cc.get("max_spread", d.max_spread)),
                             max_slow_share=float(cc.get("max_slow_share", d.max_slow_share)),
                             max_shift=float(cc.get("max_shift", d.max_shift)), on_fail=str(cc.get("on_fail", d.on_fail)))
    except DataError as e:
        raise ConfigError(f"serve.calibration_check: {e}") from None
    return {"check": bounds, "recheck_requests": int(cc.get("recheck_requests", 8)),
            "drift_bound": float(sc.get("drift_bound", 0.05))}


def split_ids(splits: dict, part: str) -> list[str]:
    """The ids of one in-domain part pooled over domains (`test`: every domain's test prompts)."""
    ids = sorted({i for d in splits["indomain"].values() for i in d.get(part, [])})
    if not ids:
        raise ConfigError(f"serve.split={part!r}: no in-domain prompts in that part (train | val | test)")
    return ids


def encode_ids(cfg: DictConfig, prompts: Any, ids: list[str], tokenizer: Any) -> dict[str, list[int]]:
    """Token ids of the prompts, encoded as generation encoded them (truncated past the prompt budget)."""
    budget = cfg.generate.max_prompt_tokens or int(cfg.model.max_context) - int(cfg.generate.max_new_tokens)
    row = {pid: k for k, pid in enumerate(prompts["id"])}
    missing = [i for i in ids if i not in row]
    if missing:
        raise DataError(f"{len(missing)} split ids are not in the prompt table (e.g. {missing[0]})")
    return {i: encode_prompt(tokenizer, list(prompts[row[i]]["messages"]), max_prompt_tokens=budget,
                             overflow="truncate", prompt_id=i) for i in ids}


def load_inputs(cfg: DictConfig, tokenizer: Any) -> tuple[PromptPool, Any, dict, pd.DataFrame]:
    """(pool of replayed prompts, prompt table, splits, per-prompt targets)."""
    prompts, splits = load_prompts(cfg.data), load_splits(cfg.data)
    targets = load_targets(cfg, prompts=prompts)
    ids = split_ids(splits, cfg.serve.split)
    tokens = encode_ids(cfg, prompts, ids, tokenizer)
    cap = cfg.serve.length_cap
    samples = {str(i): [min(int(x), int(cap)) if cap else int(x) for x in v] for i, v in targets["lengths"].items()}
    return build_pool(ids, tokens, samples), prompts, splits, targets


def predictor_source(sc: Any) -> str:
    """`serve.predictor.source`; runs stored before it existed read their rows on a CPU worker."""
    return str(sc.predictor.get("source", "worker"))


def readout_key(sc: Any) -> FeatureKey:
    """The feature the served RLS readout reads: `serve.predictor.layer` / `pooling` (= `readout.*`). Both of
    its sources (serve.featurize, serve.engine_readout) read the prompt's last-token state; runs stored before
    `pooling` existed read `last`."""
    pc = sc.predictor
    key = FeatureKey(int(pc.layer), str(pc.get("pooling", "last")))
    if key.pool != "last":
        raise ConfigError(f"serve.predictor.pooling={key.pool!r}: the serving readout reads the prompt's last-token "
                          "state only; set readout.pooling=last (or head.pooling=last), or serve.predictor.kind=stored")
    return key


def reads_engine_prefill(cfg: DictConfig) -> bool:
    """Whether the run's live readout reads the engine's own prefill (the engine then captures states)."""
    pc, sc = cfg.serve.predictor, cfg.serve
    return (pc.kind == "rls" and pc.features == "live" and predictor_source(sc) == "engine"
            and bool(_predicting(sc.policies)))


def serves_in_two_phases(cfg: DictConfig) -> bool:
    """Whether some run serves prefill first and then re-adds a decode (the in-engine readout, `fcfs-pf`): the
    engine then needs prefix caching, so a decode that yields re-uses its prompt's KV."""
    return reads_engine_prefill(cfg) or any(POLICIES[p].prefill_first for p in cfg.serve.policies if p in POLICIES)


def make_engine(cfg: DictConfig, state: Callable[[list[int]], np.ndarray] | None = None) -> tuple[Any, Any]:
    """(engine, clock): vLLM on the model's checkpoint and the wall clock, or the fake engine on a virtual one.
    When the readout reads the engine's prefill, vLLM captures layer `serve.predictor.layer` with prefix
    caching on and KV blocks of `serve.predictor.kv_block_size` tokens (what a request's decode phase
    re-prefills is the prompt's last, partial block); the fake engine's captured state is `state(prompt)`."""
    ec = cfg.serve.engine
    in_engine = reads_engine_prefill(cfg)
    if ec.kind == "fake":
        clock = VirtualClock() if ec.fake_clock == "virtual" else WallClock()
        prof = get_profile(ec.fake_profile, {"max_batch": int(ec.max_num_seqs),
                                             "token_budget": int(ec.max_num_batched_tokens)})
        natural = fake_natural_length if natural_answers_cap(cfg.serve) else None
        return FakeEngine(prof, clock, max_model_len=int(ec.max_model_len), state=state if in_engine else None,
                          natural=natural), clock
    if ec.kind != "vllm":
        raise ConfigError(f"serve.engine.kind={ec.kind!r}; valid: vllm, fake")
    spec = instantiate(cfg.model)
    args = dict(OmegaConf.to_container(ec.args, resolve=True) or {})
    two_phase = serves_in_two_phases(cfg)
    if two_phase:
        args.setdefault("block_size", int(cfg.serve.predictor.kv_block_size))
    engine = VLLMEngine(checkpoint_dir(spec), dtype=str(ec.dtype), max_model_len=int(ec.max_model_len),
                        max_num_seqs=int(ec.max_num_seqs), max_num_batched_tokens=int(ec.max_num_batched_tokens),
                        seed=int(ec.seed), temperature=float(ec.temperature), top_p=float(ec.top_p),
                        engine_args=args, capture_layer=readout_key(cfg.serve).layer if in_engine else None,
                        prefix_caching=two_phase, natural_eos=natural_answers_cap(cfg.serve) is not None)
    return engine, WallClock()


def stored_predictions(path: str | Path, head: str, split: str) -> dict[str, float]:
    """A saved head's predictions on a split (glob), by prompt id, from `predictions.parquet` file(s)
    (`lengthpred.sched.sweep.sources.read_prediction_files`: the newest file that has the head)."""
    df = read_prediction_files(path)
    in_split = np.array([fnmatch.fnmatchcase(str(s), split) for s in df["split"]], dtype=bool)
    df = df[(df["head"] == head).to_numpy() & in_split]
    if df.empty:
        raise DataError(f"{path}: no predictions of head {head!r} on split {split!r}")
    return {str(i): float(v) for i, v in df.groupby("id")["y_pred"].first().items()}


def predictor_factory(cfg: DictConfig, pool: PromptPool, prompts: Any, splits: dict, targets: pd.DataFrame,
                      tokenizer: Any, readout: tuple[CachedFeaturizer, Any] | None = None,
                      engine: Any = None) -> Callable[[str], tuple[str, Any]]:
    """`make(policy) -> (label, fresh predictor)`: policies without predictions get a `NoPredictor`.
    `readout`: the (featurizer, warm-started RLS) pair when already built (`_rls_readout`); `engine`: the
    engine whose captured prefill states an in-engine readout reads."""
    pc = cfg.serve.predictor
    kind = pc.kind
    if kind == "none" or not _predicting(cfg.serve.policies):
        return lambda policy: ("none", NoPredictor())
    if kind == "stored":
        values = stored_predictions(pc.predictions_path, pc.head, str(SplitName.indomain("*", cfg.serve.split)))
        missing = [i for i in pool.ids if i not in values]
        if missing:
            raise DataError(f"head {pc.head}: no stored prediction for {len(missing)} of {len(pool)} prompts")
        return lambda policy: (pc.head, TablePredictor(values, pc.head) if _predicting([policy]) else NoPredictor())
    if kind != "rls":
        raise ConfigError(f"serve.predictor.kind={kind!r}; valid: rls, stored, none")
    if pc.features not in ("live", "stored"):
        raise ConfigError(f"serve.predictor.features={pc.features!r}; valid: live, stored")
    featurize, est = readout or _rls_readout(cfg, pool, prompts, splits, targets, tokenizer)
    if reads_engine_prefill(cfg):
        label = rls_name(pc.forgetting) + "+engine"
        capture = getattr(engine, "capture", None)
        keys = (dist_keys(cfg, featurize, prompts, splits, targets, tokenizer)
                if any(p in DIST_POLICIES for p in cfg.serve.policies) else {})

        def make(policy: str) -> tuple[str, Any]:
            if policy in keys:
                name, key = keys[policy]
                return name, DistEngineReadout(key, name=name, capture=capture)
            if _predicting([policy]):  # sjf, sjf-aging: the point readout
                return label, EngineReadout(est, name=label, capture=capture, updates=str(pc.updates))
            return label, NoPredictor()
        return make
    label = rls_name(pc.forgetting) + ("" if pc.features == "live" else "+stored")
    live = pc.features == "live"
    if live:
        def rows(req):
            return featurize(req.prompt_ids)
    else:
        table = featurize.cached(pool.ids, pool.token_ids)

        def rows(req):
            return table[req.prompt_id]
    return lambda policy: (label, OnlineReadout(rows, est, live=live, name=label, updates=str(pc.updates))
                            if _predicting([policy]) else NoPredictor())


def _rls_readout(cfg: DictConfig, pool: PromptPool, prompts: Any, splits: dict, targets: pd.DataFrame,
                 tokenizer: Any) -> tuple[CachedFeaturizer, Any]:
    """The embedded model's prefill featurizer and an RLS readout warm-started (ridge, alpha by RidgeCV's
    leave-one-out over `serve.predictor.alphas`, not the linear head's validation choice) on the `fit_split`
    prompts' features and targets."""
    pc = cfg.serve.predictor
    spec = model_spec(cfg)
    model, _ = load_model(cfg)  # on cfg.device, like every stage that loads the serving model
    key = readout_key(cfg.serve)
    f = PrefillFeaturizer(model, key.layer, threads=pc.threads)
    path = Path(pc.cache_dir) / f"{cfg.model.name}-{spec.dtype}-{key}.npz"
    feat = CachedFeaturizer(f, path)
    ids = [i for i in split_ids(splits, pc.fit_split) if i in targets.index]
    tokens = encode_ids(cfg, prompts, ids, tokenizer)
    X = np.stack([v for v in feat.cached(ids, [tokens[i] for i in ids]).values()])  # [n, d]
    y = targets.loc[ids, "target"].to_numpy(float)
    alpha = select_alpha(X, y, list(pc.alphas))
    est = RLSRegressor(alpha, forgetting=float(pc.forgetting)).fit(X, y)
    log.info("RLS readout warm-started on %d %s prompts (%s, alpha %g)", len(ids), pc.fit_split, key, alpha)
    return feat, est


def dist_settings(sc: Any) -> tuple[str, float]:
    """(`serve.predictor.dist.scale`, `.beta`), checked: scale shared | linear, beta a finite number >= 0."""
    d = sc.predictor.get("dist") or {}
    scale = str(d.get("scale", "linear"))
    try:
        beta = float(d.get("beta", 0.5))
    except (TypeError, ValueError):
        raise ConfigError(f"serve.predictor.dist.beta={d.get('beta')!r}: need a finite number >= 0") from None
    if scale not in ("shared", "linear"):
        raise ConfigError(f"serve.predictor.dist.scale={scale!r}; valid: shared, linear")
    if not np.isfinite(beta) or beta < 0:
        raise ConfigError(f"serve.predictor.dist.beta={beta}: need a finite number >= 0")
    return scale, beta


def dist_keys(cfg: DictConfig, featurize: CachedFeaturizer, prompts: Any, splits: dict, targets: pd.DataFrame,
              tokenizer: Any) -> dict[str, tuple[str, Callable[[np.ndarray], float]]]:
    """policy -> (label, key of one feature row) for `sjf-dist` and `sjf-tie`: a censored log-normal head
    (`serve.predictor.dist.scale`) fitted on every sampled length of the `fit_split` prompts (a capped sample
    right-censored at the cap) on the served readout's feature; keys on min(L, cap)."""
    pc = cfg.serve.predictor
    scale, beta = dist_settings(cfg.serve)
    if "finish_reasons" not in targets.columns:
        raise DataError("serve.policies sjf-dist/sjf-tie: the targets record no finish reasons, so no sample is "
                        "known to be capped; use a generated trace (data with a reference trace)")
    ids = [i for i in split_ids(splits, pc.fit_split) if i in targets.index]
    tokens = encode_ids(cfg, prompts, ids, tokenizer)
    rows = featurize.cached(ids, [tokens[i] for i in ids])
    X, y, cens = [], [], []
    for i in ids:
        for length, reason in zip(targets.at[i, "lengths"], targets.at[i, "finish_reasons"], strict=True):
            X.append(rows[i])
            y.append(float(length))
            cens.append(reason == "length")
    head = CensoredLogNormalHead(scale=scale, alphas=list(pc.alphas)).fit(np.stack(X), np.array(y), censored=cens)
    cap = head.cap_ if np.isfinite(head.cap_) else float(cfg.generate.max_new_tokens)
    if cfg.serve.length_cap:  # the replayed answers are cut there too
        cap = min(cap, float(cfg.serve.length_cap))
    name = "censored_hetero" if scale == "linear" else "censored_lognormal"
    log.info("distributional readout %s fitted on %d samples of %d %s prompts (%.0f%% capped at %g)", name, len(y),
             len(ids), pc.fit_split, 100 * float(np.mean(cens)), cap)
    return {"sjf-dist": (f"{name}:mean+engine", lambda x: float(head.predict_dist(x).mean(cap=cap)[0])),
            "sjf-tie": (f"{name}:tie{beta:g}+engine", lambda x: float(tie_key(head.predict_dist(x), cap, beta)[0]))}


def load_profile_fit(path: str | Path) -> ProfileFit:
    """A fitted step-time profile saved as profile.json (`serve.profile_path`) by an earlier serve run."""
    d = json.loads(Path(path).read_text())
    return ProfileFit(profile_from_dict(d), int(d.get("n_steps", 0)), float(d.get("r2", "nan")),
                      float(d.get("rel_rmse", "nan")), float(d.get("mean_step_s", "nan")))


def serve_into(cfg: DictConfig, out: str | Path, tracker: Any) -> Path:
    """Replay the prompt pool on the engine under every policy, load and repeat, check the simulator against
    it, write the tables, fidelity, requests, steps, profile and plots into `out` (schemas in
    lengthpred/serve/experiment.py) and print them. Returns the folder. `serve.resimulate=<a serve run's
    folder>` starts no engine: that run's measurements are replayed by the current simulator instead."""
    sc = cfg.serve
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    if sc.get("resimulate"):
        res, settings, name, limits = resimulated(Path(sc.resimulate), slo=slo_from_cfg(sc), checks=checks_from_cfg(sc),
                                                  datasets_root=cfg.paths.datasets_root,
                                                  speed_window_s=sc.get("speed_window_s"))
        print(f"serve: the runs stored in {sc.resimulate} replayed by the simulator (no engine)", flush=True)
        return write_serve(cfg, res, settings, name, limits, out, tracker, stored=OmegaConf.create(
            json.loads((Path(sc.resimulate) / "serve.json").read_text())["config"]))
    settings = settings_from_cfg(cfg)
    tokenizer = load_tokenizer(instantiate(cfg.model))
    pool, prompts, splits, targets = load_inputs(cfg, tokenizer)
    readout = None
    if sc.predictor.kind == "rls" and _predicting(sc.policies):
        readout = _rls_readout(cfg, pool, prompts, splits, targets, tokenizer)
    engine, clock = make_engine(cfg, state=readout[0] if readout else None)
    make_predictor = predictor_factory(cfg, pool, prompts, splits, targets, tokenizer, readout=readout, engine=engine)
    fit = with_limits(load_profile_fit(sc.profile_path), engine.limits) if sc.profile_path else None
    print(f"serve: {len(pool)} {sc.split} prompts, {settings.n_requests} requests per run, loads {settings.loads}, "
          f"repeats {settings.seeds}, policies {settings.policies}; engine {engine.name} (max_num_seqs "
          f"{engine.limits.max_batch}, {engine.limits.kv_blocks} KV blocks of {engine.limits.block_size})", flush=True)
    res = run_grid(engine, pool, settings, make_predictor, clock=clock, fit=fit,
                   progress=lambda msg: print(msg, flush=True))
    return write_serve(cfg, res, settings, engine.name, engine.limits, out, tracker, stored=sc)


def resimulated(run_dir: Path, slo: SLO | None = None, checks: dict[str, Any] | None = None,
                datasets_root: str | Path | None = None, speed_window_s: float | None = None
                ) -> tuple[GridResult, ServeSettings, str, EngineLimits]:
    """A stored serve run (`run_serve`'s folder) replayed by the current simulator on its own calibration
    profile, with its own settings (`lengthpred.serve.experiment.resimulate`); `slo`: goodput and the short
    answers' threshold at this SLO instead of the stored one; `checks`: the calibration check's bounds and
    the drift bound instead of the stored ones (`checks_from_cfg`); `datasets_root`: where a run with trace
    arrivals finds its trace (default: the checkout's datasets); `speed_window_s`: also replay every run at its
    own speed over windows of this many seconds (`ServeSettings.speed_window_s`; None keeps the stored setting)."""
    require_run_folder(run_dir, "serve.resimulate=")
    meta = json.loads((run_dir / "serve.json").read_text())
    runs = pd.read_csv(run_dir / "serve_runs.csv")
    data = str(runs["data"].iloc[0]) if len(runs) else "unknown"
    # runs stored before the stage protocol also hold their run folder (`out_dir`), which is no setting
    stored = {k: v for k, v in meta["config"].items() if k != "out_dir"}
    root = str(datasets_root if datasets_root is not None else default_datasets_root())
    settings = settings_from_cfg(OmegaConf.create({"serve": stored, "data": {"name": data},
                                                   "paths": {"datasets_root": root}}))
    if slo is not None:
        settings.slo = slo
    for k, v in (checks or {}).items():
        setattr(settings, k, v)
    if speed_window_s is not None:
        settings.speed_window_s = float(speed_window_s)
    limits = EngineLimits(**meta["limits"])
    cal_path = run_dir / "calibration_steps.parquet"
    cal = RunLog(pd.DataFrame(), pd.read_parquet(cal_path), {}, False, 0.0) if cal_path.is_file() else None
    check_path = run_dir / "calibration_check.json"
    shift = json.loads(check_path.read_text()).get("shift") if check_path.is_file() else None
    res = resimulate(pd.read_parquet(run_dir / "serve_requests.parquet"), pd.read_parquet(run_dir / "serve_steps.parquet"),
                     runs.drop(columns="experiment", errors="ignore"), meta["engine"], limits,
                     load_profile_fit(run_dir / "profile.json"), float(meta["capacity_req_s"]), settings, cal,
                     math.nan if shift is None else float(shift))
    return res, settings, meta["engine"], limits


def write_serve(cfg: DictConfig, res: GridResult, settings: ServeSettings, engine_name: str, limits: EngineLimits,
                out: Path, tracker: Any, stored: Any) -> Path:
    """The tables, fidelity, requests, steps, profile and plots of a comparison into `out`, and the printout.
    `stored`: the serve config recorded in serve.json."""
    sc = cfg.serve
    runs = res.runs.copy()
    runs.insert(0, "experiment", cfg.experiment_name)
    summary = summarize_runs(runs.drop(columns="experiment"))
    summary.insert(0, "experiment", cfg.experiment_name)
    real = runs[runs["hardware"] == engine_name].drop(columns="experiment")
    gain = gains(real)
    few = gain["n"] < MIN_REPEATS  # a bootstrap over fewer repeats says little: no interval (serve_paired.csv)
    gain[["ci_low", "ci_high"]] = gain[["ci_low", "ci_high"]].astype(object).where(~few, np.nan)
    fsum, fsum_all = fidelity_summary(res.fidelity), fidelity_summary(res.fidelity_all)
    runs.to_csv(out / "serve_runs.csv", index=False)
    summary.to_csv(out / "serve_results.csv", index=False)
    gain.to_csv(out / "serve_gains.csv", index=False)
    paired = paired_gains(real, res.requests, settings.slo) if len(res.requests) else pd.DataFrame()
    paired.to_csv(out / "serve_paired.csv", index=False)

    def paired_over(baseline: str, file: str, metrics: Any = HEADLINES, only: list[str] | None = None) -> pd.DataFrame:
        """Every policy (or `only` these) paired against `baseline` when both ran, written to `file` if any."""
        if not len(res.requests) or not (real["policy"] == baseline).any() or only == []:
            return pd.DataFrame()
        pg = paired_gains(real, res.requests, settings.slo, metrics, baseline=baseline)
        pg = pg[pg["policy"].isin(only)] if only is not None else pg
        if len(pg):
            pg.to_csv(out / file, index=False)
        return pg

    # what the predictions buy once prefills go first anyway (serve.policies: fcfs-pf)
    paired_pf = paired_over("fcfs-prefill-first", "serve_paired_prefill_first.csv")
    # what knowing the uncertainty buys on one head: every policy against SJF on that head's expected length
    paired_dist = paired_over("sjf-dist", "serve_paired_dist.csv")
    # what aging buys and costs: each aging policy against SJF on the same predictor and runs
    paired_aging = paired_over("sjf", "serve_paired_aging.csv", [m for m, _ in report_stats.AGING_SHOWN],
                               only=sorted({p for p in real["policy"] if p in POLICIES and POLICIES[p].ages}))
    res.drift.to_csv(out / "serve_drift.csv", index=False)
    weights = [float(w) for w in (sc.get("starvation") or {}).get("weights", [])]
    starv = starvation.compare(res.requests, res.fit.profile, starvation.starvation_policies(weights), settings.sim,
                               settings.slo) if len(res.requests) and weights else pd.DataFrame()
    starv.to_csv(out / "serve_starvation.csv", index=False)
    if res.check is not None:
        (out / "calibration_check.json").write_text(json.dumps(res.check.to_dict(), indent=1))
    res.fidelity.to_csv(out / "serve_fidelity.csv", index=False)
    fsum.to_csv(out / "fidelity_summary.csv", index=False)
    fsum_all.to_csv(out / "fidelity_in_sample_summary.csv", index=False)
    fsum_plain = fidelity_summary(res.fidelity_no_contention)
    fsum_plain.to_csv(out / "fidelity_no_contention_summary.csv", index=False)
    fsum_speed = fidelity_summary(res.fidelity_at_speed)
    fsum_speed.to_csv(out / "fidelity_at_run_speed_summary.csv", index=False)
    fsum_track = fidelity_summary(res.fidelity_tracking)
    fsum_track.to_csv(out / "fidelity_previous_run_speed_summary.csv", index=False)
    fsum_regimes = fidelity_summary(res.fidelity_regimes)
    fsum_regimes.to_csv(out / "fidelity_at_run_regime_speeds_summary.csv", index=False)
    fsum_time = fidelity_summary(res.fidelity_over_time)
    if len(fsum_time):
        fsum_time.to_csv(out / "fidelity_at_run_speed_over_time_summary.csv", index=False)
    fsum_tracked = fidelity_summary(res.fidelity_tracked)
    if len(fsum_tracked):
        fsum_tracked.to_csv(out / "fidelity_tracking_windows_summary.csv", index=False)
    if res.calibration is not None:
        res.calibration.steps.to_parquet(out / "calibration_steps.parquet", index=False)
    res.residuals.to_csv(out / "step_residuals.csv", index=False)
    res.requests.to_parquet(out / "serve_requests.parquet", index=False)
    res.steps.to_parquet(out / "serve_steps.parquet", index=False)
    (out / "profile.json").write_text(json.dumps(res.fit.to_dict(), indent=1))
    (out / "serve.json").write_text(json.dumps({
        "engine": engine_name, "limits": asdict(limits), "capacity_req_s": res.capacity,
        "profile": res.fit.to_dict(), "profile_all_runs": res.fit_all.to_dict() if res.fit_all else None,
        "overload": res.overload, "config": OmegaConf.to_container(stored, resolve=True)}, indent=1, default=str))
    table = report.results_table(summary, engine_name, MIN_REPEATS)
    ftable = report.fidelity_table(fsum, settings.drift_bound)
    if sc.plots and not res.requests.empty:
        report.plot_latency_cdf(res.requests, out / "serve_latency_cdf.png")
        report.plot_queue(res.steps, out / "serve_queue.png")
        tracker.log_image("serve_latency_cdf", out / "serve_latency_cdf.png")
    tracker.log_table("serve_fidelity", list(fsum.columns), fsum.values.tolist())
    n_rep = len(settings.seeds)
    ci = "[95% CI]" if n_rep >= MIN_REPEATS else f"({n_rep} repeats: too few for an interval)"
    print(f"\n**Real engine ({engine_name}), means over {n_rep} repeats {ci}**\n\n{table}")
    print(f"\n**Latencies (s), means over {n_rep} repeats of each run's statistic**\n\n"
          f"{report_stats.latency_table(real)}\n\n{report_stats.per_token_table(real, settings.slo)}")
    print(f"\n**Paired gains over FCFS ({n_rep} repeats; exact sign-flip test over repeats; an interval needs >= "
          f"{MIN_REPEATS})**\n\n{report_stats.paired_table(paired)}")
    if len(paired_pf):
        print(f"\n**Paired gains over FCFS with prefills first (fcfs-pf: the same two-phase serving order, decodes by "
              f"arrival; what the predictions alone buy)**\n\n{report_stats.paired_table(paired_pf, base='FCFS-pf')}")
    if len(paired_dist):
        print(f"\n**Paired gains over SJF on a distributional head's expected length (sjf-dist: what the rest of "
              f"the distribution adds on the same head)**\n\n{report_stats.paired_table(paired_dist, base='SJF-dist')}")
    if len(paired_aging):
        print(f"\n**Paired gains of aging over SJF without it (same predictor and runs: what aging buys in the tail "
              f"and costs elsewhere)**\n\n{report_stats.paired_table(paired_aging, report_stats.AGING_SHOWN, base='SJF')}")
    if len(starv):
        print(f"\n**Starvation: every policy on the same workloads in the simulator ({res.fit.profile.name}; the "
              f"predictions the live predictor made; no predictor cost), means over {n_rep} repeats**\n\n"
              f"{starvation.table(starv)}")
    if res.check is not None:
        print(f"\n{res.check.reason}")
    off = res.drift[res.drift["drifting"]] if len(res.drift) else res.drift
    if len(off):
        print(f"\nruns whose steps drifted more than ±{100 * settings.drift_bound:g}% from the profile (measured / "
              "modelled step time): " + "; ".join(f"seed {r.seed} load {r.load:g} {r.policy} {r.drift:.3f}"
                                                for r in off.itertuples()))
    print(f"\n**Simulator ({res.fit.profile.name}) vs real**\n\n{ftable}")
    if len(fsum_all):
        worst = fsum_all[fsum_all["metric"].isin([c[0] for c in report.FID_COLUMNS])]["max_abs_err"].max()
        print(f"\nIn sample (profile refitted on every run's steps, {res.fit_all.profile.name}): worst |error| "
              f"{100 * worst:.1f}%; if this is small and the table above is not, the calibration burst is at fault, "
              f"not the model's form")
    if len(fsum_speed):
        print(f"\n**The same replay at each run's own speed** (every time coefficient of the profile times the run's "
              f"measured drift, read from its steps, so in sample by one number per run): what is left is the "
              f"queueing model's error, not the machine's speed\n\n{report.fidelity_table(fsum_speed)}")
    if len(fsum_regimes):
        print(f"\n**At each run's own decode and prefill speeds** (the decode steps' drift on every time coefficient "
              f"but the per-token prefill time, which gets the factor that makes the run's prefill steps match: two "
              f"numbers per run, in sample; a TTFT miss left here is not the prefills' speed)\n\n"
              f"{report.fidelity_table(fsum_regimes)}")
    if len(fsum_time):
        print(f"\n**At each run's own speed over time** (`serve.speed_window_s` = {settings.speed_window_s:g} s: the "
              f"profile times the run's measured / modelled step time in each window, in sample by one number per "
              f"window; a miss left here is the queueing model's, one gone here was the machine's speed within the "
              f"run)\n\n{report.fidelity_table(fsum_time)}")
    if len(fsum_tracked):
        print(f"\n**Tracking the engine's speed within the run** (each {settings.speed_window_s:g} s window on the "
              f"profile times the measured / modelled step time of the window before it, the first at the previous "
              f"run's drift: out of sample within the run, what a simulator beside the engine reading its completed steps "
              f"could know)\n\n{report.fidelity_table(fsum_tracked)}")
    if len(fsum_track):
        print(f"\n**At the previous run's speed** (a calibration that tracks the machine between runs, out of "
              f"sample: each run on the profile times the drift of the run before it)\n\n"
              f"{report.fidelity_table(fsum_track)}")
    if len(fsum_plain):
        print(f"\nLive-predictor runs without the contention model (steps not slowed while a prediction "
              f"runs):\n\n{report.fidelity_table(fsum_plain)}")
    print(f"\nstep-time model vs measured (calibration profile):\n{res.residuals.to_string(index=False)}")
    print(f"\nwrote {out}/serve_results.csv (+ runs, gains, fidelity, requests, steps, profile, plots)")
    return out


def run_serve(cfg: DictConfig, out: str | Path) -> Path:
    """The serve stage (scripts/serve.py): `serve_into(cfg, out, tracker)` with its W&B run. Returns the folder."""
    with tracked(cfg, "serve") as tracker:
        return serve_into(cfg, out, tracker)
