"""`reelrl preprocess`: register every video of a dataset, queue its clips, wait, write the results."""

from __future__ import annotations

import logging
import os
import time
import traceback
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path

from kombu.exceptions import KombuError
from pydantic import ValidationError

from services.common.celery_app import make_celery, queue_for
from services.common.db import ClipStatus, session_scope
from services.common.frames import FrameStore, VideoParams, clip_key
from services.common.frames.hashing import content_hash, source_size
from services.common.frames.index import Requested, register_asset, request_clip, statuses
from services.common.outputs import (
    OutputTaken,
    check_output_file,
    check_usable,
    forget_output_file,
    record_output_file,
)
from services.common.settings import Settings, get_settings
from services.preprocess.dataset import (
    InputError,
    Row,
    failed_path,
    read_rows,
    resolve_video,
    write_jsonl_atomic,
)
from services.preprocess.local_workers import LocalWorkers, worker_log
from services.preprocess.tasks import CLIP_TASK

log = logging.getLogger(__name__)

TASK_MODULE = "services.preprocess.tasks"

TERMINAL = {ClipStatus.ready, ClipStatus.failed}


@dataclass
class PreprocessReport:
    samples: int = 0
    succeeded: int = 0
    failed: int = 0
    clips: int = 0
    cached: int = 0  # clips already in the store when the command started
    decoded: int = 0  # queued by this run and decoded
    waited: int = 0  # queued by another request (a concurrent run) and decoded while this one waited
    clip_failures: int = 0  # failed during this run
    known_failed: int = 0  # failed in an earlier run and skipped (``retry_failed`` decodes them again)
    elapsed_s: float = 0.0
    out: Path | None = None
    failed_out: Path | None = None
    errors: list[str] = field(default_factory=list)


ProgressFn = Callable[[int, int], None]  # (finished clips, total clips)


def _plan(rows: list[Row], dataset_dir: Path, base: VideoParams, settings: Settings) -> dict[int, list]:
    """Per row: a list of (video_path, params, key) or an error string, hashing each file once."""
    hashes: dict[tuple[Path, int, int], str] = {}
    plan: dict[int, list] = {}
    for i, row in enumerate(rows):
        if row.error:
            continue
        try:
            params = base.with_overrides(row.data.get("video_params"))
        except ValidationError as exc:
            row.error = f"line {row.line}: invalid video_params: {_one_line(exc)}"
            continue
        items = []
        for raw in row.videos:
            try:
                path = resolve_video(raw, dataset_dir, settings.data_roots)
            except InputError as exc:
                row.error = f"line {row.line}: {exc}"
                break
            st = path.stat()
            stamp = (path, st.st_size, st.st_mtime_ns)
            if stamp not in hashes:
                hashes[stamp] = content_hash(path)
            size = source_size(path)
            items.append((path, params, clip_key(hashes[stamp], params), hashes[stamp], size))
        if row.error is None:
            plan[i] = items
    return plan


def _one_line(exc: ValidationError) -> str:
    parts = []
    for e in exc.errors():
        msg = e["msg"].removeprefix("Value error, ")
        parts.append(f"{'.'.join(map(str, e['loc']))}: {msg}" if e["loc"] else msg)
    return "; ".join(parts)


def run_preprocess(
    dataset: Path,
    out: Path,
    params: VideoParams,
    *,
    workers: int = 1,
    timeout_s: float | None = None,
    progress: ProgressFn | None = None,
    settings: Settings | None = None,
    retry_failed: bool = False,
    overwrite: bool = False,
    job_id: str | None = None,
) -> PreprocessReport:
    """Preprocess every video of ``dataset``; OUT gets the rows plus ``clips`` and ``clip_params``
    (each clip's canonical decode parameters, aligned with ``clips``), failures a side file.

    ``workers`` > 0 starts that many local worker processes for the run (only if some clip needs
    decoding); 0 relies on workers already consuming the broker's ``preprocess`` queue
    (`reelrl worker preprocess`). A clip that failed before (same bytes, same parameters) is not
    decoded again unless ``retry_failed``.

    OUT and its failures file may only replace files an earlier preprocess run wrote there
    (:mod:`services.common.outputs`): anything else raises ``OutputTaken`` before any work, unless
    ``overwrite``. ``job_id`` is recorded beside the outputs.
    """
    settings = settings or get_settings()
    started = time.monotonic()
    check_not_in_place(dataset, out)
    outputs = (out.resolve(), failed_path(out.resolve()))
    _check_outputs(outputs, overwrite)
    report = PreprocessReport()
    rows = read_rows(dataset)
    report.samples = len(rows)
    plan = _plan(rows, dataset.resolve().parent, params, settings)

    # What this run's first request of each clip found: it decides whose decode a clip counts as.
    found: dict[str, Requested] = {}
    store = FrameStore(settings.resolved_frame_root)
    with session_scope() as session:
        for items in plan.values():
            for path, p, key, chash, size in items:
                asset = register_asset(session, chash, size, str(path))
                session.flush()
                request = request_clip(
                    session, key, asset, p.canonical(), present=store.has, retry_failed=retry_failed
                )
                found.setdefault(key, request.outcome)
    keys = list(found)
    report.clips = len(keys)

    state = _wait_all(make_celery(settings), keys, workers, settings, timeout_s, progress)
    _count(report, found, state)

    ok_rows, bad_rows = [], []
    for i, row in enumerate(rows):
        if row.error is None and i in plan:
            errors = [
                _with_path(path, state[key][1])
                + (KNOWN_FAILED_HINT if found[key] is Requested.known_failed else "")
                for path, _, key, _, _ in plan[i]
                if state[key][0] != ClipStatus.ready
            ]
            if errors:
                row.error = f"line {row.line}: " + "; ".join(errors)
        if row.error is None:
            items = plan.get(i, [])
            clips = [key for _, _, key, _, _ in items]
            ok_rows.append(
                {**row.data, "clips": clips, "clip_params": [p.canonical() for _, p, _, _, _ in items]}
            )
        else:
            bad_rows.append({**row.data, "error": row.error})
            report.errors.append(row.error)
    _check_outputs(outputs, overwrite)  # again: something may have appeared there while clips decoded
    if (out.resolve(), failed_path(out.resolve())) != outputs:
        # a folder on the way became a link meanwhile: the output would land where nothing checked it
        raise OutputTaken(
            outputs[0], f"now resolves to {out.resolve()}", "Run it again; nothing was written."
        )
    report.succeeded = write_jsonl_atomic(outputs[0], ok_rows)
    record_output_file(outputs[0], OUTPUT_KIND, job_id)
    report.failed = len(bad_rows)
    report.out = out
    report.failed_out = failed_path(out)
    if bad_rows:
        write_jsonl_atomic(outputs[1], bad_rows)
        record_output_file(outputs[1], OUTPUT_KIND, job_id)
    elif outputs[1].exists():  # an earlier run's failures (checked above): none are left
        outputs[1].unlink()
        forget_output_file(outputs[1])
    report.elapsed_s = time.monotonic() - started
    return report


OUTPUT_KIND = "preprocess"
OVERWRITE_HINT = (
    "Name a new output path or move that file away (`reelrl preprocess --overwrite` replaces it)."
)


def check_not_in_place(dataset: Path, out: Path) -> None:
    """Raises :class:`OutputTaken` if writing OUT or its failures file would replace DATASET (the same
    path, a link to it, or another name of its bytes), whatever ``--overwrite`` says: re-running a
    run's failures file into the same OUT is the natural mistake."""
    source = dataset.resolve()
    for output in (out.resolve(), failed_path(out.resolve())):
        try:
            same = output == source or (output.exists() and os.path.samefile(output, source))
        except OSError:
            same = False  # an output that cannot even be looked at is refused by its own check
        if same:
            raise OutputTaken(
                output, f"is the dataset being read ({dataset})",
                "Name another --out: the run writes OUT and OUT.failed.jsonl beside it.",
            )  # fmt: skip


def _check_outputs(paths: tuple[Path, ...], overwrite: bool) -> None:
    for path in paths:
        if not overwrite:
            check_output_file(path, OUTPUT_KIND, hint=OVERWRITE_HINT)
            continue
        check_usable(path, "Name another output path.")
        if path.is_dir() and not path.is_symlink():  # --overwrite replaces a file, never a folder
            raise OutputTaken(path, "is a folder", "Name the output JSONL file.")


def _with_path(path: Path, error: str | None) -> str:
    """The clip's error naming the row's file once (a decode error starts with the file already)."""
    error = error or "failed"
    return error if error.startswith(str(path)) else f"{path}: {error}"


KNOWN_FAILED_HINT = " (failed in an earlier run; --retry-failed decodes it again)"


def _count(report: PreprocessReport, found: dict[str, Requested], state: dict) -> None:
    """Each clip once, by what this run's first request found and how the clip ended."""
    for key, request in found.items():
        status = state[key][0]
        if request is Requested.cached:
            report.cached += 1
        elif status == ClipStatus.ready:
            # pending, or a known failure that a concurrent `--retry-failed` run decoded meanwhile
            report.decoded += request is Requested.queued
            report.waited += request is not Requested.queued
        elif request is Requested.known_failed:
            report.known_failed += 1
        else:
            report.clip_failures += 1


def broker_fault(exc: BaseException) -> bool:
    """Whether ``exc`` is the broker being away rather than a fault of ours: kombu's and the OS's
    connection errors, and the AttributeError kombu's Redis transport raises from a channel a broker
    restart closed under it (``_connparams``: 'NoneType' object has no attribute 'client'; kombu
    issues #83, #582, #659 are the same race)."""
    if isinstance(exc, KombuError | OSError):
        return True
    if isinstance(exc, AttributeError):
        frames = traceback.extract_tb(exc.__traceback__)
        return bool(frames) and any(
            f"{os.sep}{lib}{os.sep}" in frames[-1].filename for lib in ("kombu", "redis")
        )
    return False


def _send_clip(celery, key: str, fresh: bool) -> None:
    """Queue one clip; ``fresh``: on a connection of its own, not the pool's (after a broker fault the
    pooled one may hold a dead channel)."""
    if not fresh:
        celery.send_task(CLIP_TASK, args=[key], queue=queue_for(CLIP_TASK))
        return
    with celery.connection_for_write() as connection:
        celery.send_task(CLIP_TASK, args=[key], queue=queue_for(CLIP_TASK), connection=connection)


def _wait_all(celery, keys, workers, settings, timeout_s, progress):
    """Queue the clips and poll the index until every clip is ready or failed.

    A clip is queued once. It is queued again only if it looks abandoned: running under a lapsed
    lease (its worker died and the broker did not redeliver, as the embedded one cannot), or still
    queued while the whole pool has been idle for several lease periods (a lost message). Duplicates
    are harmless: the claim lets one worker decode. A long queue is not "idle", so it is not flooded.
    """
    deadline = None if timeout_s is None else time.monotonic() + timeout_s
    sent: dict[str, float] = {}
    broker_away = fresh = False
    last_change, last_snapshot = time.monotonic(), None
    with session_scope() as session:
        state = statuses(session, keys)
    if all(state[k][0] in TERMINAL for k in keys):
        if progress:
            progress(len(keys), len(keys))
        return state  # nothing to decode: no worker to start
    with LocalWorkers(
        workers, queue="preprocess", include=TASK_MODULE, log_file=worker_log(settings)
    ) as pool:
        while True:
            pool.check_alive()
            with session_scope() as session:
                state = statuses(session, keys)
            now_wall, now = datetime.now(UTC), time.monotonic()
            snapshot = tuple(state[k][0] for k in keys)
            if snapshot != last_snapshot:
                last_change, last_snapshot = now, snapshot
            idle = now - last_change > settings.clip_lease_s * 4 and ClipStatus.running not in snapshot
            for key in keys:
                status, _, lease = state[key]
                recently = now - sent.get(key, -1e9) < settings.clip_lease_s
                orphaned = (
                    status == ClipStatus.running and lease is not None and lease < now_wall and not recently
                )
                lost = status == ClipStatus.queued and (key not in sent or idle)
                if orphaned or lost:
                    try:
                        _send_clip(celery, key, fresh=fresh)
                    except Exception as exc:
                        if not broker_fault(exc):
                            raise
                        fresh = True  # the pooled connection may hold a channel the restart closed
                        # the broker is away (restarting): the clip stays unsent and is tried again on
                        # the next pass; only the run's timeout ends the wait
                        if not broker_away:
                            log.warning("the broker refused a clip (sent again once it is back): %s", exc)
                        broker_away = True
                        break
                    broker_away = False
                    sent[key] = now
            if idle and not broker_away:  # a refused re-send is tried again on the next pass
                last_change = now
            done = sum(1 for k in keys if state[k][0] in TERMINAL)
            if progress:
                progress(done, len(keys))
            if done == len(keys):
                return state
            if deadline is not None and now > deadline:
                raise TimeoutError(
                    f"{len(keys) - done} of {len(keys)} clips unfinished after {timeout_s:g} s"
                )
            time.sleep(0.25)
