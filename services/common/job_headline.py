"""One line saying how a finished job came out, shown beside it in the jobs list and `reelrl status`.

An evaluation's headline is each benchmark's overall score (percent, as benchmarks publish them), so
the demo's two evaluations read before → after down the list as its console table does; a training
job's is its last held-out accuracy and steps; a preprocessing job's its clips and failed rows.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any


def _number(value: Any) -> float | None:
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    return float(value) if math.isfinite(value) else None


def headline(kind: str, result: Mapping[str, Any] | None) -> str | None:
    """None while a job has no result, or when the result holds nothing to headline."""
    if not result:
        return None
    if kind == "eval":
        scores = sorted(
            (key.removesuffix("/overall"), value)
            for key, raw in result.items()
            if key.endswith("/overall") and (value := _number(raw)) is not None
        )
        return " · ".join(f"{name} {value:.1f}%" for name, value in scores) or None
    if kind == "train":
        steps, accuracy = _number(result.get("steps")), _number(result.get("val/accuracy"))
        if accuracy is None:
            return None if steps is None else f"{steps:.0f} steps"
        return f"held-out accuracy {accuracy:.3f}" + ("" if steps is None else f" after {steps:.0f} steps")
    if kind == "preprocess":
        clips, failed = _number(result.get("clips")), _number(result.get("failed"))
        if clips is None:
            return None
        return f"{clips:.0f} clips" + ("" if not failed else f", {failed:.0f} failed rows")
    return None
