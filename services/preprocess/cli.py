"""Console front-ends of the preprocessing and cache commands: progress bar, summary, tables.

Every string that comes from the user, a file or an error message is escaped before Rich renders
it: a path holding ``[/bold]`` would otherwise crash the command, and ``[decord]`` would vanish.
"""

from __future__ import annotations

import enum
from pathlib import Path
from typing import TYPE_CHECKING, Any

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
from services.common.text import plain

if TYPE_CHECKING:
    from services.preprocess.dispatch import PreprocessReport

# soft_wrap: long lines (paths, errors) stay whole for logs and grep; the terminal wraps them.
console = Console(stderr=True, soft_wrap=True)
SHOWN_FAILURES = 5


class ExitCode(enum.IntEnum):
    """Exit status of `reelrl preprocess` (documented in docs/frame-store.md)."""

    ok = 0  # every row succeeded
    rows_failed = 1  # some rows failed; OUT and OUT.failed.jsonl are written
    usage = 2  # invalid parameters or settings: nothing was done
    unfinished = 3  # timed out or the worker pool died: nothing was written


def _invalid(exc: ValidationError, what: str) -> None:
    for err in exc.errors():
        field = ".".join(map(str, err["loc"])) or what
        console.print(f"[red]invalid {plain(field)}[/red]: {plain(err['msg'])}")


def preprocess_command(
    dataset: Path,
    out: Path | None,
    given: dict[str, Any],
    workers: int,
    timeout: float | None,
    retry_failed: bool = False,
    overwrite: bool = False,
) -> int:
    from services.common.outputs import OutputTaken
    from services.common.settings import get_settings
    from services.preprocess.dispatch import run_preprocess
    from services.preprocess.local_workers import WorkerPoolDied

    if given.get("nframes") is not None and given.get("fps") is None:
        given["fps"] = None
    try:
        params = VideoParams.model_validate(given)
    except ValidationError as exc:
        _invalid(exc, "parameters")
        return ExitCode.usage
    try:
        settings = get_settings()
    except ValidationError as exc:
        _invalid(exc, "settings")
        return ExitCode.usage
    out = out or dataset.with_name(f"{dataset.stem}.clips.jsonl")
    try:
        with Progress(
            TextColumn("[bold]preprocess"), BarColumn(), MofNCompleteColumn(), TextColumn("clips"),
            TimeElapsedColumn(), TextColumn("eta"), TimeRemainingColumn(), console=console,
        ) as bar:  # fmt: skip
            task = bar.add_task("clips", total=None)
            report = run_preprocess(
                dataset, out, params, workers=workers, timeout_s=timeout, settings=settings,
                retry_failed=retry_failed, overwrite=overwrite,
                progress=lambda done, total: bar.update(task, completed=done, total=total),
            )  # fmt: skip
    except OutputTaken as exc:
        console.print(f"[red]refused[/red]: {plain(str(exc))}")
        return ExitCode.usage
    except (TimeoutError, WorkerPoolDied) as exc:
        console.print(f"[red]preprocess did not finish[/red]: {plain(str(exc))}")
        console.print("nothing was written; clips finished so far are kept and reused by the next run")
        return ExitCode.unfinished
    console.print(plain(summary_line(report)))
    console.print(f"wrote {plain(str(report.out))}")
    if report.failed:
        console.print(f"[yellow]failures in {plain(str(report.failed_out))}[/yellow]")
        for line in report.errors[:SHOWN_FAILURES]:
            console.print(f"  [yellow]{plain(line)}[/yellow]")
        if len(report.errors) > SHOWN_FAILURES:
            console.print(f"  [yellow]and {len(report.errors) - SHOWN_FAILURES} more[/yellow]")
        return ExitCode.rows_failed
    return ExitCode.ok


def summary_line(report: PreprocessReport) -> str:
    """One line: rows ok and failed, then clips by how they were obtained."""
    parts = [f"{report.cached} already cached", f"{report.decoded} decoded"]
    if report.waited:
        parts.append(f"{report.waited} decoded by another run")
    parts.append(f"{report.clip_failures} failed")
    if report.known_failed:
        parts.append(f"{report.known_failed} known failures skipped (--retry-failed to decode them again)")
    return (
        f"{report.samples} samples: {report.succeeded} ok, {report.failed} failed | "
        f"{report.clips} clips: {', '.join(parts)} | {report.elapsed_s:.1f} s"
    )


def stats_command() -> None:
    from services.common.db import session_scope
    from services.common.frames import FrameStore
    from services.common.frames.index import cache_stats

    with session_scope() as session:
        stats = cache_stats(session)
    store = FrameStore.from_settings()
    table = Table(title=f"frame store {plain(str(store.root))}")
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
    out = Console()
    out.print(table)
    for key, error in stats.recent_failures:
        out.print(f"[red]failed[/red] {key[:12]}: {plain(error)}")


def verify_command(repair: bool) -> int:
    """`reelrl cache verify`: 0 when index and store agree (or were repaired), 1 when they do not."""
    from services.common.db import session_scope
    from services.common.frames import FrameStore
    from services.common.frames.verify import verify_store

    store = FrameStore.from_settings()
    with session_scope() as session:
        report = verify_store(session, store, repair=repair)
    out = Console(soft_wrap=True)
    out.print(
        f"frame store {plain(str(store.root))}: {report.ready} ready clips in the index, "
        f"{report.entries} entries on disk"
    )
    for key, problem in sorted(report.missing.items()):
        out.print(f"[red]missing[/red] {key}: ready in the index, {plain(problem)}")
    for key in sorted(report.unrecorded):
        out.print(f"[yellow]unrecorded[/yellow] {key}: complete on disk, not ready in the index")
    for key in sorted(report.orphans):
        out.print(f"[yellow]orphan[/yellow] {key}: on disk, unknown to the index")
    counts = (
        f"{len(report.missing)} missing, {len(report.unrecorded)} unrecorded, {len(report.orphans)} orphans"
    )
    if report.consistent:
        out.print("index and store agree")
        return 0
    if report.repaired:
        out.print(f"repaired: {counts} (missing clips are queued again; orphans removed)")
        return 0
    out.print(f"{counts}; `reelrl cache verify --repair` fixes them")
    return 1
