"""The training page's chart panels: which metric keys (slash-named, SPEC §5) each panel plots.

Patterns are regular expressions understood alike by Python and the browser's JavaScript; a key is
drawn in every panel whose pattern it matches. Metric keys come from the trainer's ``metrics`` events.
"""

from __future__ import annotations

import re
from dataclasses import asdict, dataclass


@dataclass(frozen=True)
class ChartPanel:
    id: str
    title: str
    pattern: str
    unit: str = ""


PANELS: tuple[ChartPanel, ...] = (
    ChartPanel("reward", "Reward", r"^reward/[^/]+$"),
    ChartPanel("accuracy", "Accuracy by problem type", r"^(reward|val)/accuracy/.+$"),
    ChartPanel("val", "Validation", r"^val/[^/]+$"),
    ChartPanel("length", "Response length", r"^response_length/(mean|max|min)$", "tokens"),
    ChartPanel("kl", "KL", r"(^|/)(approx_)?kl[^/]*$"),
    ChartPanel("entropy", "Entropy", r"(^|/)entropy$", "nats"),
    ChartPanel("timing", "Step time by phase", r"^timing/", "s"),
    ChartPanel("throughput", "Throughput", r"^perf/tokens_per_s$", "tokens/s"),
)


def panels_for(keys: list[str]) -> dict[str, list[str]]:
    """Panel id → the keys it plots (the browser does the same for keys that arrive live)."""
    compiled = [(p.id, re.compile(p.pattern)) for p in PANELS]
    return {pid: [k for k in keys if rx.search(k)] for pid, rx in compiled}


def panels_json() -> list[dict[str, str]]:
    return [asdict(p) for p in PANELS]
