"""The `vllm bench serve` campaign stage (scripts/serve_bench.py): one cell of paired repeats, stock vLLM against
the lengthpred plugin, resumable (lengthpred.serve.vllm_bench_campaign).

The prompts go to the server as the text the model's chat template makes of their messages (vLLM's client then
sends them as they are), checked to tokenise to exactly the ids the features and the readout were computed from.
"""

from __future__ import annotations

import logging
import subprocess
from pathlib import Path
from typing import Any

from hydra.utils import instantiate
from omegaconf import DictConfig, OmegaConf

from lengthpred.data import load_prompts, load_splits
from lengthpred.errors import ConfigError, DataError
from lengthpred.models import load_tokenizer
from lengthpred.prompting import encode_prompt
from lengthpred.serve.vllm_bench import ServerSpec, arm
from lengthpred.serve.vllm_bench_campaign import Campaign, Cell
from lengthpred.stages.serve import split_ids

log = logging.getLogger("lengthpred.serve")


def prompt_texts(tokenizer: Any, prompts: Any, ids: list[str], budget: int) -> dict[str, str]:
    """The templated text of each prompt; refuses one whose text does not tokenise back to its ids (a server fed
    that text would read another prompt than the readout was fitted on)."""
    row = {pid: k for k, pid in enumerate(prompts["id"])}
    out = {}
    for i in ids:
        messages = list(prompts[row[i]]["messages"])
        want = encode_prompt(tokenizer, messages, max_prompt_tokens=budget, prompt_id=i)
        text = tokenizer.apply_chat_template(messages, add_generation_prompt=True, tokenize=False)
        got = tokenizer(text, add_special_tokens=True)["input_ids"]
        if list(got) != list(want):
            raise DataError(f"prompt {i}: its templated text tokenises to {len(got)} ids, not the {len(want)} the "
                            "readout was fitted on")
        out[i] = text
    return out


def _vllm_version(venv: Path) -> str:
    py = venv / "bin" / "python"
    if not py.is_file():
        raise ConfigError(f"serve_bench.venv={venv}: no vLLM venv there (create it with `make serve-setup`)")
    r = subprocess.run([str(py), "-c", "import vllm; print(vllm.__version__)"], capture_output=True, text=True)
    if r.returncode != 0:
        raise ConfigError(f"serve_bench.venv={venv}: vLLM does not import there ({r.stderr.strip().splitlines()[-1:]})")
    return r.stdout.strip()


def run_serve_bench(cfg: DictConfig, out: str | Path) -> Path:
    """One cell of the campaign into `serve_bench.out_dir/<cell>` (committed); `out`, the stage's own run folder,
    gets a pointer to it. Returns the cell folder."""
    sb = cfg.serve_bench
    venv = Path(str(sb.venv))
    version = _vllm_version(venv)
    spec = instantiate(cfg.model)
    tok = load_tokenizer(spec)
    prompts, splits = load_prompts(cfg.data), load_splits(cfg.data)
    budget = int(cfg.model.max_context) - int(sb.max_tokens)
    pool = split_ids(splits, str(sb.split))
    cap_pool = split_ids(splits, str(sb.capacity_split))
    if set(pool) & set(cap_pool):
        raise ConfigError("serve_bench: the capacity prompts must not be served prompts (split and capacity_split overlap)")
    texts = prompt_texts(tok, prompts, list(pool) + list(cap_pool), budget)
    cell = Cell(**OmegaConf.to_container(sb.cell, resolve=True))
    e = sb.engine
    server = ServerSpec(venv, str(sb.model_dir), served_name=str(cfg.model.name), dtype=str(e.dtype),
                        max_model_len=int(e.max_model_len), max_num_seqs=int(e.max_num_seqs), port=int(e.port),
                        env={str(k): str(v) for k, v in e.env.items()}, extra_args=tuple(str(a) for a in e.extra_args))
    arms = [arm(str(a)) for a in sb.arms]
    folder = Path(str(sb.out_dir)) / cell.name
    camp = Campaign(folder, cell, arms, server, Path(str(sb.readout)), str(sb.model_dir), texts, pool, cap_pool,
                    vllm_version=version, max_tokens=int(sb.max_tokens))
    done = camp.run()
    log.info("%s: %d runs this time; every run of %d repeats x %d arms is in %s", cell.name, len(done), cell.repeats,
             len(arms), folder)
    Path(out).mkdir(parents=True, exist_ok=True)
    (Path(out) / "cell_folder.txt").write_text(f"{folder}\n")
    return folder
