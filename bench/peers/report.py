"""The peer bench's figures from each run's metrics rows (ReelRL's metrics.jsonl, or a driver's rows in
the same names): the held-out curve on a training-minutes axis, the per-run summary, the markdown
table and the curves figure. Pure functions of the rows, so the same code reads every framework.

Minutes count training only, on every side: from the first step to the validation, with the time spent
validating taken out (each side validates with its own engine; that is the bench's measurement, not the
framework's training). A driver writes that as ``perf/train_s``, and so does ReelRL's loop (its
``perf/elapsed_s`` includes its validations). For rows without it (runs of older ReelRL code) a
validation's seconds are estimated as that step's gap in ``perf/elapsed_s`` less its ``timing/step_s``
less the usual per-step overhead (the median of the same gap on steps without a validation), and
subtracted.
"""

from __future__ import annotations

import statistics
from dataclasses import dataclass
from pathlib import Path
from typing import Any

TARGET = 0.9
CHANCE = 0.25


def train_seconds(rows: list[dict[str, Any]]) -> dict[int, float]:
    """Training seconds at the end of every step (validation left out), by step."""
    steps = [r for r in rows if r.get("step", 0) > 0 and "perf/elapsed_s" in r]
    if all("perf/train_s" in r for r in steps):
        return {r["step"]: r["perf/train_s"] for r in steps}
    gaps, previous = [], 0.0
    for r in steps:
        gaps.append(r["perf/elapsed_s"] - previous - r.get("timing/step_s", 0.0))
        previous = r["perf/elapsed_s"]
    plain = [g for g, r in zip(gaps, steps, strict=True) if "val/accuracy" not in r]
    overhead = statistics.median(plain) if plain else 0.0
    out, validating = {}, 0.0
    for gap, r in zip(gaps, steps, strict=True):
        if "val/accuracy" in r:
            validating += max(gap - overhead, 0.0)
        out[r["step"]] = r["perf/elapsed_s"] - validating
    return out


def curve(rows: list[dict[str, Any]]) -> list[tuple[int, float, float]]:
    """(step, training minutes, held-out accuracy) of every validation, step 0's at minute 0."""
    seconds = train_seconds(rows)
    return [(r["step"], _at(seconds, r["step"]) / 60, r["val/accuracy"]) for r in rows if "val/accuracy" in r]


def within(rows: list[dict[str, Any]], max_minutes: float | None) -> list[dict[str, Any]]:
    """The rows a run would have left had it stopped after ``max_minutes`` of training (the bench's
    wall-clock budget, applied alike to a run that kept going)."""
    if max_minutes is None:
        return rows
    seconds = train_seconds(rows)
    return [r for r in rows if _at(seconds, r.get("step", 0)) <= max_minutes * 60]


def _at(seconds: dict[int, float], step: int) -> float:
    """Training seconds at ``step``: 0 before the first; a later step without a time is an error, not
    minute 0."""
    return 0.0 if step == 0 else seconds[step]


@dataclass
class Summary:
    """One run's row of the table."""

    framework: str
    form: str
    steps: int
    step_s: float | None  # mean optimizer-step seconds, the first two steps left out
    gen_tokens_per_s: float | None  # generated (completion) tokens per second of step time
    accuracy: float | None  # held-out accuracy at the last validation
    minutes_to_target: float | None  # training minutes until held-out accuracy first reached TARGET
    minutes: float  # training minutes of the whole run
    note: str = ""
    reason: str | None = None  # why the framework did not run (then every figure is None)

    def markdown(self) -> str:
        note = f" {self.note}" if self.note else ""
        if self.reason is not None:
            return f"| {self.framework}{note} | {self.form} | – | – | – | cannot run: {self.reason} |"
        reached = (
            f"**{self.minutes_to_target:.2f}**"
            if self.minutes_to_target is not None
            else f"not reached ({self.minutes:.1f} min, {self.steps} steps)"
        )
        step = f"{self.step_s:.3f}" if self.step_s is not None else "–"
        tokens = f"{self.gen_tokens_per_s:,.0f}" if self.gen_tokens_per_s is not None else "–"
        accuracy = f"{self.accuracy:.3f} at {self.steps}" if self.accuracy is not None else "–"
        return f"| {self.framework}{note} | {self.form} | {step} | {tokens} | {accuracy} | {reached} |"


def summarise(
    framework: str, form: str, rows: list[dict[str, Any]], completions: int, note: str = ""
) -> Summary:
    """The table's figures of one run; ``completions`` per step (group × prompts) turns the mean
    response length into generated tokens."""
    timed = [r for r in rows if "timing/step_s" in r]
    steady = timed[2:] or timed
    step_s = statistics.mean(r["timing/step_s"] for r in steady) if steady else None
    rates = [
        r["response_length/mean"] * completions / r["timing/step_s"]
        for r in steady
        if "response_length/mean" in r
    ]
    vc = curve(rows)
    reached = next((m for _, m, a in vc if a >= TARGET), None)
    seconds = train_seconds(rows)
    return Summary(
        framework=framework,
        form=form,
        steps=max((r["step"] for r in timed), default=0),
        step_s=step_s,
        gen_tokens_per_s=statistics.mean(rates) if rates else None,
        accuracy=vc[-1][2] if vc else None,
        minutes_to_target=reached,
        minutes=max(seconds.values(), default=0.0) / 60,
        note=note,
    )


HEADER = (
    "| framework | input form | step s | generated tokens/s | held-out accuracy at N steps | "
    f"minutes to {TARGET} held-out |\n|---|---|---|---|---|---|"
)


def table(summaries: list[Summary]) -> str:
    return "\n".join([HEADER, *(s.markdown() for s in summaries)])


def plot(curves: dict[str, list[tuple[int, float, float]]], path: Path) -> None:
    """Held-out accuracy against training minutes, one line per framework and input form."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7, 4))
    for name, points in curves.items():
        ax.plot([m for _, m, _ in points], [a for _, _, a in points], marker="o", ms=3, label=name)
    ax.axhline(TARGET, color="grey", ls="--", lw=0.8, label=f"target {TARGET}")
    ax.axhline(CHANCE, color="grey", ls=":", label="chance")
    ax.set(
        xlabel="training minutes (validation excluded)",
        ylabel="held-out accuracy (greedy)",
        ylim=(-0.02, 1.02),
        title="direction task, pure GRPO from one warm-started checkpoint",
    )
    ax.legend(fontsize=8)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
