"""Sampling seeds of generation requests: a pure function of where in the run a request belongs.

A request's seed depends on the run's seed, the step, the sample and which stream of the step asked for
it (the training batch, a dynamic-sampling round, validation, a greedy baseline), never on how long the
engine has been running or which engine serves it. A run resumed at step k therefore samples step k+1
exactly as the uninterrupted run does, and the same step samples the same tokens on 1 or N engines.

The n responses of one prompt travel as one vLLM request (one prompt to process, one prefix to share):
vLLM 0.32 seeds response ``i`` of a request seeded ``s`` with ``s + i``
(``vllm/v1/engine/parallel_sampling.py``), so response ``i`` of a group is sampled from
``group_seed(...) + i``: a function of (run seed, step, sample id, response index), as SPEC §5 asks.
``tests/rollout/test_seeds_engine.py`` pins that rule against the installed vLLM.
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

#: seeds stay below 2**62, so that seed + response index fits torch's and vLLM's signed 64-bit range
SEED_BITS = 62


@dataclass(frozen=True)
class SeedKey:
    """Where a rollout call belongs in the run: ``step`` and the ``stream`` of that step ("train" for
    the batch, "train/round2"… for DAPO's extra rounds, "val", "greedy")."""

    step: int
    stream: str = "train"

    def __post_init__(self) -> None:
        if self.step < 0:
            raise ValueError(f"a seed key's step must be >= 0, got {self.step}")
        if not self.stream or "\x00" in self.stream:
            raise ValueError(f"a seed key's stream must be a non-empty name, got {self.stream!r}")


def group_seed(run_seed: int, key: SeedKey, sample_id: str, repeat: int = 0) -> int:
    """The seed of the request that generates ``sample_id``'s group at ``key``: the first 62 bits of
    BLAKE2b over the four fields, NUL-separated (stable across processes and Python versions, unlike
    ``hash``). ``repeat``: how many groups of the same sample come before this one in the call (a batch
    that spans two epochs may hold a sample twice; its second group must not repeat the first's
    tokens); 0 leaves the four fields alone."""
    if repeat < 0:
        raise ValueError(f"repeat must be >= 0, got {repeat}")
    text = f"{run_seed}\x00{key.step}\x00{key.stream}\x00{sample_id}"
    if repeat:
        text += f"\x00{repeat}"
    digest = hashlib.blake2b(text.encode(), digest_size=8).digest()
    return int.from_bytes(digest, "big") >> (64 - SEED_BITS)


def response_seed(run_seed: int, key: SeedKey, sample_id: str, index: int) -> int:
    """The seed response ``index`` of the group is sampled with (vLLM's rule, see the module docstring)."""
    if index < 0:
        raise ValueError(f"response index must be >= 0, got {index}")
    return group_seed(run_seed, key, sample_id) + index


def group_seeds(run_seed: int, key: SeedKey | None, samples: Sequence[Any]) -> list[int | None]:
    """The request seed of each sample (anything with an ``id``) at ``key``, a repeated sample's later
    groups counted by ``repeat``; None for every sample without a key (the engine's own random stream,
    as before seeds were given). A fleet sends every group of one sample to the same engine in sample
    order (``routing.assign(..., keys=...)``), so the repeats count the same on 1 or N engines."""
    if key is None:
        return [None] * len(samples)
    seen: dict[str, int] = {}
    out: list[int | None] = []
    for sample in samples:
        repeat = seen.get(sample.id, 0)
        seen[sample.id] = repeat + 1
        out.append(group_seed(run_seed, key, sample.id, repeat))
    return out
