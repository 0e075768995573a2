"""`reelrl cache verify`: the index checked against the disk, and the disk against the index.

Three kinds of disagreement, each reported and, with ``repair``, fixed:

- **missing**: the index says ready, the entry is absent or unusable. Repair removes what is left of the
  entry and queues the clip again (the next request decodes it).
- **unrecorded**: a complete entry whose index row says queued or failed (a worker stored it and died
  before recording it). Repair records it as ready. Rows being decoded (running) are left alone.
- **orphans**: entry folders that no index row knows. Repair deletes them.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field

from sqlalchemy import select, update
from sqlalchemy.orm import Session

from services.common.db.models import ClipStatus, FrameClip
from services.common.frames.index import ready_values, record_source_facts
from services.common.frames.params import check_params
from services.common.frames.store import META_FILE, FrameStore


@dataclass
class VerifyReport:
    ready: int = 0  # ready rows checked
    entries: int = 0  # entry folders on disk
    missing: dict[str, str] = field(default_factory=dict)  # key → what is wrong with its entry
    unrecorded: list[str] = field(default_factory=list)
    orphans: list[str] = field(default_factory=list)
    repaired: bool = False

    @property
    def consistent(self) -> bool:
        return not (self.missing or self.unrecorded or self.orphans)


def verify_store(session: Session, store: FrameStore, *, repair: bool = False) -> VerifyReport:
    report = VerifyReport()
    rows = {key: status for key, status in session.execute(select(FrameClip.key, FrameClip.status))}
    for key, status in rows.items():
        if status == ClipStatus.ready:
            report.ready += 1
            problem = store.entry_problem(key)
            if problem:
                report.missing[key] = problem
    folders = store.entry_folders()
    report.entries = len(folders)
    for key in folders:
        status = rows.get(key)
        if status is None:
            report.orphans.append(key)
        elif status in (ClipStatus.queued, ClipStatus.failed) and _usable(session, store, key):
            report.unrecorded.append(key)
    if repair:
        _repair(session, store, report)
    return report


def _usable(session: Session, store: FrameStore, key: str) -> bool:
    """The entry is complete and holds the parameters its index row asks for."""
    if store.entry_problem(key):
        return False
    meta = json.loads((store.path_for(key) / META_FILE).read_text())
    params = session.scalar(select(FrameClip.params).where(FrameClip.key == key))
    try:
        check_params(key, meta.get("params", {}), params)
    except ValueError:
        return False
    return True


def _repair(session: Session, store: FrameStore, report: VerifyReport) -> None:
    for key in report.missing:
        store.remove(key)
        session.execute(
            update(FrameClip)
            .where(FrameClip.key == key, FrameClip.status == ClipStatus.ready)
            .values(status=ClipStatus.queued, error=None, attempts=0, worker=None, lease_until=None)
            .execution_options(synchronize_session=False)
        )
    for key in report.unrecorded:
        meta = json.loads((store.path_for(key) / META_FILE).read_text())
        result = session.execute(
            update(FrameClip)
            .where(FrameClip.key == key, FrameClip.status.in_([ClipStatus.queued, ClipStatus.failed]))
            .values(**ready_values(meta, int(meta["nbytes"])))
            .execution_options(synchronize_session=False)
        )
        if result.rowcount == 1:
            record_source_facts(session, key, meta)
    for key in report.orphans:
        store.remove(key)
    session.commit()
    report.repaired = True
