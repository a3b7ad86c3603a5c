"""Evaluation: predictions files → tidy results → paper tables and plots (no model needed after scoring)."""

from lengthpred.eval.predictions import PREDICTION_COLUMNS, find_predictions, read_predictions
from lengthpred.eval.results import (
    RESULT_COLUMNS,
    Provenance,
    check_consistent,
    read_results,
    score_predictions,
    write_results,
)

__all__ = [
    "PREDICTION_COLUMNS",
    "RESULT_COLUMNS",
    "Provenance",
    "check_consistent",
    "find_predictions",
    "read_predictions",
    "read_results",
    "score_predictions",
    "write_results",
]
