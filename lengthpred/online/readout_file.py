"""The readout file a user carries from training to a server: one safetensors file, documented here.

Tensors (float64):
- `theta` [d + 1]: the ridge/RLS weights in the standardised feature space, intercept last;
- `mean`, `scale` [d]: the standardisation (x_std = (x − mean) / scale);
- `P` [d + 1, d + 1]: RLS's inverse regularised Gram matrix (what lets a server keep adapting the readout).

Prediction is expm1(x_std · theta[:d] + theta[d]) tokens, x the serving model's hidden state after decoder layer
`layer` − 1 (Hugging Face `hidden_states[layer]`) at the prompt's last token (`pooling: last`).

String metadata (safetensors header):
- `format` = `lengthpred-readout`, `format_version` = `1`;
- the model's identity: `model_name`, `model_architecture` (the HF config's `architectures[0]`), `hidden_size`,
  `num_hidden_layers`, and `weights_fingerprint`: sha256 over each `*.safetensors` weight file's name, size,
  first and last MiB (`weights_fingerprint()`; empty when the weights were not local files);
- the feature: `layer`, `pooling`, `target` (`log1p`), `normalisation` (`standardise`);
- RLS state: `alpha`, `forgetting`, `trace_cap`, `trace0`, `n_samples_seen`, `n_updates`, `rejected`, `resets`;
- `tensors_sha256`: sha256 over the tensors' bytes in name order, so a flipped byte is refused, not served;
- `source`: what wrote it (a stage and its run folder, or a server's checkpoint).

`write_readout` writes atomically (a temp file renamed over the target), so a server checkpointing while it
is killed leaves the previous file whole. `read_readout` refuses a missing, truncated, corrupt or non-finite
file in one line (`DataError`); `check_identity` refuses a readout for another model or layer.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
from safetensors import SafetensorError, safe_open
from safetensors.numpy import save_file

from lengthpred.errors import ConfigError, DataError
from lengthpred.integrity import save_tensors
from lengthpred.online.rls import RLSRegressor

FORMAT = "lengthpred-readout"
FORMAT_VERSION = "1"
FINGERPRINT_BYTES = 1 << 20  # the first and last MiB of each weight file
_TENSORS = ("P", "mean", "scale", "theta")


@dataclass(frozen=True)
class ModelIdentity:
    """What a readout was fitted on; `fingerprint` may be "" (weights not local files: checked by shape only)."""

    name: str
    architecture: str
    hidden_size: int
    num_hidden_layers: int
    fingerprint: str = ""


@dataclass
class Readout:
    """A readout file in memory: the RLS estimator it holds, its model identity, feature and provenance."""

    estimator: RLSRegressor
    identity: ModelIdentity
    layer: int
    pooling: str = "last"
    source: str = ""
    meta: dict[str, str] = field(default_factory=dict)

    @property
    def hidden_size(self) -> int:
        return int(self.estimator.n_features_in_)


def weights_fingerprint(model_dir: str | Path) -> str:
    """sha256 over every `*.safetensors` file of a model folder: its name, size, first and last MiB. Cheap at
    any model size, and it changes with any fine-tune that moves the last tensor's bytes; "" for a folder with
    no safetensors files (a hub id, or weights in another format)."""
    root = Path(model_dir)
    files = sorted(root.glob("*.safetensors")) if root.is_dir() else []
    if not files:
        return ""
    h = hashlib.sha256()
    for f in files:
        size = f.stat().st_size
        h.update(f"{f.name}\0{size}\0".encode())
        with f.open("rb") as fh:
            h.update(fh.read(FINGERPRINT_BYTES))
            if size > FINGERPRINT_BYTES:
                fh.seek(max(size - FINGERPRINT_BYTES, FINGERPRINT_BYTES))
                h.update(fh.read())
    return h.hexdigest()


def _tensors_digest(arrays: dict[str, np.ndarray]) -> str:
    h = hashlib.sha256()
    for name in sorted(arrays):
        h.update(name.encode() + b"\0")
        h.update(np.ascontiguousarray(arrays[name], dtype=np.float64).tobytes())
    return h.hexdigest()


def write_readout(path: str | Path, estimator: RLSRegressor, identity: ModelIdentity, *, layer: int,
                  pooling: str = "last", source: str = "") -> Path:
    """Write `estimator` (a fitted RLSRegressor that keeps P) as a readout file, atomically."""
    if pooling != "last":
        raise ConfigError(f"a readout file serves the last prompt token's state; pooling={pooling!r} cannot be served")
    if estimator._M is None:
        raise ConfigError("a readout file needs an RLS estimator that keeps P (the server adapts it)")
    d = int(estimator.n_features_in_)
    if identity.hidden_size != d:
        raise ConfigError(f"the readout has {d} features but the model's hidden size is {identity.hidden_size}")
    if not 1 <= int(layer) < identity.num_hidden_layers:
        raise ConfigError(f"layer={layer}: a served readout reads after a decoder layer, 1..{identity.num_hidden_layers - 1}")
    arrays = {"theta": estimator.theta_, "mean": np.asarray(estimator.mean_, dtype=np.float64),
              "scale": np.asarray(estimator.scale_, dtype=np.float64), "P": estimator.P_}
    arrays = {k: np.ascontiguousarray(v, dtype=np.float64) for k, v in arrays.items()}
    meta = {
        "format": FORMAT, "format_version": FORMAT_VERSION,
        "model_name": identity.name, "model_architecture": identity.architecture,
        "hidden_size": str(identity.hidden_size), "num_hidden_layers": str(identity.num_hidden_layers),
        "weights_fingerprint": identity.fingerprint,
        "layer": str(int(layer)), "pooling": pooling, "target": "log1p", "normalisation": "standardise",
        "alpha": repr(float(estimator.alpha)), "forgetting": repr(float(estimator.forgetting)),
        "trace_cap": "" if estimator.trace_cap is None else repr(float(estimator.trace_cap)),
        "trace0": repr(float(estimator.trace0_)),
        "n_samples_seen": str(int(estimator.n_samples_seen_)), "n_updates": str(int(estimator.n_updates_)),
        "rejected": str(int(estimator.rejected_)), "resets": str(int(estimator.resets_)),
        "tensors_sha256": _tensors_digest(arrays), "source": source,
    }
    out = Path(path)
    tmp = None
    try:
        out.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(prefix=f".{out.name}.", suffix=".tmp", dir=out.parent)
        os.close(fd)
        os.chmod(tmp, 0o644)  # mkstemp's 0600 would hide the readout from the server's other users
        save_tensors(save_file, arrays, tmp, metadata=meta)
        fd = os.open(tmp, os.O_RDONLY)
        try:  # on disk before the rename: a crash leaves the old file or the new one, never a torn one
            os.fsync(fd)
        finally:
            os.close(fd)
        os.replace(tmp, out)
    except (OSError, SafetensorError) as e:  # safetensors reports a failed write (a full disk) as its own error
        if tmp is not None:
            with contextlib.suppress(OSError):
                os.unlink(tmp)
        why = e.strerror if isinstance(e, OSError) and e.strerror else str(e).splitlines()[0][:160]
        raise DataError(f"cannot write the readout file {out}: {why}") from None
    return out


def read_readout(path: str | Path) -> Readout:
    """Load and check a readout file; one-line `DataError` for a missing, truncated, corrupt or non-finite one."""
    p = Path(path)
    if not p.is_file():
        raise DataError(f"readout file {p} does not exist")
    try:
        with safe_open(str(p), framework="numpy") as f:
            meta = dict(f.metadata() or {})
            arrays = {k: f.get_tensor(k) for k in f.keys()}  # noqa: SIM118 (safe_open has no __iter__)
    except (SafetensorError, OSError, ValueError) as e:
        raise DataError(f"readout file {p} is not a readable safetensors file (truncated or damaged: "
                        f"{str(e).splitlines()[0][:120]})") from None
    if meta.get("format") != FORMAT:
        raise DataError(f"{p} is not a lengthpred readout file (format {meta.get('format')!r})")
    if meta.get("format_version") != FORMAT_VERSION:
        raise DataError(f"readout file {p} has format version {meta.get('format_version')!r}; this lengthpred "
                        f"reads version {FORMAT_VERSION}")
    missing = [k for k in _TENSORS if k not in arrays]
    if missing:
        raise DataError(f"readout file {p} lacks tensors {missing}")
    arrays = {k: np.asarray(arrays[k], dtype=np.float64) for k in _TENSORS}
    if _tensors_digest(arrays) != meta.get("tensors_sha256"):
        raise DataError(f"readout file {p} is corrupt: its tensors do not match the checksum it was written with")
    bad = [k for k in _TENSORS if not np.isfinite(arrays[k]).all()]
    if bad:
        raise DataError(f"readout file {p} holds non-finite values in {bad}")
    d = len(arrays["mean"])
    if arrays["theta"].shape != (d + 1,) or arrays["scale"].shape != (d,) or arrays["P"].shape != (d + 1, d + 1):
        raise DataError(f"readout file {p} has inconsistent shapes: theta {arrays['theta'].shape}, mean ({d},), "
                        f"scale {arrays['scale'].shape}, P {arrays['P'].shape}")
    try:
        identity = ModelIdentity(meta["model_name"], meta["model_architecture"], int(meta["hidden_size"]),
                                 int(meta["num_hidden_layers"]), meta.get("weights_fingerprint", ""))
        layer = int(meta["layer"])
        est = _estimator(arrays, meta)
    except (KeyError, ValueError) as e:
        raise DataError(f"readout file {p} has bad metadata ({type(e).__name__}: {e})") from None
    if identity.hidden_size != d:
        raise DataError(f"readout file {p}: hidden_size {identity.hidden_size} in its metadata, {d} in its weights")
    return Readout(est, identity, layer, meta.get("pooling", "last"), meta.get("source", ""), meta)


def _estimator(arrays: dict[str, np.ndarray], meta: dict[str, str]) -> RLSRegressor:
    cap = meta.get("trace_cap", "")
    est = RLSRegressor(alpha=float(meta["alpha"]), forgetting=float(meta["forgetting"]),
                       trace_cap=float(cap) if cap else None)
    est.theta_ = arrays["theta"].copy()
    est.mean_, est.scale_ = arrays["mean"].copy(), arrays["scale"].copy()
    est._M = np.asfortranarray(np.triu(arrays["P"]))
    est._c = 1.0
    est.trace0_ = float(meta["trace0"])
    est.n_features_in_ = len(arrays["mean"])
    est.n_samples_seen_ = int(meta["n_samples_seen"])
    est.n_updates_ = int(meta["n_updates"])
    est.rejected_ = int(meta["rejected"])
    est.resets_ = int(meta["resets"])
    return est


def check_identity(readout: Readout, served: ModelIdentity, *, path: Any = "the readout") -> list[str]:
    """Refuse (one-line `ConfigError`) a readout fitted on another model: architecture, hidden size or layer count
    differ, or both sides have a weights fingerprint and they differ. Returns the warnings for checks that could
    not run (a side without a fingerprint); the names are not compared (one model has many names)."""
    want = readout.identity
    for what, a, b in (("architecture", want.architecture, served.architecture),
                       ("hidden size", want.hidden_size, served.hidden_size),
                       ("layer count", want.num_hidden_layers, served.num_hidden_layers)):
        if a != b:
            raise ConfigError(f"{path} was fitted on {want.name} ({what} {a}); the served model {served.name} has "
                              f"{what} {b}: export a readout for this model")
    if not 1 <= readout.layer < served.num_hidden_layers:
        raise ConfigError(f"{path} reads layer {readout.layer}; the served model has decoder layers 1..{served.num_hidden_layers - 1}")
    if want.fingerprint and served.fingerprint and want.fingerprint != served.fingerprint:
        raise ConfigError(f"{path} was fitted on other weights than {served.name}'s (weights fingerprint "
                          f"{want.fingerprint[:12]} vs {served.fingerprint[:12]}): export a readout for these weights")
    if not (want.fingerprint and served.fingerprint):
        return [f"{path}: weights fingerprint not compared (readout {'has one' if want.fingerprint else 'has none'}, "
                f"served model {'has one' if served.fingerprint else 'has none'}); checked by architecture and shape"]
    return []
