"""Every config value checked before any work starts, each error naming the key the user set.

`validate(cfg, script)` is called by `lengthpred.cli.stage` before a script's body (and so before a model,
a dataset or a calibration burst is loaded): types and ranges of the numeric settings (`RULES`), the
logger mode (with `WANDB_MODE`), every key of the head config (top level,
`params` and `select`), and what one script needs that others do not (`serve`: the vLLM engine).
A key the config does not have is not checked (a config built by hand for one stage).
"""

from __future__ import annotations

import importlib.util
import math
import netrc
import os
from collections.abc import Callable, Mapping
from typing import Any

from omegaconf import OmegaConf

from lengthpred.errors import ConfigError
from lengthpred.heads.search import SearchSettings, sample_candidates
from lengthpred.heads.settings import HEAD_KEYS
from lengthpred.models.device import resolve_device
from lengthpred.serve.vllm_engine import SETUP_HINT
from lengthpred.stages.heads import constructor_params, head_class
from lengthpred.stages.tracking import logger_mode

Rule = Callable[[Any], str | None]  # what is wrong with a value, or None
_ABSENT = object()


def _is_int(v: Any) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


def _is_number(v: Any) -> bool:
    return (_is_int(v) or isinstance(v, float)) and math.isfinite(v)


def integer(lo: int | None = None, *, null: bool = False) -> Rule:
    """An integer ≥ lo (None allowed when `null`)."""
    def rule(v: Any) -> str | None:
        if v is None:
            return None if null else "must be set"
        if not _is_int(v):
            return "must be an integer"
        return f"must be >= {lo}" if lo is not None and v < lo else None
    return rule


def number(lo: float | None = None, hi: float | None = None, *, lo_open: bool = False, hi_open: bool = False,
           null: bool = False) -> Rule:
    """A finite number in [lo, hi], either end open when asked."""
    def rule(v: Any) -> str | None:
        if v is None:
            return None if null else "must be set"
        if not _is_number(v):
            return "must be a finite number"
        low = lo is not None and (v <= lo if lo_open else v < lo)
        high = hi is not None and (v >= hi if hi_open else v > hi)
        if low or high:
            left = "(" if lo_open else "["
            right = ")" if hi_open else "]"
            right = ")" if hi is None else right
            return f"must be in {left}{'-inf' if lo is None else lo}, {'inf' if hi is None else hi}{right}"
        return None
    return rule


def one_of(*choices: str) -> Rule:
    return lambda v: None if v in choices else f"must be one of {list(choices)}"


def each(rule: Rule, *, n: int | None = None) -> Rule:
    """A non-empty list whose every value passes `rule` (exactly `n` values when given)."""
    def check(v: Any) -> str | None:
        if not isinstance(v, list | tuple) or not v:
            return "must be a non-empty list"
        if n is not None and len(v) != n:
            return f"must have exactly {n} values"
        for x in v:
            why = rule(x)
            if why:
                return f"value {x!r} {why}"
        return None
    return check


def seeds(v: Any) -> str | None:
    """A count of seeds (≥ 1) or a non-empty list of integers."""
    return integer(1)(v) if not isinstance(v, list | tuple) else each(integer())(v)


POSITIVE = number(0, lo_open=True)
FRACTION_OPEN = number(0, 1, lo_open=True, hi_open=True)
ARRIVALS = ("poisson", "gamma")

RULES: dict[str, Rule] = {
    "seed": integer(),
    "data.seed": integer(),
    "data.per_domain": integer(1, null=True),  # null: every prompt
    "data.val_fraction": number(0, 1, hi_open=True),
    "data.test_fraction": number(0, 1, hi_open=True),
    "data.max_prompt_tokens": integer(1, null=True),
    "generate.num_samples": integer(1),
    "generate.max_new_tokens": integer(1),
    "generate.batch_size": integer(1),
    "generate.temperature": number(0),
    "generate.top_p": number(0, 1, lo_open=True),
    "generate.top_k": integer(0),
    "generate.max_prompt_tokens": integer(1, null=True),
    "generate.overflow": one_of("reject", "truncate"),
    "generate.limit": integer(1, null=True),
    "generate.in_flight": integer(0),
    "features.batch_size": integer(1),
    "features.max_batch_tokens": integer(1),
    "features.entropy_chunk": integer(1),
    "features.attn_chunk": integer(1),
    "features.max_prompt_tokens": integer(1, null=True),
    "features.overflow": one_of("reject", "truncate"),
    "features.limit": integer(1, null=True),
    "head.layer": integer(0, null=True),
    "head.layers": each(integer(0)),  # the concat head's columns (stages.heads.feature_names)
    "readout.layer": integer(0),
    "readout.alphas": each(number(0, lo_open=True)),
    "readout.forgetting": each(number(0, 1, lo_open=True)),
    "head.n_seeds": integer(1, null=True),
    "online.confidence": FRACTION_OPEN,
    "online.n_boot": integer(1),
    "online.forgetting": each(number(0, 1, lo_open=True)),
    "online.stream_seeds": seeds,
    "online.window": integer(1),
    "online.record_every": integer(1),
    "online.plot_pairs": integer(1, null=True),
    "online.trace_cap": number(0, lo_open=True, null=True),
    "online.completion.load": number(0, lo_open=True, null=True),
    "online.completion.arrival_rate": number(0, lo_open=True, null=True),
    "online.completion.max_concurrency": integer(1),
    "online.completion.tokens_per_s": POSITIVE,
    "online.completion.prompt_tokens": integer(0),
    "sweep.n_boot": integer(1),
    "sweep.layers": each(integer(0)),
    "eval.confidence": FRACTION_OPEN,
    "eval.n_boot": integer(0),  # 0 skips the intervals (conf/eval/default.yaml)
    "sched.n_requests": integer(1),
    "sched.loads": each(POSITIVE),
    "sched.seeds": each(integer()),
    "sched.warmup": number(0, 1, hi_open=True),
    "sched.accept_beta": each(POSITIVE, n=2),
    "sched.arrival": one_of(*ARRIVALS),
    "sched.arrival_cv": POSITIVE,
    "sched.min_oracle_gain": number(0),
    "sched.source.synthetic_n": integer(1),
    "sched.source.synthetic_samples": integer(0),
    "sched.traces.n_requests": integer(1),
    "sched.traces.offset": integer(0),
    "sched.traces.loads": each(POSITIVE),
    "sched.traces.spearman": each(number(-1, 1)),
    "sched.batching.batch_sizes": each(integer(1)),
    "sched.batching.n_requests": integer(1),
    "sched.spec.n_requests": integer(1),
    "sched.spec.samples": integer(1),
    "sched.spec.loads": each(POSITIVE),
    "sched.spec.limit": integer(1, null=True),
    "serve.n_requests": integer(1),
    "serve.loads": each(POSITIVE),
    "serve.seeds": each(integer()),
    "serve.calibration_requests": integer(1),
    "serve.horizon_factor": POSITIVE,
    "serve.arrival": one_of(*ARRIVALS, "trace"),
    "serve.arrival_cv": POSITIVE,
    "serve.length_cap": integer(1, null=True),
    "costs.predict_prompts": integer(1),
    "costs.predict_repeats": integer(1),
    "costs.extract_prompts": integer(1),
    "costs.extract_repeats": integer(1),
    "costs.threads": integer(1),
    "costs.clock": one_of("auto", "cpu", "wall", "device"),
    "distribution.layer": integer(0),
    "distribution.short_cap": integer(1),
    "distribution.n_boot": integer(1),
    "distribution.sched.loads": lambda v: None if v == "headroom" else each(POSITIVE)(v),  # or chosen by headroom
    "distribution.sched.headroom.candidates": each(POSITIVE),
    "distribution.sched.headroom.seeds": each(integer()),
    "distribution.sched.headroom.n_loads": integer(1),
    "distribution.sched.seeds": each(integer()),
    "distribution.sched.n_requests": integer(1),
    "distribution.sched.beta": number(0),
    "distribution.adapt.every": integer(1),
    "distribution.adapt.forgetting": number(0, 1, lo_open=True),
}



def _value(cfg: Any, key: str) -> Any:
    v = OmegaConf.select(cfg, key, default=_ABSENT) if OmegaConf.is_config(cfg) else _plain_select(cfg, key)
    return OmegaConf.to_container(v, resolve=True) if OmegaConf.is_config(v) else v


def _plain_select(cfg: Mapping[str, Any], key: str) -> Any:
    node: Any = cfg
    for part in key.split("."):
        if not isinstance(node, Mapping) or part not in node:
            return _ABSENT
        node = node[part]
    return node


def check_values(cfg: Any) -> None:
    """Every key of RULES the config has; the first bad one is a ConfigError naming it."""
    for key, rule in RULES.items():
        v = _value(cfg, key)
        if v is _ABSENT:
            continue
        why = rule(v)
        if why:
            raise ConfigError(f"{key}={v!r}: {why}")


def check_head(hcfg: Mapping[str, Any] | None) -> None:
    """Unknown keys refused at every level of a head config: top level, `params`, `select`."""
    if hcfg is None:
        return
    unknown = sorted(set(hcfg) - set(HEAD_KEYS))
    if unknown:
        raise ConfigError(f"head.{unknown[0]}: not a head setting; a head config has {list(HEAD_KEYS)}")
    klass = head_class(hcfg)
    valid = set(constructor_params(klass))
    for group in ("params", "select"):
        bad = sorted(set(hcfg.get(group) or {}) - valid)
        if bad:
            raise ConfigError(f"head.{group}.{bad[0]}: head {klass.name!r} takes no such keyword; "
                              f"valid: {sorted(valid - {'_target_'})}")
    for k, v in (hcfg.get("select") or {}).items():
        if not isinstance(v, list | tuple) or not v:
            raise ConfigError(f"head.select.{k}={v!r}: must be a non-empty list of candidates")
    if hcfg.get("search") is not None:
        search = SearchSettings.from_cfg(hcfg["search"])  # its own keys and values
        sample_candidates(klass.name, hcfg.get("select"), search)  # a space smaller than the budget


def check_readout(cfg: Any) -> None:
    """With head=linear or head=probe the readout follows the head (conf/readout/head.yaml): a `readout.layer`
    or `readout.pooling` set apart from the head's would train one feature and adapt, serve and time another."""
    readout, head = _value(cfg, "readout"), _value(cfg, "head")
    if readout is _ABSENT or head is _ABSENT or not readout.get("follows_head"):
        return
    for k in ("layer", "pooling"):
        if readout.get(k) != head.get(k):
            raise ConfigError(f"readout.{k}={readout.get(k)!r} but head.{k}={head.get(k)!r}: this head is the "
                              f"readout (online, serve and costs follow it), so set head.{k} instead")


def _has_wandb_key() -> bool:
    if os.environ.get("WANDB_API_KEY"):
        return True
    try:
        return netrc.netrc().authenticators(os.environ.get("WANDB_BASE_URL", "api.wandb.ai").split("//")[-1])
    except (OSError, netrc.NetrcParseError):
        return False


def check_logger(cfg: Any) -> None:
    lcfg = _value(cfg, "logger")
    mode = logger_mode(None if lcfg is _ABSENT else lcfg)
    if mode == "online" and not _has_wandb_key():
        raise ConfigError("logger.mode=online needs a W&B key (WANDB_API_KEY or `wandb login`); "
                          "use logger.mode=offline to log locally and `wandb sync` later")


def check_serve_engine(cfg: Any) -> None:
    """serve.py on the vLLM engine: vLLM must be importable (before the calibration burst and the prefill)."""
    if _value(cfg, "serve.resimulate") not in (None, _ABSENT):
        return
    if _value(cfg, "serve.engine.kind") == "vllm" and importlib.util.find_spec("vllm") is None:
        raise ConfigError(f"serve.engine.kind=vllm but vLLM is not importable in this venv: {SETUP_HINT} "
                          "(or serve.engine.kind=fake for the simulated engine)")


def check_device(cfg: Any) -> None:
    """`device` names a device this process can use (with its LOCAL_RANK): before the model or the data load."""
    device = _value(cfg, "device")
    if device is not _ABSENT:
        resolve_device(device)


SCRIPT_CHECKS: dict[str, Callable[[Any], None]] = {"serve": check_serve_engine}


def validate(cfg: Any, script: str | None = None) -> None:
    """All checks of this module on a composed config, before any work (`script`: the script's name)."""
    check_values(cfg)
    check_device(cfg)
    check_logger(cfg)
    head = _value(cfg, "head")
    check_head(None if head is _ABSENT else head)
    check_readout(cfg)
    if script in SCRIPT_CHECKS:
        SCRIPT_CHECKS[script](cfg)
