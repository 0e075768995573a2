"""Which engine of a fleet generates which group: pure functions, deterministic given their inputs.

All responses of one prompt go to one engine (they share its prefix and encoder caches). Groups are
balanced by estimated tokens: longest first, each to the least loaded engine (ties: the lower group
index, the lower engine index), the classic LPT rule, within 4/3 of the best split.
"""

from __future__ import annotations

from collections.abc import Sequence


def group_cost(prompt_tokens: int, responses: int, max_tokens: int) -> int:
    """Estimated tokens one group costs an engine: its prompt once (the other responses reuse its
    prefix cache) plus every response at its length limit."""
    return prompt_tokens + responses * max_tokens


def assign(costs: Sequence[float], engines: int) -> list[int]:
    """The engine (0..engines-1) of each group, balancing the summed ``costs`` per engine."""
    if engines < 1:
        raise ValueError(f"a fleet needs at least one engine, got {engines}")
    load = [0.0] * engines
    out = [0] * len(costs)
    for i in sorted(range(len(costs)), key=lambda i: (-costs[i], i)):
        engine = min(range(engines), key=lambda e: (load[e], e))
        out[i] = engine
        load[engine] += costs[i]
    return out


def shards(assignment: Sequence[int], engines: Sequence[int]) -> dict[int, list[int]]:
    """The group indices (in sample order) each of ``engines`` serves under ``assignment``."""
    out: dict[int, list[int]] = {e: [] for e in engines}
    for i, engine in enumerate(assignment):
        out[engine].append(i)
    return {e: ids for e, ids in out.items() if ids}
