"""Length distributions: predicted distribution objects, censored observations and their scores.

`objects` (LogNormal, Histogram, QuantileGrid, Empirical, PointMass; `check_quantiles`, `within_bin_knots`), `censored` (every
sampled length a draw, a capped one right-censored at the cap; `from_trace`, `recap`), `scores` (pinball,
CRPS, coverage, PIT on the capped length: see its docstring for how capped samples are scored), `keys`
(scheduling keys: capped mean, CVaR, TIE's E + β·CVaR).
"""

from lengthpred.distributions.censored import Observations, from_trace, recap, trace_cap
from lengthpred.distributions.keys import CVAR_LEVELS, tail_mean, tie_beta, tie_key
from lengthpred.distributions.objects import (
    Empirical,
    Histogram,
    LengthDistribution,
    LogNormal,
    PointMass,
    QuantileGrid,
    check_quantiles,
    within_bin_knots,
)
from lengthpred.distributions.scores import (
    bootstrap_mean,
    coverage,
    crps,
    crps_fair,
    per_prompt,
    pinball,
    pit_bounds,
    pit_histogram,
    score_all,
)

__all__ = [
    "Empirical", "Histogram", "LengthDistribution", "LogNormal", "Observations", "PointMass", "QuantileGrid",
    "bootstrap_mean", "check_quantiles", "coverage", "crps", "crps_fair", "from_trace", "per_prompt",
    "pinball", "pit_bounds", "pit_histogram", "recap", "score_all", "tail_mean", "tie_beta", "tie_key", "trace_cap",
    "within_bin_knots", "CVAR_LEVELS",
]
