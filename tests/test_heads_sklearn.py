"""sklearn's own estimator checks on the numpy heads (the proxy heads take text, not arrays)."""

from __future__ import annotations

import pytest
from sklearn.utils.estimator_checks import parametrize_with_checks

from lengthpred.heads import (
    CensoredLogNormalHead,
    ConcatLinearHead,
    ConstantHead,
    DomainMedianHead,
    EGTPHead,
    LinearHead,
    ProbeHead,
    PromptLenHead,
    QuantileLinearHead,
)

pytestmark = pytest.mark.numeric  # torch heads: `make test-portable` reruns these under every CPU kernel

_LOG1P_NEEDS_LENGTHS = (
    "target='log1p' rejects the negative y of sklearn's synthetic regression data by design"
)
_LOG1P_CHECKS = [
    "check_n_features_in_after_fitting",
    "check_regressors_train",
    "check_regressor_data_not_an_array",
    "check_regressors_no_decision_function",
    "check_fit_idempotent",
    "check_fit_check_is_fitted",
    "check_n_features_in",
]
# Small, fast versions of the torch heads (the checks fit dozens of times).
_FAST = dict(epochs=20, lr=1e-2, hidden=8, batch_size=32, n_threads=1)

ESTIMATORS = [
    ConstantHead(),
    LinearHead(target="raw"),
    LinearHead(alpha=1.0),
    ConcatLinearHead(target="raw"),
    ConcatLinearHead(alpha=1.0),
    PromptLenHead(target="raw"),
    PromptLenHead(),
    DomainMedianHead(),
    EGTPHead(**_FAST),
    ProbeHead(**_FAST),
    QuantileLinearHead(alpha=1.0),
    CensoredLogNormalHead(alpha=1.0),
]


def _expected_failed(est) -> dict[str, str]:
    if isinstance(est, (QuantileLinearHead, CensoredLogNormalHead)):
        return dict.fromkeys(_LOG1P_CHECKS, "log-length readouts reject the negative y of sklearn's synthetic data")
    if isinstance(est, (LinearHead, ConcatLinearHead)) and est.target == "log1p":
        return dict.fromkeys(_LOG1P_CHECKS, _LOG1P_NEEDS_LENGTHS)
    if isinstance(est, DomainMedianHead):
        return {"check_estimators_nan_inf": "inputs are group labels; NaN is a label like any other"}
    return {}


@parametrize_with_checks(ESTIMATORS, expected_failed_checks=_expected_failed)
@pytest.mark.filterwarnings("ignore::UserWarning")
def test_sklearn_compatible(estimator, check):
    check(estimator)


def test_torch_heads_pickle_through_joblib_after_dill_is_imported():
    """`datasets` imports dill, which rewires joblib's pure-Python pickler; a fitted MLP head (with its
    optimizer, kept for partial_fit) must still round-trip, and keep training after it."""
    import io

    import dill  # noqa: F401  (the import is the point: it extends pickle's dispatch)
    import numpy as np
    from joblib import dump, load

    rng = np.random.default_rng(0)
    X, y = rng.normal(size=(60, 6)), rng.uniform(1, 200, 60)
    for head in (EGTPHead(epochs=2, hidden=8), ProbeHead(epochs=2, hidden=8)):
        head.fit(X, y)
        buf = io.BytesIO()
        dump(head, buf)
        buf.seek(0)
        back = load(buf)
        np.testing.assert_allclose(back.predict(X), head.predict(X))
        back.partial_fit(X, y)  # the optimizer state came back too
