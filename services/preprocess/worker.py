"""What a preprocessing worker does for one clip key: claim, decode, store, record. Idempotent."""

from __future__ import annotations

import errno
import logging
import os
import socket
import threading
import time
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path

from sqlalchemy.exc import OperationalError

from services.common.db import session_scope
from services.common.frames import DecodeError, DecodeTimeout, FrameStore, VideoParams, clip_key, decode_clip
from services.common.frames.decoders import failure_reason
from services.common.frames.hashing import content_hash
from services.common.frames.index import Claim, ClaimToken, claim_clip, complete_clip, fail_clip, renew_lease
from services.common.settings import Settings, get_settings

#: OS errors of the machine, not of the video: recorded as retryable (the next run decodes the clip)
TRANSIENT_ERRNOS = frozenset(
    {errno.ENOSPC, errno.EDQUOT, errno.EIO, errno.ENOMEM, errno.EAGAIN, errno.ETIMEDOUT}
)
TRANSIENT_NOTE = " (a failure of the machine, not the video: the next run decodes it again)"

log = logging.getLogger(__name__)


@dataclass
class ClipOutcome:
    key: str
    # ready | failed | missing | busy (another worker holds a live lease: come back at ``lease_until``)
    # | lost (this worker's claim lapsed or was taken over before it could record the outcome)
    outcome: str
    error: str | None = None
    # The decoder hung: its thread cannot be stopped, so the process should be replaced.
    recycle_process: bool = False
    lease_until: datetime | None = None


def worker_id() -> str:
    return f"{socket.gethostname()}:{os.getpid()}:{threading.get_ident()}"


class _Lease:
    """Renews the clip's lease in the background while the clip is being decoded."""

    def __init__(self, token: ClaimToken, settings: Settings) -> None:
        self._token, self._settings = token, settings
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name=f"lease-{token.key[:8]}", daemon=True)

    def _run(self) -> None:
        period = max(self._settings.clip_lease_s / 3, 0.2)
        while not self._stop.wait(period):
            with session_scope() as session:
                if not renew_lease(session, self._token, self._settings.clip_lease_s):
                    log.warning("clip %s: lost the claim (lease lapsed or taken over)", self._token.key)
                    return

    def __enter__(self) -> _Lease:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(timeout=5)


def _source_path(paths: list[str], expected_hash: str) -> Path:
    """A known path of the asset (a file or a frame folder) that still holds the same bytes."""
    reasons = []
    for raw in paths:
        path = Path(raw)
        if not (path.is_file() or path.is_dir()):
            reasons.append(f"{raw}: missing")
            continue
        try:
            current = content_hash(path)
        except DecodeError as exc:  # a frame folder emptied or renamed since it was queued
            reasons.append(f"{raw}: {exc}")
            continue
        if current != expected_hash:
            reasons.append(f"{raw}: content changed since it was queued")
            continue
        return path
    raise DecodeError("no usable source file: " + "; ".join(reasons))


def process_clip(key: str, *, settings: Settings | None = None, worker: str | None = None) -> ClipOutcome:
    """Claim, decode, store and record one clip. Never waits for another worker: a clip claimed by a
    live worker returns ``busy`` with its lease expiry, and the caller comes back later."""
    settings = settings or get_settings()
    worker = worker or worker_id()
    store = FrameStore.from_settings()
    with session_scope() as session:
        claim = claim_clip(session, key, worker, settings.clip_lease_s, settings.clip_max_attempts)
        if claim.outcome is Claim.busy:
            return ClipOutcome(key, "busy", lease_until=claim.lease_until)
        if claim.outcome is not Claim.claimed:
            error = claim.clip.error if claim.clip is not None else "no such clip"
            return ClipOutcome(key, claim.outcome.value, error)
        token = claim.token
        clip = claim.clip
        paths, source_hash, canonical = list(clip.asset.paths), clip.asset.content_hash, clip.params

    # From the claim on, whatever goes wrong with this clip fails it now, with the exception's type and
    # message: a clip left "running" would wait out its lease and be retried for nothing. Only a worker
    # that dies (or a database that cannot record the failure) leaves it to the lease.
    recycle = retryable = False
    try:
        params = VideoParams.from_canonical(canonical)
        if clip_key(source_hash, params) != key:
            raise DecodeError("index row is inconsistent: key does not match its params")
        with _Lease(token, settings):
            if store.has(key):  # stored by a worker that died before recording it
                _, meta = store.load(key, params)
            else:
                source = _source_path(paths, source_hash)
                t0 = time.perf_counter()
                frames, meta = decode_clip(
                    source,
                    params,
                    decoders=settings.decoders,
                    threads=settings.decode_threads,
                    timeout_s=settings.decode_timeout_s,
                )
                meta["source_hash"], meta["source_path"] = source_hash, str(source)
                t1 = time.perf_counter()
                store.put(key, frames, meta)
                meta["timings"]["write_s"] = time.perf_counter() - t1
                meta["timings"]["total_s"] = time.perf_counter() - t0
            nbytes = meta["num_frames"] * meta["height"] * meta["width"] * 3
            with session_scope() as session:
                recorded = complete_clip(session, token, meta, nbytes)
        if not recorded:
            return _lost(token, "ready")
        return ClipOutcome(key, "ready")
    except DecodeTimeout as exc:
        error, recycle, retryable = str(exc), True, True
    except (DecodeError, ValueError) as exc:
        error = str(exc)
    except OperationalError:
        raise  # the database, not the clip: the task retries (preprocess.tasks)
    except OSError as exc:
        # a full disk or a failing one says nothing about the video: the next run tries it again
        retryable = exc.errno in TRANSIENT_ERRNOS
        if not retryable:
            log.exception("clip %s: unexpected error", key)
        error = failure_reason(exc)
    except Exception as exc:
        log.exception("clip %s: unexpected error", key)
        error = failure_reason(exc)
    if retryable:
        error += TRANSIENT_NOTE
    log.warning("clip %s failed: %s", key, error)
    with session_scope() as session:
        recorded = fail_clip(session, token, error, retryable=retryable)
    if not recorded:
        return ClipOutcome(key, "lost", error, recycle_process=recycle)
    return ClipOutcome(key, "failed", error, recycle_process=recycle)


def _lost(token: ClaimToken, outcome: str) -> ClipOutcome:
    # The entry (if any) is in the store; whoever holds the clip now records it.
    log.warning("clip %s: %s but the claim was lost before it could be recorded", token.key, outcome)
    return ClipOutcome(token.key, "lost")
