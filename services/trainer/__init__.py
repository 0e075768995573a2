"""The trainer service: the RL loop (``loop``), its config tree (``config``), data, actor and updates.

``services.trainer.run(config)`` trains per a :class:`~services.trainer.config.TrainConfig` (or a path to a
YAML config); the loop is imported on first use, so ``services.trainer.algorithms`` stays light.
"""

from __future__ import annotations

from typing import Any


def run(config: Any, overrides: list[str] | tuple[str, ...] = (), **kwargs: Any) -> Any:
    """Train: ``config`` is a ``TrainConfig``, a dict of sections, or a YAML path (with ``overrides``)."""
    from services.trainer.config import TrainConfig, load_config, parse_config
    from services.trainer.loop import run as run_loop

    if not isinstance(config, TrainConfig):
        config = parse_config(config) if isinstance(config, dict) else load_config(config, overrides)
    return run_loop(config, **kwargs)
