"""Prefill states from the model's process to the scheduler's, one message per step that prefilled.

vLLM runs its model in a worker (its own process on CPU, and with tensor parallelism) and the scheduler in the
engine core, so the state the model computed crosses a process boundary. The worker PUSHes, the scheduler
PULLs, over a ZeroMQ IPC socket (pyzmq ships with vLLM) named by the server's `instance_id`, which both processes
read from the same vLLM config. A message is the step's layout (query and sequence length of every request in
batch order) and the state at the last token of each chunk longer than one token, float32 [m, d].

Sends never block: with no reader (a scheduler that is not ours) messages beyond the socket's queue are dropped.
"""

from __future__ import annotations

import json
import tempfile
from dataclasses import dataclass
from pathlib import Path

import numpy as np

HWM = 1000  # queued messages before a send is dropped


def address(instance_id: str) -> str:
    safe = "".join(c if c.isalnum() or c in "-_" else "_" for c in str(instance_id)) or "default"
    return f"ipc://{Path(tempfile.gettempdir()) / f'lengthpred-{safe}.ipc'}"


@dataclass(frozen=True)
class StepRows:
    """One step's layout and the states at the last token of each chunk of more than one token."""

    qlens: tuple[int, ...]  # tokens of each request in this step, in batch order
    seq_lens: tuple[int, ...]  # each request's tokens computed after this step, in batch order
    chunks: tuple[int, ...]  # batch indices whose chunk has more than one token (the rows, in order)
    rows: np.ndarray  # [len(chunks), d] float32
    capture_s: float = 0.0  # what taking these rows cost the model's process (its time in the forward)

    def encode(self) -> list[bytes]:
        head = json.dumps({"qlens": self.qlens, "seq_lens": self.seq_lens, "chunks": self.chunks,
                           "d": int(self.rows.shape[1]) if self.rows.ndim == 2 else 0,
                           "capture_s": self.capture_s}).encode()
        return [head, np.ascontiguousarray(self.rows, dtype=np.float32).tobytes()]

    @classmethod
    def decode(cls, parts: list[bytes]) -> StepRows:
        head = json.loads(parts[0])
        rows = np.frombuffer(parts[1], dtype=np.float32).reshape(len(head["chunks"]), int(head["d"]))
        return cls(tuple(head["qlens"]), tuple(head["seq_lens"]), tuple(head["chunks"]), rows,
                   float(head.get("capture_s", 0.0)))


class RowSender:
    """The worker's end: connects lazily, sends without blocking."""

    def __init__(self, addr: str) -> None:
        self.addr = addr
        self._sock = None
        self.dropped = 0

    def send(self, msg: StepRows) -> None:
        import zmq

        if self._sock is None:
            self._sock = zmq.Context.instance().socket(zmq.PUSH)
            self._sock.setsockopt(zmq.SNDHWM, HWM)
            self._sock.setsockopt(zmq.LINGER, 0)
            self._sock.setsockopt(zmq.RECONNECT_IVL, 10)  # ms: the scheduler binds after the model's warm-up
            self._sock.connect(self.addr)
        try:
            self._sock.send_multipart(msg.encode(), flags=zmq.NOBLOCK, copy=False)
        except zmq.Again:
            self.dropped += 1

    def close(self) -> None:
        if self._sock is not None:
            self._sock.close(0)
            self._sock = None


class RowReceiver:
    """The scheduler's end: binds at start-up; `drain()` drops what arrived before it (model warm-up steps)."""

    def __init__(self, addr: str) -> None:
        import zmq

        self._zmq = zmq
        self.addr = addr
        self._sock = zmq.Context.instance().socket(zmq.PULL)
        self._sock.setsockopt(zmq.RCVHWM, HWM)
        self._sock.setsockopt(zmq.LINGER, 0)
        self._sock.bind(addr)

    def receive(self, timeout_s: float) -> StepRows | None:
        if not self._sock.poll(int(timeout_s * 1000)):
            return None
        return StepRows.decode(self._sock.recv_multipart())

    def drain(self, quiet_s: float = 0.3) -> int:
        n = 0
        while self.receive(quiet_s) is not None:
            n += 1
        return n

    def close(self) -> None:
        self._sock.close(0)
        path = self.addr.removeprefix("ipc://")
        Path(path).unlink(missing_ok=True)
