"""The readout inside the server (the engine-core process): predict from a prefill row, learn from completions.

LEAP's loop live: every finished request's (prefill row, output length) updates the RLS readout
(`lengthpred.online.RLSRegressor`) through `lengthpred.online.service.OnlineService`, on its update thread
(`updates: thread`, off the step's path; numpy's BLAS is held to one thread there so its spinning workers do not
steal the engine's cores), between steps (`inline`), or not at all (`off`). Predictions read the latest
published weights. Every `checkpoint_every` updates and when the server goes idle (on a thread of its own, one writer at
a time), and at shutdown, the adapted readout is written atomically to the checkpoint file (synced to disk before
the rename), so a restarted server resumes its adaptation from it.
"""

from __future__ import annotations

import copy
import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
from threadpoolctl import ThreadpoolController

from lengthpred.errors import DataError
from lengthpred.online.readout_file import Readout, write_readout
from lengthpred.online.service import OnlineService

log = logging.getLogger("vllm.lengthpred")  # under vLLM's logger: its handlers and format
CHECKPOINT_SOURCE = "lengthpred vLLM plugin checkpoint"


class _OneThreadBLAS:
    """Forwards `partial_fit` with BLAS held to one thread (the update thread runs beside the engine)."""

    def __init__(self, est: object) -> None:
        self._est = est
        self.busy_s = 0.0
        self.lock = threading.Lock()  # a checkpoint copies the estimator between updates, never inside one
        self._blas = ThreadpoolController()  # scans the loaded libraries once (threadpool_limits would, per call)

    def partial_fit(self, X: np.ndarray, y: np.ndarray) -> _OneThreadBLAS:
        with self.lock:
            t = time.perf_counter()
            with self._blas.limit(limits=1, user_api="blas"):
                self._est.partial_fit(X, y)
            self.busy_s += time.perf_counter() - t
        return self

    def __getattr__(self, name: str) -> object:
        return getattr(self._est, name)


@dataclass
class ReadoutStats:
    predicted: int = 0
    unpredictable: int = 0
    updates_submitted: int = 0
    censored: int = 0  # finished at max_tokens: the update sees the cap, a lower bound (as the offline targets)
    aborted: int = 0  # no update
    predict_s: float = 0.0
    checkpoints: int = 0
    extra: dict[str, float] = field(default_factory=dict)


class LiveReadout:
    def __init__(self, readout: Readout, *, updates: str, checkpoint: Path, checkpoint_every: int) -> None:
        self.readout = readout
        self.updates = updates
        self.checkpoint_path = checkpoint
        self.checkpoint_every = int(checkpoint_every)
        self._est = _OneThreadBLAS(readout.estimator)
        self.service = OnlineService(self._est, threaded_updates=updates == "thread")
        self.stats = ReadoutStats()
        self._since_checkpoint = 0
        self._writer: threading.Thread | None = None  # the checkpoint thread while it runs
        self._soon = threading.Lock()  # guards _writer, _pending and _after
        self._pending = False
        self._after: Callable[[], None] | None = None
        self._write_lock = threading.Lock()

    @property
    def n_updates(self) -> int:
        return int(self.readout.estimator.n_updates_)

    def predict(self, row: np.ndarray) -> float | None:
        """Predicted output tokens of one prefill row; None for a row the readout cannot read."""
        t = time.perf_counter()
        x = np.asarray(row, dtype=np.float64).ravel()
        if x.shape[0] != self.readout.hidden_size or not np.isfinite(x).all():
            self.stats.unpredictable += 1
            return None
        y = self.service.predict_now(x)
        self.stats.predict_s += time.perf_counter() - t
        self.stats.predicted += 1
        return y

    def learn(self, row: np.ndarray, length: int, *, capped: bool) -> None:
        if self.updates == "off":
            return
        self.service.submit_update(np.asarray(row, dtype=np.float64), float(length))
        self.stats.updates_submitted += 1
        self.stats.censored += int(capped)
        self._since_checkpoint += 1
        if self._since_checkpoint >= self.checkpoint_every:
            self.checkpoint_soon()

    def checkpoint_soon(self, then: Callable[[], None] | None = None) -> None:
        """A checkpoint on a thread of its own (off the step's path, like the updates), after pending updates, then
        `then()` there. Asked while one is being written, one more follows it, so the latest updates always reach
        the file."""
        with self._soon:
            self._since_checkpoint = 0
            self._pending = True
            self._after = then or self._after
            if self._writer is None:
                self._writer = threading.Thread(target=self._write_while_asked, name="lp-checkpoint", daemon=True)
                self._writer.start()

    def _write_while_asked(self) -> None:
        while True:
            with self._soon:
                if not self._pending:
                    self._writer = None  # under the lock: a later request starts a new writer
                    return
                self._pending, after, self._after = False, self._after, None
            self.checkpoint(wait=True)
            if after is not None:
                try:
                    after()
                except Exception as e:  # a report must not end the writer (the server keeps serving)
                    log.error("lengthpred: after a checkpoint: %s", e)

    def checkpoint(self, *, wait: bool = False) -> Path | None:
        """Write the adapted readout (after the updates applied so far; `wait`: after all submitted ones). One writer
        at a time, so a later snapshot is never overwritten by an earlier one."""
        if self.updates == "off":
            return None
        if wait:
            self.service.drain(timeout=30.0)
        with self._write_lock:
            with self._est.lock:
                snap = copy.deepcopy(self.readout.estimator)
            try:
                write_readout(self.checkpoint_path, snap, self.readout.identity, layer=self.readout.layer,
                              pooling=self.readout.pooling, source=self._source)
            except DataError as e:
                log.error("lengthpred: %s", e)
                return None
            self.stats.checkpoints += 1
        return self.checkpoint_path

    @property
    def _source(self) -> str:
        src = self.readout.source
        return src if src.startswith(CHECKPOINT_SOURCE) else f"{CHECKPOINT_SOURCE} of {src or 'a readout'}"

    def update_ms(self) -> float:
        n = self.n_updates
        return 1e3 * self._est.busy_s / n if n else float("nan")

    def close(self) -> None:
        with self._soon:
            writer = self._writer
        if writer is not None:
            writer.join()
        self.checkpoint(wait=True)
        self.service.close()
