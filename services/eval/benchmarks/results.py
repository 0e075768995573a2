"""Per-item results and benchmark summaries (what aggregation produces and outputs serialise)."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict, Field


class ItemResult(BaseModel):
    """One sample's score: ``accuracy`` in [0, 1] from the reward library (or the judge's verdict read by
    it). A missing prediction or an unscorable item scores 0 and says why."""

    model_config = ConfigDict(frozen=True)

    id: str
    accuracy: float = Field(ge=0.0, le=1.0)
    format: float = 0.0
    response: str | None = None
    extracted: Any = None
    problem_type: str | None = None
    missing: bool = False
    error: str | None = None
    judged: bool = False
    # Benchmark-specific per-item figures (e.g. STVG's tIoU and vIoU), computed by the adapter.
    details: dict[str, Any] = Field(default_factory=dict)


class Cell(BaseModel):
    """One score of a breakdown: ``score`` in percent over ``count`` items (or groups)."""

    score: float
    count: int


class Summary(BaseModel):
    """A benchmark's result: ``overall`` (percent) is what the benchmark reports as its headline figure."""

    benchmark: str
    metric: str = Field(description="what `overall` is, e.g. 'accuracy' or 'M-Avg (mean of task accuracies)'")
    overall: float
    count: int = Field(description="samples evaluated")
    metrics: dict[str, float] = Field(default_factory=dict, description="named headline figures, percent")
    breakdowns: dict[str, dict[str, Cell]] = Field(default_factory=dict)
    missing: list[str] = Field(default_factory=list, description="ids without a prediction (scored 0)")
    errors: dict[str, str] = Field(default_factory=dict, description="id → why it could not be scored (0)")
    judged: int = Field(0, description="items whose accuracy is an LLM judge's verdict")
    notes: list[str] = Field(default_factory=list)
    reader: str = Field(
        "official",
        description="the reader `overall` uses: 'official' (the benchmark's own rule and aggregation) "
        "or 'robust' (the reward library's reader, the one training rewards use)",
    )
    robust_overall: float | None = Field(
        None, description="`overall` with the robust reader and plain aggregation (no official rules)"
    )
    unreadable: int = Field(0, description="answers the official reader could not read (scored wrong)")
    details: dict[str, Any] = Field(
        default_factory=dict,
        description="official-protocol bookkeeping: `official_random_items` (items the official code "
        "would guess at random; scored wrong here), `official_left_out` (items outside the official "
        "denominator), `official_reader` (its names)",
    )
