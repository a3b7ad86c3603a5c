"""The readout file users carry to `vllm serve` (lengthpred.online.readout_file): what it holds, and that a bad
one is refused in one line."""

from __future__ import annotations

import numpy as np
import pytest
from safetensors import safe_open

from lengthpred.errors import ConfigError, DataError
from lengthpred.online.readout_file import (
    ModelIdentity,
    check_identity,
    read_readout,
    weights_fingerprint,
    write_readout,
)
from lengthpred.online.rls import RLSRegressor

IDENT = ModelIdentity("m", "LlamaForCausalLM", 8, 4, "f" * 64)


def fitted(seed: int = 0, d: int = 8) -> tuple[RLSRegressor, np.ndarray]:
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(40, d))
    y = np.exp(rng.normal(4, 1, size=40)).round()
    return RLSRegressor(alpha=3.0, forgetting=0.999).fit(X, y), X


def test_round_trip_keeps_predictions_updates_and_identity(tmp_path):
    est, X = fitted()
    est.partial_fit(X[:5], np.arange(5) * 10.0)
    path = write_readout(tmp_path / "r.safetensors", est, IDENT, layer=2, source="test")
    back = read_readout(path)
    assert back.identity == IDENT and back.layer == 2 and back.pooling == "last" and back.source == "test"
    np.testing.assert_array_equal(back.estimator.predict(X), est.predict(X))
    np.testing.assert_array_equal(back.estimator.P_, est.P_)
    assert back.estimator.n_updates_ == 5 and back.estimator.forgetting == 0.999
    # the loaded readout keeps adapting exactly as the one that was written
    est.partial_fit(X[5:9], np.full(4, 77.0))
    back.estimator.partial_fit(X[5:9], np.full(4, 77.0))
    np.testing.assert_allclose(back.estimator.theta_, est.theta_, rtol=0, atol=1e-12)
    with safe_open(str(path), framework="numpy") as f:
        meta = f.metadata()
    assert meta["format"] == "lengthpred-readout" and meta["hidden_size"] == "8" and meta["target"] == "log1p"


@pytest.mark.parametrize("damage, message", [
    ("missing", "does not exist"),
    ("truncated", "not a readable safetensors file"),
    ("flipped", "is corrupt"),
    ("not_readout", "is not a lengthpred readout file"),
])
def test_a_bad_file_is_refused_in_one_line(tmp_path, damage, message):
    est, _ = fitted()
    path = write_readout(tmp_path / "r.safetensors", est, IDENT, layer=2)
    raw = path.read_bytes()
    if damage == "missing":
        path.unlink()
    elif damage == "truncated":
        path.write_bytes(raw[: len(raw) // 2])
    elif damage == "flipped":
        b = bytearray(raw)
        b[-100] ^= 0x40  # a byte of P, inside the tensors
        path.write_bytes(bytes(b))
    else:
        from safetensors.numpy import save_file

        save_file({"theta": np.zeros(3)}, str(path), metadata={"format": "something-else"})
    with pytest.raises(DataError, match=message) as e:
        read_readout(path)
    assert "\n" not in str(e.value)


def test_non_finite_weights_are_refused(tmp_path):
    est, _ = fitted()
    est.theta_[0] = np.nan
    path = write_readout(tmp_path / "r.safetensors", est, IDENT, layer=2)
    with pytest.raises(DataError, match="non-finite values in \\['theta'\\]"):
        read_readout(path)


def test_identity_refuses_another_model_or_layer(tmp_path):
    est, _ = fitted()
    r = read_readout(write_readout(tmp_path / "r.safetensors", est, IDENT, layer=2))
    assert check_identity(r, IDENT) == []
    for other, what in [(ModelIdentity("m", "Qwen2ForCausalLM", 8, 4, "f" * 64), "architecture"),
                        (ModelIdentity("m", "LlamaForCausalLM", 16, 4, "f" * 64), "hidden size"),
                        (ModelIdentity("m", "LlamaForCausalLM", 8, 6, "f" * 64), "layer count"),
                        (ModelIdentity("m", "LlamaForCausalLM", 8, 4, "e" * 64), "other weights")]:
        with pytest.raises(ConfigError, match=what):
            check_identity(r, other)
    warnings = check_identity(r, ModelIdentity("hub/id", "LlamaForCausalLM", 8, 4, ""))
    assert len(warnings) == 1 and "not compared" in warnings[0]
    r.layer = 4
    with pytest.raises(ConfigError, match="reads layer 4"):
        check_identity(r, IDENT)


def test_write_refuses_what_cannot_be_served(tmp_path):
    est, _ = fitted()
    with pytest.raises(ConfigError, match="pooling"):
        write_readout(tmp_path / "r.safetensors", est, IDENT, layer=2, pooling="mean")
    with pytest.raises(ConfigError, match="hidden size"):
        write_readout(tmp_path / "r.safetensors", est, ModelIdentity("m", "X", 9, 4), layer=2)
    with pytest.raises(ConfigError, match="1..3"):
        write_readout(tmp_path / "r.safetensors", est, IDENT, layer=4)


def test_a_write_that_fails_is_one_line_and_leaves_the_old_file_and_no_temp(tmp_path, monkeypatch):
    from safetensors import SafetensorError

    est, _ = fitted()
    path = write_readout(tmp_path / "r.safetensors", est, IDENT, layer=2)
    before = path.read_bytes()

    def full_disk(arrays, filename, metadata=None):  # what safetensors raises for a failed write
        open(filename, "wb").write(b"\0" * 7)
        raise SafetensorError("Error while serializing: IoError(No space left on device)")

    monkeypatch.setattr("lengthpred.online.readout_file.save_file", full_disk)
    with pytest.raises(DataError, match="cannot write the readout file .*No space left") as e:
        write_readout(path, fitted(1)[0], IDENT, layer=2)
    assert "\n" not in str(e.value)
    assert path.read_bytes() == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["r.safetensors"]


def test_weights_fingerprint_moves_with_the_bytes_and_not_with_the_folder(tmp_path):
    a, b = tmp_path / "a", tmp_path / "b"
    for d in (a, b):
        d.mkdir()
        (d / "model.safetensors").write_bytes(bytes(range(256)) * 20000)  # 5 MB: head and tail both read
        (d / "config.json").write_text("{}")
    assert weights_fingerprint(a) == weights_fingerprint(b) != ""
    data = bytearray((b / "model.safetensors").read_bytes())
    data[-10] ^= 1
    (b / "model.safetensors").write_bytes(bytes(data))
    assert weights_fingerprint(a) != weights_fingerprint(b)
    assert weights_fingerprint(tmp_path / "nothing") == ""
