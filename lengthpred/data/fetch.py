"""Download every MANIFEST.json file from its GitHub repo at the pinned commit, transform, verify sha256.

URL: `{base_url}/{repo}/{commit}/{path}` (raw.githubusercontent.com layout), so a mirror or a local
http.server laid out the same way works via `base_url`.
"""

from __future__ import annotations

import ast
import hashlib
import json
import re
import urllib.error
import urllib.request
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from tqdm import tqdm

from lengthpred.errors import DataError

MANIFEST = Path(__file__).with_name("MANIFEST.json")
DEFAULT_BASE_URL = "https://raw.githubusercontent.com"
_SLIM = re.compile(r"slimmed to JSONL with fields ([\w,]+)")
_TO_LIST = re.compile(r"(\w+) parsed to a list")
_TO_INT = re.compile(r"(\w+) to int")


def read_manifest(path: str | Path = MANIFEST) -> list[dict[str, Any]]:
    p = Path(path)
    if not p.is_file():
        raise DataError(f"{p}: manifest not found")
    return json.loads(p.read_text())


def _as_list(v: Any) -> list:
    if isinstance(v, str):
        try:
            return json.loads(v)
        except json.JSONDecodeError:
            return ast.literal_eval(v)  # upstream writes Python reprs in some versions
    return list(v)


def apply_transform(raw: bytes, transform: str, name: str) -> bytes:
    """The one transform MANIFEST uses (CASTILLO slimming); any other text is refused, not guessed."""
    m = _SLIM.search(transform)
    if not m:
        raise DataError(f"{name}: unsupported transform {transform!r}")
    fields = m.group(1).split(",")
    to_list, to_int = set(_TO_LIST.findall(transform)), set(_TO_INT.findall(transform))
    text = raw.decode("utf-8")
    try:
        rows = json.loads(text)
    except json.JSONDecodeError:
        rows = [json.loads(line) for line in text.split("\n") if line.strip()]
    out = []
    for i, row in enumerate(rows):
        missing = [f for f in fields if f not in row]
        if missing:
            raise DataError(f"{name}: upstream record {i} lacks fields {missing}")
        slim = {f: row[f] for f in fields}
        for f in to_list & slim.keys():
            slim[f] = _as_list(slim[f])
        for f in to_int & slim.keys():
            slim[f] = int(slim[f])
        out.append(json.dumps(slim) + "\n")
    return "".join(out).encode("utf-8")


def fetch_one(entry: dict[str, Any], dest: Path, base_url: str, timeout_s: float) -> str:
    """Fetch one entry into dest/entry['file']; returns 'ok', 'present' (already verified) or raises."""
    target = dest / entry["file"]
    if target.is_file() and hashlib.sha256(target.read_bytes()).hexdigest() == entry["sha256"]:
        return "present"
    url = f"{base_url.rstrip('/')}/{entry['repo']}/{entry['commit']}/{entry['path']}"
    try:
        with urllib.request.urlopen(url, timeout=timeout_s) as resp:  # noqa: S310 (http(s) only, from config)
            raw = resp.read()
    except (urllib.error.URLError, TimeoutError, OSError) as e:
        raise DataError(f"{entry['file']}: download failed from {url}: {e}") from None
    data = apply_transform(raw, entry["transform"], entry["file"]) if entry.get("transform") else raw
    got = hashlib.sha256(data).hexdigest()
    if got != entry["sha256"]:
        raise DataError(f"{entry['file']}: sha256 mismatch (got {got[:12]}…, manifest {entry['sha256'][:12]}…) "
                        f"from {url}")
    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = target.with_suffix(target.suffix + ".part")
    tmp.write_bytes(data)
    tmp.replace(target)
    return "ok"


def fetch_all(
    dest: str | Path,
    base_url: str = DEFAULT_BASE_URL,
    manifest: str | Path = MANIFEST,
    only: Sequence[str] | None = None,
    timeout_s: float = 60.0,
) -> dict[str, str]:
    """Fetch every manifest file (or those whose `file` starts with one of `only`); file → status.

    A failure on one file does not stop the others; all failures are raised together at the end.
    """
    dest = Path(dest)
    entries = read_manifest(manifest)
    if only:
        entries = [e for e in entries if any(e["file"].startswith(o) for o in only)]
    status: dict[str, str] = {}
    errors: list[str] = []
    for e in tqdm(entries, desc="fetch", disable=None):
        try:
            status[e["file"]] = fetch_one(e, dest, base_url, timeout_s)
        except DataError as err:
            status[e["file"]] = "failed"
            errors.append(str(err))
    if errors:
        raise DataError(f"{len(errors)} of {len(entries)} files failed; first: {errors[0]}")
    if not only:
        (dest / "MANIFEST.json").write_text(Path(manifest).read_text())
    return status
