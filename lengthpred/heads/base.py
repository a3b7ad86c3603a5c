"""The head protocol: typed inputs, the registry, and the save/load/validation every head shares."""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar, Literal

import numpy as np
from safetensors.numpy import load_file, save_file
from sklearn.base import BaseEstimator, RegressorMixin
from sklearn.utils.validation import check_is_fitted, column_or_1d

from lengthpred.distributions import LengthDistribution, check_quantiles
from lengthpred.errors import DataError, ModelError
from lengthpred.integrity import save_tensors
from lengthpred.registry import Registry

HEADS: Registry[type[BaseHead]] = Registry("head")

InputKind = Literal["features", "tokens", "texts", "messages", "domains", "n_prompt_tokens", "ids"]
STATE_FILE = "head.safetensors"
META_FILE = "head.json"


class HeadInputError(DataError, ValueError):
    """Bad X/y given to a head: a LengthpredError for scripts, a ValueError for sklearn's checks."""


@dataclass
class HeadInput:
    """Everything any head may read about a set of prompts; each head takes the one field it needs.

    `features`: [n, d] float (one feature column such as `hs.L20.last`), `tokens`: n arrays [t_i, d + 2]
    (one layer's token-level states ‖ next-token entropy ‖ attention received, for heads that learn their
    pooling), `texts`: prompt strings (proxy heads), `messages`: each prompt's chat as the serving model's
    template reads it (heads that run the serving model: lora), `domains`: domain labels (domain_median),
    `n_prompt_tokens`: [n] (prompt_len);
    `ids` doubles as the X of heads that only count rows (constant).
    """

    ids: list[str]
    features: np.ndarray | None = None
    tokens: list[np.ndarray] | None = None
    texts: list[str] | None = None
    messages: list[list[dict]] | None = None
    domains: list[str] | None = None
    n_prompt_tokens: np.ndarray | None = None

    def __len__(self) -> int:
        return len(self.ids)

    def x_for(self, kind: InputKind) -> Any:
        """The X a head of this input kind is fitted on; a missing field is a DataError naming it."""
        value = getattr(self, kind)
        if value is None:
            raise DataError(f"this head needs `{kind}` but the input has none (was it extracted/loaded?)")
        if kind == "n_prompt_tokens":
            return np.asarray(value, dtype=np.float64).reshape(-1, 1)
        if kind in ("domains", "ids"):
            return np.asarray(value, dtype=object).reshape(-1, 1)
        return value


@dataclass
class LabeledSet:
    """A HeadInput with its targets: `y` (tokens; capped samples count as the cap), per-prompt
    `n_samples` and `capped_frac` (fraction of samples that hit the cap), carried to predictions."""

    inputs: HeadInput
    y: np.ndarray
    n_samples: np.ndarray | None = None
    capped_frac: np.ndarray | None = None
    extra: dict[str, Any] = field(default_factory=dict)
    sample_lengths: list[np.ndarray] | None = None  # per prompt: every sampled length (a capped one at the cap)
    sample_capped: list[np.ndarray] | None = None  # per prompt: which of them hit the cap (right-censored)

    def __len__(self) -> int:
        return len(self.inputs)

    def long(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(prompt row of each sample, its length, capped): every sampled length a row (`fits_samples` heads)."""
        if self.sample_lengths is None or self.sample_capped is None:
            raise DataError("this labeled set carries no per-sample lengths (targets without `lengths`)")
        rows = np.repeat(np.arange(len(self)), [len(v) for v in self.sample_lengths])
        return rows, np.concatenate(self.sample_lengths).astype(np.float64), np.concatenate(self.sample_capped).astype(bool)


class NoDistributionError(ModelError):
    """A point head asked for a distribution."""


class NoPointError(ModelError):
    """A head asked for a point it has no honest estimate of (a rank head's mean)."""


POINT_KINDS = ("median", "mean")


@dataclass(frozen=True)
class Points:
    """A head's predictions for one X, from one pass: `pred` is what `predict` returns (the head's configured
    point), `median` and `mean` estimate the median and the mean of the prompt's length (MAE rewards the
    median, squared error the mean); None where the head has no honest estimate of that point."""

    pred: np.ndarray
    median: np.ndarray | None
    mean: np.ndarray | None

    def __post_init__(self) -> None:
        for kind in ("pred", *POINT_KINDS):
            v = getattr(self, kind)
            if v is not None:
                object.__setattr__(self, kind, np.asarray(v, dtype=np.float64).reshape(-1))

    def get(self, kind: str) -> np.ndarray | None:
        """The `median` or `mean` array (None where the head has none); a ValueError names the valid kinds."""
        if kind not in POINT_KINDS:
            raise ValueError(f"point kind must be one of {POINT_KINDS}, not {kind!r}")
        return getattr(self, kind)


class BaseHead(RegressorMixin, BaseEstimator):
    """sklearn estimator protocol + safetensors/json persistence.

    Subclasses set `input_kind`, implement `fit`/`predict`, `_state()` → (arrays, meta json) and
    `_set_state(arrays, meta)` that restores a fitted head without pickle.
    """

    input_kind: ClassVar[InputKind] = "features"
    name: ClassVar[str] = ""
    predicts_distribution: ClassVar[bool] = False  # True where `predict_dist` is implemented
    fits_samples: ClassVar[bool] = False  # fit(X, y, censored) on every sampled length, a capped one censored

    # -- distributions -----------------------------------------------------------------------------
    def predict_dist(self, X: Any) -> LengthDistribution:
        """One predicted length distribution per row of X (lengthpred.distributions); point heads refuse."""
        names = ", ".join(n for n in HEADS.names() if HEADS.get(n).predicts_distribution)
        raise NoDistributionError(f"head {self.name!r} predicts a point, not a distribution (heads that do: {names})")

    def predict_quantiles(self, X: Any, q: Any) -> np.ndarray:
        """[n, len(q)] lengths at levels q (strictly increasing, inside (0, 1)), never crossing."""
        levels = check_quantiles(q)
        return self.predict_dist(X).quantile(levels)

    # -- points: `predict` keeps the configured one; these name which one ---------------------------
    def predict_points(self, X: Any) -> Points:
        """`predict(X)`, the median and the mean prediction from one pass over X (every head overrides)."""
        raise NotImplementedError(f"head {self.name!r} does not implement predict_points")

    def predict_point(self, X: Any, kind: str) -> np.ndarray:
        """The `kind` ("median" | "mean") prediction; NoPointError where the head has no honest one."""
        if kind not in POINT_KINDS:
            raise ValueError(f"point kind must be one of {POINT_KINDS}, not {kind!r}")
        value = self.predict_points(X).get(kind)
        if value is None:
            raise NoPointError(f"head {self.name!r} has no calibrated {kind} prediction")
        return value

    def predict_median(self, X: Any) -> np.ndarray:
        """Estimated median length per row: the point MAE rewards."""
        return self.predict_point(X, "median")

    def predict_mean(self, X: Any) -> np.ndarray:
        """Estimated mean length per row: the point squared error rewards."""
        return self.predict_point(X, "mean")

    def check_config(self) -> None:
        """Set-up errors a head can find before any data is read or any fit runs (one line each; none by default).
        `run_training` calls it on every candidate of the search first."""

    def tune_on_validation(self, X: Any, y: Any) -> BaseHead:
        """Choices a fitted head makes on validation data (never test), after its fit: none by default.
        `run_training` calls it with the fit's validation split (the binned heads' `within_bin="validation"`)."""
        return self

    # -- persistence -------------------------------------------------------------------------------
    def _state(self) -> tuple[dict[str, np.ndarray], dict[str, Any]]:
        raise NotImplementedError

    def _set_state(self, arrays: dict[str, np.ndarray], meta: dict[str, Any], path: Path) -> None:
        raise NotImplementedError

    def save(self, path: str | Path) -> Path:
        """Write `head.safetensors` (learned arrays) and `head.json` (name, params, meta) into `path`."""
        check_is_fitted(self)
        path = Path(path)
        path.mkdir(parents=True, exist_ok=True)
        arrays, meta = self._state()
        arrays = {k: np.ascontiguousarray(v) for k, v in arrays.items()}
        save_tensors(save_file, arrays, path / STATE_FILE)
        doc = {"head": self.name, "params": _jsonable(self.get_params()), "meta": _jsonable(meta)}
        (path / META_FILE).write_text(json.dumps(doc, indent=2) + "\n")
        self._save_files(path)
        return path

    def _save_files(self, path: Path) -> None:
        """Extra non-array files a head needs to rebuild itself (e.g. a tokenizer); none by default."""

    @classmethod
    def load(cls, path: str | Path) -> BaseHead:
        """Rebuild a saved head (any registered head when called as `BaseHead.load`)."""
        path = Path(path)
        if not (path / META_FILE).is_file() or not (path / STATE_FILE).is_file():
            raise ModelError(f"no saved head in {path} (need {META_FILE} and {STATE_FILE})")
        doc = json.loads((path / META_FILE).read_text())
        klass = HEADS.get(doc["head"])
        if cls is not BaseHead and not issubclass(klass, cls):
            raise ModelError(f"{path} holds a {doc['head']!r} head, not a {cls.__name__}")
        defaults = klass().get_params()
        params = {  # json has no tuples: give tuple-valued keywords their type back
            k: tuple(v) if isinstance(defaults.get(k), tuple) and isinstance(v, list) else v
            for k, v in doc["params"].items()
            if k in defaults  # a keyword older saves recorded and the class no longer takes (n_buckets of proxy_reg)
        }
        head = klass(**params)
        head._set_state(load_file(str(path / STATE_FILE)), doc["meta"], path)
        return head

    # -- size --------------------------------------------------------------------------------------
    @property
    def n_parameters(self) -> int:
        """Learned scalars the head uses at prediction time (what "predictor parameters" counts)."""
        check_is_fitted(self)
        arrays, _ = self._state()
        return int(sum(np.asarray(v).size for v in arrays.values()))


def load_head(path: str | Path) -> BaseHead:
    return BaseHead.load(path)


def check_targets(y: Any, n: int) -> np.ndarray:
    """y as a finite 1-D float array of length n (a HeadInputError otherwise; a column warns, as in sklearn)."""
    if y is None:
        raise HeadInputError("this head requires y to be passed, but the target y is None")
    y = column_or_1d(np.asarray(y, dtype=np.float64), warn=True)
    if len(y) != n:
        raise HeadInputError(f"X has {n} rows but y has {len(y)}")
    if not np.all(np.isfinite(y)):
        raise HeadInputError("y contains NaN or inf")
    return y


def _jsonable(obj: Any) -> Any:
    if isinstance(obj, dict):
        return {str(k): _jsonable(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [_jsonable(v) for v in obj]
    if isinstance(obj, np.generic):
        return obj.item()
    if isinstance(obj, np.ndarray):
        return obj.tolist()
    if isinstance(obj, Path):
        return str(obj)
    return obj


def as_list(x: Sequence[Any] | np.ndarray) -> list[Any]:
    return x.tolist() if isinstance(x, np.ndarray) else list(x)
