"""`shard=i/n`: this process's slice of a long stage (docs/how-to/gpu-and-slurm.md; the stages, docs/DESIGN.md)."""

from __future__ import annotations

from lengthpred.errors import ConfigError


def parse_shard(shard: str | None) -> tuple[int, int]:
    """`"i/n"` → (i, n) with 0 ≤ i < n; None or "" → (0, 1)."""
    if shard in (None, ""):
        return 0, 1
    try:
        i_s, n_s = str(shard).split("/")
        i, n = int(i_s), int(n_s)
    except ValueError:
        raise ConfigError(f"shard={shard!r} is not of the form i/n (e.g. shard=0/4)") from None
    if n < 1 or not 0 <= i < n:
        raise ConfigError(f"shard={shard!r}: need 0 <= i < n")
    return i, n


def check_shard_fits(shard: str | None, n_items: int, what: str = "prompts") -> tuple[int, int]:
    """`parse_shard`, and a shard count past the number of items (a shard with nothing to do, which a launcher
    would still schedule) refused in one line before any work."""
    i, n = parse_shard(shard)
    if n > n_items:
        raise ConfigError(f"shard={shard}: {n} shards for {n_items} {what}; use at most {n_items} (shard=i/{n_items})")
    return i, n
