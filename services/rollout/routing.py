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


def assign(costs: Sequence[float], engines: int, keys: Sequence[str] | None = None) -> list[int]:
    """The engine (0..engines-1) of each group, balancing the summed ``costs`` per engine. ``keys``
    (each group's sample id): groups of the same sample go to one engine together, weighed as one (a
    repeated sample's seeds count its repeats in call order, ``seeds.group_seeds``); without repeats
    the split is the same as without keys."""
    if engines < 1:
        raise ValueError(f"a fleet needs at least one engine, got {engines}")
    if keys is not None:
        if len(keys) != len(costs):
            raise ValueError(f"{len(keys)} keys for {len(costs)} groups")
        first: dict[str, int] = {}
        summed: list[float] = []
        for key, cost in zip(keys, costs, strict=True):
            if key not in first:
                first[key] = len(summed)
                summed.append(0.0)
            summed[first[key]] += cost
        per_key = assign(summed, engines)
        return [per_key[first[key]] for key in keys]
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
