"""Online adaptation of the linear readout: RLS from completed requests, baselines, stream runner, service."""

from lengthpred.online.baselines import NLMSRegressor, SlidingWindowRidge, StaticReadout
from lengthpred.online.completion import (
    CallableCompletion,
    InstantCompletion,
    SchedulerCompletion,
    ServingCompletion,
)
from lengthpred.online.rls import RLSRegressor
from lengthpred.online.stream import HeadSpec, StreamData, StreamResult, gain_over_static, run_stream

__all__ = [
    "CallableCompletion",
    "HeadSpec",
    "InstantCompletion",
    "NLMSRegressor",
    "RLSRegressor",
    "SchedulerCompletion",
    "ServingCompletion",
    "SlidingWindowRidge",
    "StaticReadout",
    "StreamData",
    "StreamResult",
    "gain_over_static",
    "run_stream",
]
