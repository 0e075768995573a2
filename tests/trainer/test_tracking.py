"""Step metrics reach every configured logger: metrics.jsonl, and TensorBoard's event files (read back
with TensorBoard's own reader)."""

from __future__ import annotations

from pathlib import Path

from services.trainer.tracking import MetricsLogger, read_metrics


def test_tensorboard_and_jsonl_get_every_step(tmp_path: Path) -> None:
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    logger = MetricsLogger(tmp_path, name="t", config={}, loggers=["jsonl", "tensorboard"])
    logger.log(1, {"reward/accuracy": 0.25, "timing/gen_s": 1.5})
    logger.log(2, {"reward/accuracy": 0.75, "timing/gen_s": 0.5})
    logger.finish("succeeded")

    assert [r["step"] for r in read_metrics(tmp_path / "metrics.jsonl")] == [1, 2]
    events = EventAccumulator(str(tmp_path / "tensorboard"))
    events.Reload()
    assert set(events.Tags()["scalars"]) == {"reward/accuracy", "timing/gen_s"}
    accuracy = [(e.step, e.value) for e in events.Scalars("reward/accuracy")]
    assert accuracy == [(1, 0.25), (2, 0.75)]
