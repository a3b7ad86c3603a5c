"""The plugin's per-request log (`--additional-config '{"lengthpred": {"request_log": "<file>"}}'`): one JSON line
per finished request, what the readout predicted beside what happened, so a user can score the readout on their
own traffic. Keys: `request_id`, `prompt_hash` (`prompt_hash`: join it with your own data), `arrival` and
`finished_at` (Unix seconds), `prompt_tokens`, `predicted` (tokens; null when unpredictable), `output_tokens`,
`finish` (vLLM's status: FINISHED_STOPPED, FINISHED_LENGTH_CAPPED, FINISHED_ABORTED, ...), `yields` (times it gave
its slot up)."""

from __future__ import annotations

import contextlib
import hashlib
import json
import logging
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from lengthpred.errors import ConfigError

log = logging.getLogger("vllm.lengthpred")  # under vLLM's logger: its handlers and format


def prompt_hash(token_ids: Sequence[int]) -> str:
    """sha256 of a prompt's token ids (int64, little-endian), first 16 hex digits."""
    return hashlib.sha256(np.asarray(list(token_ids), dtype="<i8").tobytes()).hexdigest()[:16]


class RequestLog:
    def __init__(self, path: Path) -> None:
        self.path = path
        try:
            self._f = open(path, "a", buffering=1)  # noqa: SIM115 (open for the server's life; a line per request)
        except OSError as e:
            raise ConfigError(f"--additional-config lengthpred.request_log={path}: {e.strerror}") from None

    def write(self, record: dict[str, Any]) -> None:
        """One line; a write that fails (a full disk) stops the log with one error line, never the server."""
        if self._f.closed:
            return
        try:
            self._f.write(json.dumps(record) + "\n")
        except OSError as e:
            log.error("lengthpred: request log %s stopped: %s", self.path, e.strerror or e)
            self.close()

    def close(self) -> None:
        with contextlib.suppress(OSError):
            self._f.close()
