"""The shape of a run's rollout fleet, decided from its config alone: which placement, how many engines of
which tensor-parallel size (:func:`resolve`), and the CPUs its engines and ranks compute on. Imported by
the modules that start things (``placement``, ``ray_group``, ``ray_placement``), none of which it
imports: the one place these rules live.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from services.trainer.config import TrainConfig, fleet_problems


class PlacementError(RuntimeError):
    """The hardware cannot hold the configured placement; the message says what to change."""


@dataclass(frozen=True)
class Layout:
    placement: str
    engines: int
    tensor_parallel_size: int


def resolve(config: TrainConfig, *, cuda: bool) -> Layout:
    """The placement (null: colocated where CUDA is and the ranks run on Ray (``trainer.use_ray``), else
    disaggregated with ``trainer.use_ray`` and ``trainer.rollout_on_ray``, else driver) and the number
    of engines. A null placement resolved to colocated gets the static checks an explicit one gets."""
    rollout, trainer = config.rollout, config.trainer
    placement = rollout.placement
    if placement is None:
        if cuda and trainer.use_ray:
            placement = "colocated"
        elif trainer.use_ray and trainer.rollout_on_ray:
            placement = "disaggregated"
        else:
            placement = "driver"
        resolved = config.model_copy(update={"rollout": rollout.model_copy(update={"placement": placement})})
        problems = fleet_problems(resolved)
        if problems:
            raise PlacementError(
                f"rollout.placement (null) resolved to {placement} here: {'; '.join(problems)}"
            )
    tp = rollout.engine.tensor_parallel_size
    engines = config.actor.world_size // tp if placement == "colocated" else rollout.engines or 1
    return Layout(placement, engines, tp)


def engine_cpus(config: TrainConfig) -> int:
    """Cores one CPU engine computes on while it generates beside the update: its Ray bundle's CPUs in
    whole cores, at least one. A disaggregated engine keeps to that many threads
    (``placement.start_disaggregated``) and the ranks leave them to it (:func:`generating_cpus`)."""
    return max(1, math.floor(config.trainer.ray_cpus_rollout))


def generating_cpus(config: TrainConfig) -> float:
    """CPUs the rollout engines compute on while the ranks update: none, unless they generate the next
    batch then (``trainer.off_policy_steps: 1``): :func:`engine_cpus` for each disaggregated engine, a
    core for each ``driver`` engine (it computes in the trainer's process, outside Ray's accounting,
    and is not held to that core)."""
    if not config.trainer.off_policy_steps:
        return 0.0
    layout = resolve(config, cuda=False)
    return layout.engines * (engine_cpus(config) if layout.placement == "disaggregated" else 1)


def colocated_tp(config: TrainConfig) -> int:
    """The consecutive ranks that must share a node: a colocated engine's ``tensor_parallel_size``
    (ranks ``[i*tp, (i+1)*tp)`` host engine ``i``), else 1. Resolved as the fleet will be
    (``placement.start_fleet``: CUDA as this process sees it)."""
    import torch

    layout = resolve(config, cuda=torch.cuda.is_available())
    return layout.tensor_parallel_size if layout.placement == "colocated" else 1
