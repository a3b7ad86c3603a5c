"""Serving on a real engine: what length predictions buy a vLLM server, and how well the simulator knows it.

    from lengthpred.serve import FakeEngine, VirtualClock, replay, get_policy, NoPredictor
    run = replay(requests, FakeEngine(profile, clock), get_policy("fcfs"), NoPredictor(), clock)

Modules, one job each: `workload` (prompts with sampled lengths → requests with arrivals), `engine` (the
engine protocol and step record), `vllm_engine` (vLLM in-process with priority scheduling), `fake` (known
step times, for tests), `clock`, `priority` (policy → vLLM priority and the simulator policy),
`featurize` (the prefill feature row), `engine_readout` (that row read from the engine's own prefill by a
forward hook), `predictor` (predictions in the request path, RLS updates), `replay` (the loop), `metrics`,
`profile_fit` (step times → a `HardwareProfile`), `calibration_check` (is a calibration burst fit to trust?),
`fidelity` (simulator vs real, step-time drift), `experiment` (the comparison grid), `paired` (gains over FCFS:
exact sign-flip test, intervals, leave-one-request-out), `report` and `report_stats` (tables, CDF and queue
figures). From a config to
these parts: `lengthpred.stages.serve`; scripts/serve.py is the entry point. vLLM and matplotlib are
imported lazily.
"""

from lengthpred.serve.clock import VirtualClock, WallClock
from lengthpred.serve.engine import EngineLimits, RequestRejected, StepInfo
from lengthpred.serve.fake import FakeEngine
from lengthpred.serve.predictor import NoPredictor, OnlineReadout, TablePredictor
from lengthpred.serve.priority import POLICIES, ServePolicy, get_policy
from lengthpred.serve.replay import RunLog, replay
from lengthpred.serve.workload import PromptPool, ServeRequest

__all__ = [
    "EngineLimits", "FakeEngine", "NoPredictor", "OnlineReadout", "POLICIES", "PromptPool", "RequestRejected",
    "RunLog", "ServePolicy", "ServeRequest", "StepInfo", "TablePredictor", "VirtualClock", "WallClock",
    "get_policy", "replay",
]
