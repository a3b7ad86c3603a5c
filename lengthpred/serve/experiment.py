"""The serving comparison: calibrate, then loads × repeats × policies on one engine, each run replayed by
the simulator; tidy frames in the T5 format.

1. Calibration: a burst of requests at t = 0 under FCFS fills the batch and drains it; the step times give
   the profile (`lengthpred.serve.profile_fit`) whose capacity (`lengthpred.sched.core.workload.capacity`)
   turns each load (a fraction of capacity) into an arrival rate. The simulator replays the runs on this
   profile, fitted on the calibration run only, so the fidelity comparison is out of sample; a second fit
   on every run's steps (`fit_all`) shows whether a miss is the model's form or the calibration.
2. Runs: per repeat, one draw of requests (prompt, replayed length) and one arrival pattern; per load the
   pattern is scaled to that rate; per policy the same work is served (common random numbers). Policies
   run in turn within each (repeat, load), so drift on a shared machine hits them alike.
3. Each run: metrics (`lengthpred.serve.metrics`), overload check, and its simulation on the profile.

Frames (`GridResult`): `runs` (tidy T5 rows: hardware, data, policy, predictor, load, seed, metric, value;
hardware = the engine's name for real runs, `sim:<profile>` for simulated ones), `requests` and `steps`
(per request / per step of every real run, with seed, load, policy, predictor), `fidelity` (per run and
metric: real, sim, signed and absolute error), `residuals` (step-time model vs measured per regime).
"""

from __future__ import annotations

import dataclasses
import logging
import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, ClassVar

import numpy as np
import pandas as pd

from lengthpred.errors import DataError
from lengthpred.sched.core.workload import capacity
from lengthpred.serve.calibration_check import CalibrationCheck, CheckBounds, check_calibration, run_drifts
from lengthpred.serve.clock import WallClock
from lengthpred.serve.engine import Engine, EngineLimits
from lengthpred.serve.fidelity import (
    at_speed,
    contention_factor,
    errors,
    regime_speeds,
    sim_metrics,
    simulate_run,
    speed_windows,
    step_residuals,
    tracked_windows,
)
from lengthpred.serve.metrics import SLO, blank_latencies, overloaded, real_run_metrics
from lengthpred.serve.predictor import NoPredictor
from lengthpred.serve.priority import AGING_WEIGHT, by_sim_policy, get_policy
from lengthpred.serve.profile_fit import ProfileFit, fit_profile
from lengthpred.serve.replay import STEP_COLUMNS, RunLog, replay
from lengthpred.serve.workload import PromptPool, draw_requests, make_requests, unit_arrivals
from lengthpred.settings import settings_from

log = logging.getLogger("lengthpred.serve")
KEYS = ["policy", "predictor", "load", "seed"]  # of one run


@dataclass
class ServeSettings:
    loads: list[float]  # offered load, fraction of the calibrated capacity
    seeds: list[int]  # repeats: each its own requests and arrival pattern
    n_requests: int
    policies: list[str]  # fcfs | sjf | oracle
    data: str = "demo"
    arrival: str = "poisson"  # poisson | gamma | trace
    cv: float = 1.0
    trace: list[float] | None = None
    slo: SLO = field(default_factory=SLO)
    calibration_requests: int = 24
    horizon_factor: float = 3.0  # a run stops at last arrival + this × (n_requests / capacity)
    fit_skip: int = 2  # warm-up steps left out of the fit
    drift_bound: float = 0.05  # a run whose steps ran more than this fraction off the profile is flagged
    check: CheckBounds = field(default_factory=CheckBounds)  # is the calibration burst fit to trust?
    recheck_requests: int = 8  # the quick re-measure burst after the calibration (0: none)
    aging_weight: float = AGING_WEIGHT  # the aging policies' weight (tokens² per second)
    natural_cap: int | None = None  # natural answers (serve.answers=natural): every request's max_tokens
    sim: dict[str, Any] = field(default_factory=dict)
    speed_window_s: float | None = None  # > 0: also replay each run at its own speed in windows of this many s

    # keys of the `serve` group the stage reads itself (the engine, the predictor, where prompts and arrivals
    # come from, the plots) or hands over in another shape (`from_mapping`'s `values`): no field of these settings
    STAGE_KEYS: ClassVar[tuple[str, ...]] = (
        "name", "engine", "predictor", "split", "length_cap", "answers", "natural_max_tokens", "starvation",
        "arrival_cv", "trace_name", "trace_path", "slo", "calibration_check", "drift_bound", "profile_path",
        "resimulate", "plots")

    @classmethod
    def from_mapping(cls, serve: Mapping[str, Any], **values: Any) -> ServeSettings:
        """From the (resolved) `serve` group: its keys that are fields, with `values` (the fields the stage derives:
        data, cv, trace, slo, natural_cap, the checks); `STAGE_KEYS` left out, any other key an error."""
        s = settings_from(cls, serve, group="serve", skip=cls.STAGE_KEYS, **values)
        return dataclasses.replace(s, loads=[float(x) for x in s.loads], seeds=[int(x) for x in s.seeds],
                                   policies=[str(x) for x in s.policies], sim=dict(s.sim or {}))


@dataclass
class GridResult:
    runs: pd.DataFrame
    requests: pd.DataFrame
    steps: pd.DataFrame
    fidelity: pd.DataFrame  # against the calibration profile (out of sample)
    fidelity_all: pd.DataFrame  # against `fit_all` (in sample): is a miss the model's form or the calibration?
    residuals: pd.DataFrame
    fit: ProfileFit
    fit_all: ProfileFit | None  # the same model fitted on every run's steps
    capacity: float  # req/s on the fitted profile
    calibration: RunLog | None = None
    overload: list[dict] = field(default_factory=list)
    fidelity_no_contention: pd.DataFrame = field(default_factory=pd.DataFrame)  # live-predictor runs, uncorrected
    check: CalibrationCheck | None = None  # the calibration burst's check (None: a profile given, or not stored)
    drift: pd.DataFrame = field(default_factory=pd.DataFrame)  # per run: step-time drift from the profile
    fidelity_at_speed: pd.DataFrame = field(default_factory=pd.DataFrame)  # each run on the profile at its own speed
    fidelity_tracking: pd.DataFrame = field(default_factory=pd.DataFrame)  # ... at the previous run's speed
    fidelity_regimes: pd.DataFrame = field(default_factory=pd.DataFrame)  # ... at its own decode and prefill speeds
    fidelity_over_time: pd.DataFrame = field(default_factory=pd.DataFrame)  # ... at its own speed over time
    fidelity_tracked: pd.DataFrame = field(default_factory=pd.DataFrame)  # ... at the speed of the window before


def calibrate(engine: Engine, pool: PromptPool, s: ServeSettings, clock: Any
              ) -> tuple[ProfileFit, RunLog, CalibrationCheck | None]:
    """A burst of `calibration_requests` at t = 0 (FCFS), a short re-measure burst, the check of both
    (`lengthpred.serve.calibration_check`: refused with one line when `s.check.on_fail` = refuse) and the
    profile: the robust fit when checked, the plain NNLS fit when the check is off."""
    picks = draw_requests(pool, s.calibration_requests, seed=10_000)
    reqs = make_requests(pool, picks, np.zeros(len(picks)), tag="calib", cap=s.natural_cap)
    run = replay(reqs, engine, get_policy("fcfs"), NoPredictor(), clock)
    name, source = f"fitted-{engine.name}", f"{engine.name}: calibration burst of {len(reqs)} requests"
    if s.check.on_fail == "off":
        return fit_profile([run.steps], engine.limits, name=name, skip=s.fit_skip, source=source), run, None
    recheck = None
    if s.recheck_requests > 0:
        picks = draw_requests(pool, s.recheck_requests, seed=10_001)
        reqs = make_requests(pool, picks, np.zeros(len(picks)), tag="recheck", cap=s.natural_cap)
        recheck = replay(reqs, engine, get_policy("fcfs"), NoPredictor(), clock).steps
    chk = check_calibration(run.steps, engine.limits, s.check, recheck=recheck, skip=s.fit_skip, name=name,
                            source=source)
    if not chk.ok and s.check.on_fail == "refuse":
        raise DataError(f"{chk.reason}; rerun on a quiet machine or set serve.calibration_check.on_fail=warn")
    if not chk.ok:
        log.warning("%s", chk.reason)
    return chk.robust, run, chk


def pool_capacity(fit: ProfileFit, pool: PromptPool) -> float:
    counts = [len(x) for x in pool.samples]
    return float(capacity(fit.profile, np.repeat(pool.prompt_lengths, counts), pool.lengths))


@dataclass
class _Run:
    key: dict[str, Any]  # policy (the simulator's name), predictor label, load, seed
    log: RunLog
    real: dict[str, float]
    sim: dict[str, float]
    sim_requests: pd.DataFrame
    overload: dict | None


def _serve_one(engine: Engine, pool: PromptPool, s: ServeSettings, name: str, label: str, predictor: Any,
               picks: list, arrivals: np.ndarray, seed: int, load: float, cap: float, fit: ProfileFit,
               clock: Any) -> _Run:
    """One run: replay, metrics, overload check, and its simulation on the calibration profile."""
    pol = get_policy(name, s.aging_weight)
    reqs = make_requests(pool, picks, arrivals, tag=f"s{seed}-l{load:g}-{name}", cap=s.natural_cap)
    horizon = float(arrivals[-1] + s.horizon_factor * s.n_requests / cap)
    try:
        run = replay(reqs, engine, pol, predictor, clock, horizon=horizon)
    finally:
        predictor.close()
    key = {"policy": pol.sim_policy, "predictor": pol.predictor_label(label), "load": float(load), "seed": seed}
    offered = load * cap  # the arrivals' own rate (unit_arrivals)
    m = real_run_metrics(run.requests, run.steps, run.end, s.slo)
    m.update({k: float(v) for k, v in run.predictor.items()})
    ov = overloaded(offered, cap, run.horizon_hit)
    m["overload"], m["offered_load"] = float(ov), offered / cap
    simr = simulate_run(run.requests, pol, fit.profile, s.sim)
    sm = sim_metrics(simr, s.slo)
    over = None
    if ov:  # above capacity a latency measures the run's length, not the server
        m, sm = blank_latencies(m), blank_latencies(sm)
        over = {**key, "offered_rate": offered, "capacity": cap, "horizon_hit": run.horizon_hit}
    return _Run(key, run, m, sm, simr, over)


def _describe(r: _Run, cap: float) -> str:
    k, m = r.key, r.real
    head = f"seed {k['seed']} load {k['load']:g} {k['policy']}/{k['predictor']}: "
    if r.overload:
        return head + (f"OVERLOAD (offered {r.overload['offered_rate']:.3f} req/s, capacity {cap:.3f} req/s"
                       f"{', cut at the horizon' if r.log.horizon_hit else ''}): no latencies reported; queue max "
                       f"{m['queue_max']:.0f}")
    return head + (f"ptl mean {m['per_token_latency_mean']:.3f} s/tok (sim {r.sim['per_token_latency_mean']:.3f}), "
                   f"queue mean {m['queue_mean']:.1f} max {m['queue_max']:.0f}, batch mean {m['batch_mean']:.1f}, "
                   f"{int(m['n_finished'])} finished, {int(m['n_rejected'])} rejected")


def run_grid(engine: Engine, pool: PromptPool, s: ServeSettings,
             make_predictor: Callable[[str], tuple[str, Any]], *, clock: Any = None,
             fit: ProfileFit | None = None, progress: Callable[[str], None] | None = None) -> GridResult:
    """The whole comparison. `make_predictor(policy)` gives (predictor label, a fresh predictor) for one run."""
    clock = clock or WallClock()
    say = progress or log.info
    cal, chk = None, None
    if fit is None:
        fit, cal, chk = calibrate(engine, pool, s, clock)
        if chk is not None:
            say(chk.reason)
        say(f"calibration: {len(cal.requests)} requests, {fit.n_steps} steps fitted, R²={fit.r2:.3f}, "
            f"rel. RMSE {fit.rel_rmse:.1%}")
    cap = pool_capacity(fit, pool)
    p = fit.profile
    say(f"profile {p.name}: t_base={p.t_base:.4g} t_seq={p.t_seq:.4g} t_ctx={p.t_ctx:.3g} "
        f"t_prefill_token={p.t_prefill_token:.3g}; capacity {cap:.3f} req/s")
    done: list[_Run] = []
    for seed in s.seeds:  # one draw of requests and one arrival pattern per repeat: paired runs
        picks = draw_requests(pool, s.n_requests, seed)
        unit = unit_arrivals(s.n_requests, seed, s.arrival, s.cv, s.trace)
        for load in s.loads:
            for name in s.policies:  # in turn, so drift on a shared machine hits every policy alike
                label, predictor = make_predictor(name)
                done.append(_serve_one(engine, pool, s, name, label, predictor, picks, unit / (load * cap), seed,
                                       load, cap, fit, clock))
                say(_describe(done[-1], cap))
    return _collect(done, engine, s, fit, cap, cal, chk)


def _waited_for_predictions(r: _Run) -> bool:
    return bool((r.log.steps["n_predicting"] > 0).any())


def _with_contention(done: list[_Run], s: ServeSettings, fit: ProfileFit) -> pd.DataFrame:
    """Re-simulate each run whose requests waited for a live prediction with the engine's slowdown while
    predicting (`contention_factor`), estimated on the *other* such runs so the replay stays out of sample
    (on its own steps when it is the only one); the fidelity rows of the uncorrected replay are returned
    for comparison."""
    live = [i for i, r in enumerate(done) if _waited_for_predictions(r)]
    before = pd.DataFrame([{**done[i].key, **e} for i in live if not done[i].overload
                           for e in errors(done[i].real, done[i].sim)])
    for i in live:
        others = [done[j].log.steps for j in live if j != i] or [done[i].log.steps]
        f = contention_factor(others, fit.profile, s.fit_skip)
        r = done[i]
        r.sim_requests = simulate_run(r.log.requests, by_sim_policy(r.key["policy"], s.aging_weight), fit.profile, s.sim, f)
        sm = sim_metrics(r.sim_requests, s.slo)
        r.sim = blank_latencies(sm) if r.overload else sm
        r.sim["contention"] = f
    return before


def _collect(done: list[_Run], engine: Engine, s: ServeSettings, fit: ProfileFit, cap: float,
             cal: RunLog | None, chk: CalibrationCheck | None = None) -> GridResult:
    sim_name = f"sim:{fit.profile.name}"
    fid_plain = _with_contention(done, s, fit)
    rows = []
    for r in done:
        rows += [(engine.name, s.data, *r.key.values(), k, v) for k, v in r.real.items()]
        rows += [(sim_name, s.data, *r.key.values(), k, v) for k, v in r.sim.items()]
    runs = pd.DataFrame(rows, columns=["hardware", "data", *KEYS, "metric", "value"])
    drift = run_drifts([(r.key, r.log.steps) for r in done], fit, s.fit_skip, s.drift_bound)
    fid = pd.DataFrame([{**r.key, **e, **drift.iloc[i][["drift", "drifting"]].to_dict()}
                        for i, r in enumerate(done) if not r.overload for e in errors(r.real, r.sim)])
    requests = pd.concat([r.log.requests.assign(**r.key, sim_first_token=r.sim_requests["first_token"],
                                                sim_finish=r.sim_requests["finish"]) for r in done],
                         ignore_index=True) if done else pd.DataFrame()
    steps = pd.concat([r.log.steps.assign(**r.key) for r in done], ignore_index=True) if done else pd.DataFrame()
    fit_all, fid_all = None, pd.DataFrame()
    if done:
        try:
            fit_all = fit_profile([r.log.steps for r in done], engine.limits, name=f"fitted-{engine.name}-all",
                                  skip=s.fit_skip, source=f"{engine.name}: every run's steps (in sample)")
        except DataError:
            pass
    if fit_all is not None:
        live = [r.log.steps for r in done if _waited_for_predictions(r)]
        f_all = contention_factor(live, fit_all.profile, s.fit_skip) if live else 1.0
        fid_all = pd.DataFrame([
            {**r.key, **e} for r in done if not r.overload
            for e in errors(r.real, sim_metrics(simulate_run(r.log.requests, by_sim_policy(r.key["policy"], s.aging_weight),
                                                             fit_all.profile, s.sim, f_all), s.slo))])
    resid = step_residuals(steps, fit.profile) if len(steps) else pd.DataFrame()
    return GridResult(runs, requests, steps, fid, fid_all, resid, fit, fit_all, cap, cal,
                      [r.overload for r in done if r.overload], fid_plain, chk, drift,
                      _at_speeds(done, drift, s, fit), _at_speeds(done, drift, s, fit, lag=1),
                      _at_speeds(done, drift, s, fit, regimes=True),
                      _at_speeds(done, drift, s, fit, window=s.speed_window_s) if s.speed_window_s else pd.DataFrame(),
                      _at_speeds(done, drift, s, fit, window=s.speed_window_s, causal=True) if s.speed_window_s
                      else pd.DataFrame())


def _at_speeds(done: list[_Run], drift: pd.DataFrame, s: ServeSettings, fit: ProfileFit, lag: int = 0,
               regimes: bool = False, window: float | None = None, causal: bool = False) -> pd.DataFrame:
    """Fidelity with each run replayed on the profile scaled by a measured drift (`at_speed`; a live predictor's
    contention factor as in the main replay). `lag` 0: the run's own drift, so what is left is the queueing
    model's error; 1: the drift of the run before it (`done` is in the order the runs ran; the first run keeps
    the calibration), a calibration that tracks the machine between runs, out of sample. `regimes`: the run's own
    decode drift and prefill factor apart (`regime_speeds`: two numbers per run, in sample). `window` (s): the
    run's own speed over time instead (`speed_windows`: one number per window, in sample; a diagnostic that
    separates the queueing model from the machine's speed, not a calibration); with `causal`, each window at the
    speed of the window before it, the first at the previous run's drift (`tracked_windows`: out of sample)."""
    rows = []
    drifts = drift["drift"].to_numpy(float) if len(drift) else np.full(len(done), math.nan)
    for i, r in enumerate(done):
        d = drifts[i - lag] if i >= lag else 1.0
        if r.overload or not (math.isfinite(d) and d > 0):
            continue
        pol = by_sim_policy(r.key["policy"], s.aging_weight)
        if window:
            if causal:  # from the speed known when the run starts: the previous run's drift (the first: 1.0)
                prev = drifts[i - 1] if i >= 1 else 1.0
                slow = tracked_windows(r.log.steps, fit.profile, window, s.fit_skip,
                                       prev if math.isfinite(prev) and prev > 0 else 1.0)
            else:
                slow = speed_windows(r.log.steps, fit.profile, window, s.fit_skip)
            if not slow:
                continue
            simr = simulate_run(r.log.requests, pol, fit.profile, s.sim, slowdown=slow)
        else:
            speeds = regime_speeds(r.log.steps, fit.profile, s.fit_skip) if regimes else (d, None)
            if not math.isfinite(speeds[0]):
                continue
            simr = simulate_run(r.log.requests, pol, at_speed(fit.profile, *speeds), s.sim,
                                float(r.sim.get("contention", 1.0)))
        rows += [{**r.key, **e, "drift": drifts[i], "drifting": bool(drift.iloc[i]["drifting"])}
                 for e in errors(r.real, sim_metrics(simr, s.slo))]
    return pd.DataFrame(rows)


def resimulate(requests: pd.DataFrame, steps: pd.DataFrame, runs: pd.DataFrame, engine_name: str,
               limits: EngineLimits, fit: ProfileFit, cap: float, s: ServeSettings,
               calibration: RunLog | None = None, calibration_shift: float = math.nan) -> GridResult:
    """The simulator's side of a stored serving run again, without the engine: every run's real metrics as
    measured (`runs`: its serve_runs.csv rows), its requests and steps (serve_requests / serve_steps) replayed
    by the current simulator on `fit` (the run's own calibration profile), so a change to the simulator's
    model is checked against the same real runs. `cap`: the capacity the run's loads were fractions of;
    `calibration_shift`: the re-measure's shift stored with the calibration check (the burst is not rerun)."""
    real = runs[runs["hardware"] == engine_name]
    done = []
    for key, r in requests.groupby(KEYS, sort=False):
        k = dict(zip(KEYS, key, strict=True))
        m = real.loc[(real[KEYS] == pd.Series(k)).all(axis=1)].set_index("metric")["value"].to_dict()
        if not m:
            raise DataError(f"no measured metrics for run {k} in the stored serve_runs")
        st = steps.loc[(steps[KEYS] == pd.Series(k)).all(axis=1), STEP_COLUMNS].reset_index(drop=True)
        reqs = r.drop(columns=[*KEYS, "sim_first_token", "sim_finish"], errors="ignore").reset_index(drop=True)
        pol = by_sim_policy(k["policy"], s.aging_weight)
        simr = simulate_run(reqs, pol, fit.profile, s.sim)
        sm = sim_metrics(simr, s.slo)
        ov = None
        if m.get("overload", 0.0) >= 1:
            sm = blank_latencies(sm)
            ov = {**k, "offered_rate": m.get("offered_load", math.nan) * cap, "capacity": cap, "horizon_hit": math.nan}
        log_ = RunLog(reqs, st, {}, False, float(np.nanmax(reqs["finish"])) if reqs["finish"].notna().any() else 0.0)
        # statistics added since the run was stored, from its requests and steps; the stored ones as measured
        new = real_run_metrics(reqs, st, log_.end, s.slo)
        m = {**new, **m, **_goodput_at(new, m, reqs)}
        if m.get("overload", 0.0) >= 1:
            m = blank_latencies(m)
        done.append(_Run(k, log_, m, sm, simr, ov))
    chk = None
    if calibration is not None and s.check.on_fail != "off":  # checked again, with the stored re-measure's shift
        chk = check_calibration(calibration.steps, limits, s.check, skip=s.fit_skip, name=fit.profile.name,
                                measured_shift=calibration_shift)
    return _collect(done, _StoredEngine(engine_name, limits), s, fit, cap, calibration, chk)


def _goodput_at(new: dict[str, float], stored: dict[str, float], reqs: pd.DataFrame) -> dict[str, float]:
    """Goodput and SLO attainment of a stored run at the current SLO (`new`: recomputed from its requests),
    over the run's own span (output tokens of finished requests / its stored throughput)."""
    thr = stored.get("throughput", math.nan)
    toks = float(reqs.loc[reqs["status"] == "finished", "output_tokens"].sum())
    span = toks / thr if thr and math.isfinite(thr) and thr > 0 else math.nan
    att = new["slo_attainment"]
    accepted = float((reqs["status"] != "rejected").sum())
    return {"slo_attainment": att, "goodput": att * accepted / span if math.isfinite(span) else math.nan}


@dataclass
class _StoredEngine:
    name: str
    limits: EngineLimits


def fidelity_summary(fid: pd.DataFrame) -> pd.DataFrame:
    """Per (load, policy, predictor, metric): mean real and simulated value over repeats, mean signed
    error, and the per-run absolute errors' mean and worst (`abs_err`, `max_abs_err`: errors of single runs,
    which cannot cancel, not the error of the averages); the range of the runs' step-time drift and how
    many runs drifted beyond the bound."""
    if fid.empty:
        return fid
    g = fid.groupby(["load", "policy", "predictor", "metric"], sort=True)
    agg = dict(real=("real", "mean"), sim=("sim", "mean"), signed_err=("signed_err", "mean"),
               abs_err=("abs_err", "mean"), max_abs_err=("abs_err", "max"), n=("seed", "size"))
    if "drift" in fid.columns:
        agg.update(drift_min=("drift", "min"), drift_max=("drift", "max"), n_drifting=("drifting", "sum"))
    return g.agg(**agg).reset_index()
