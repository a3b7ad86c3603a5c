"""lengthpred inside a user's own `vllm serve`: predicted-length scheduling with LEAP's readout, adapted live.

Installed into vLLM's environment (`pip install -e ".[serve]"`), the `vllm.general_plugins` entry point `register`
runs in every process vLLM starts. With `LENGTHPRED_READOUT=<readout file>` set it checks the file and vLLM's
version, and registers, for the readout's architecture, vLLM's own model class extended to send the readout
layer's state at each prompt's end to the scheduler (`capture_model`). The scheduler is named on the command line:

    LENGTHPRED_READOUT=readout.safetensors vllm serve <model> \\
        --scheduler-cls lengthpred.vllm_plugin.scheduler.LengthAwareScheduler \\
        --additional-config '{"lengthpred": {"policy": "sjf"}}'

Without the variable the plugin does nothing and vLLM serves as it would without it. docs/how-to/serve-with-vllm.md
is the user's page; `settings` lists the options.
"""

from __future__ import annotations

import logging
import os
import sys

log = logging.getLogger("vllm.lengthpred")  # under vLLM's logger: its handlers and format

_registered: set[str] = set()


def register() -> None:
    """vLLM's general-plugin hook (every process, possibly more than once: idempotent). A bad readout file or an
    unsupported vLLM stops the server here, before any model loads, with one line."""
    from lengthpred.errors import LengthpredError
    from lengthpred.vllm_plugin.settings import readout_path

    path = readout_path(os.environ)
    if path is None:
        return
    try:
        _register(path)
    except LengthpredError as e:
        print(f"lengthpred: {e}", file=sys.stderr)
        raise SystemExit(2) from None


def _register(path: os.PathLike) -> None:
    from vllm import ModelRegistry

    from lengthpred.online.readout_file import read_readout
    from lengthpred.vllm_plugin import _vllm_private as private
    from lengthpred.vllm_plugin.capture_model import capture_class

    private.check_version(private.vllm_version())
    readout = read_readout(path)
    if readout.pooling != "last":
        from lengthpred.errors import ConfigError

        raise ConfigError(f"{path}: pooling {readout.pooling!r}; the server reads the last prompt token's state")
    arch = readout.identity.architecture
    if arch in _registered:
        return
    base = private.builtin_model_class(arch)
    ModelRegistry.register_model(arch, capture_class(base, readout.layer, readout.hidden_size))
    _registered.add(arch)
    log.debug("lengthpred: %s extended to send layer %d's prefill state", arch, readout.layer)


def __getattr__(name: str):  # noqa: ANN202 (PEP 562: `--scheduler-cls lengthpred.vllm_plugin.LengthAwareScheduler`)
    if name == "LengthAwareScheduler":
        from lengthpred.vllm_plugin.scheduler import LengthAwareScheduler

        return LengthAwareScheduler
    raise AttributeError(name)
