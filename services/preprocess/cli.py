"""Console front-ends of the preprocessing commands: progress bar, summary, stats table."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from pydantic import ValidationError
from rich.console import Console
from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    Progress,
    TextColumn,
    TimeElapsedColumn,
    TimeRemainingColumn,
)
from rich.table import Table

from services.common.frames import VideoParams

console = Console(stderr=True)


def preprocess_command(
    dataset: Path, out: Path | None, given: dict[str, Any], workers: int, timeout: float | None
) -> int:
    from services.preprocess.dispatch import run_preprocess

    if given.get("nframes") is not None and given.get("fps") is None:
        given["fps"] = None
    try:
        params = VideoParams.model_validate(given)
    except ValidationError as exc:
        for err in exc.errors():
            field = ".".join(map(str, err["loc"])) or "parameters"
            console.print(f"[red]invalid {field}[/red]: {err['msg']}")
        return 2
    out = out or dataset.with_name(f"{dataset.stem}.clips.jsonl")
    with Progress(
        TextColumn("[bold]preprocess"), BarColumn(), MofNCompleteColumn(), TextColumn("clips"),
        TimeElapsedColumn(), TextColumn("eta"), TimeRemainingColumn(), console=console,
    ) as bar:  # fmt: skip
        task = bar.add_task("clips", total=None)
        report = run_preprocess(
            dataset, out, params, workers=workers, timeout_s=timeout,
            progress=lambda done, total: bar.update(task, completed=done, total=total),
        )  # fmt: skip
    console.print(
        f"{report.samples} samples: {report.succeeded} ok, {report.failed} failed | {report.clips} clips: "
        f"{report.cached} already cached, {report.decoded} decoded, {report.clip_failures} failed | "
        f"{report.elapsed_s:.1f} s"
    )
    console.print(f"wrote {report.out}")
    if report.failed:
        console.print(f"[yellow]failures in {report.failed_out}[/yellow]")
        for line in report.errors[:5]:
            console.print(f"  [yellow]{line}[/yellow]")
    return 0


def stats_command() -> None:
    from services.common.db import session_scope
    from services.common.frames import FrameStore
    from services.common.frames.index import cache_stats

    with session_scope() as session:
        stats = cache_stats(session)
    store = FrameStore.from_settings()
    table = Table(title=f"frame store {store.root}")
    table.add_column("metric")
    table.add_column("value", justify="right")
    table.add_row("video assets", str(stats.assets))
    for status, n in sorted(stats.clips_by_status.items()):
        table.add_row(f"clips {status}", str(n))
    table.add_row("ready bytes", f"{stats.ready_bytes / 2**20:.1f} MiB")
    if stats.ready_frames:
        table.add_row("bytes per frame (uint8)", f"{stats.ready_bytes / stats.ready_frames:,.0f}")
    table.add_row("requests / hits", f"{stats.requests} / {stats.hits}")
    table.add_row("hit ratio", f"{stats.hit_ratio:.1%}")
    Console().print(table)
    for key, error in stats.recent_failures:
        Console().print(f"[red]failed[/red] {key[:12]}: {error}")
