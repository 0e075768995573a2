"""Outputs never overwrite inputs: a job or command writes its output file only where nothing exists yet,
or over a file that the same kind of run wrote there before and nobody changed since.

A job names its output path on the server, so without this rule anyone allowed to submit a job could
point its output at a video, a dataset or a model's ``config.json`` and have it replaced. What a run
wrote is recorded (``output_files``: resolved path, kind, sha256 of the bytes written); an existing file
is replaceable only while its bytes still hash to the recorded digest. Everything else is refused with
:class:`OutputTaken`, naming the path and the fix.
"""

from __future__ import annotations

import hashlib
import os
from pathlib import Path

from sqlalchemy.exc import IntegrityError

from services.common.db import session_scope
from services.common.db.models import OutputFile, utcnow


class OutputTaken(ValueError):
    """An output path names an existing file this kind of run did not write (or that changed since)."""

    def __init__(self, path: Path, why: str, hint: str, *, overwritten: bool = True) -> None:
        self.path = path
        super().__init__(f"{path}: {why}{'; it would be overwritten' if overwritten else ''}. {hint}")


def _key(path: Path) -> str:
    return hashlib.sha256(str(path).encode("utf-8", "surrogatepass")).hexdigest()


def file_sha256(path: Path) -> str:
    with open(path, "rb") as fh:
        return hashlib.file_digest(fh, "sha256").hexdigest()


def check_output_file(path: Path, kind: str, *, hint: str = "Choose a new output path.") -> None:
    """Raises :class:`OutputTaken` unless ``path`` is free for a ``kind`` run's output: absent, or a
    regular file holding exactly what a ``kind`` run last wrote there. ``path`` must be resolved."""
    check_usable(path, hint)
    if not path.exists() and not path.is_symlink():
        return
    if path.is_symlink() or not path.is_file():
        raise OutputTaken(path, "exists and is not a regular file", hint)
    with session_scope() as session:
        row = session.get(OutputFile, _key(path))
        recorded = None if row is None else (row.kind, row.sha256)
    if recorded is None:
        raise OutputTaken(path, f"exists and was not written by a {kind} run", hint)
    if recorded[0] != kind:
        raise OutputTaken(path, f"was written by a {recorded[0]} run, not a {kind} run", hint)
    if file_sha256(path) != recorded[1]:
        raise OutputTaken(path, f"changed since a {kind} run wrote it", hint)


def check_usable(path: Path, hint: str) -> None:
    """Raises :class:`OutputTaken` for a path that cannot name a file: too long, or under an existing
    file (``data.jsonl/x``), which would fail only when the run writes, after all its work."""
    try:
        path.lstat()
    except FileNotFoundError:
        pass
    except NotADirectoryError:
        pass  # a parent is a file: named below
    except OSError as exc:  # ENAMETOOLONG, EACCES
        raise OutputTaken(path, f"cannot be written ({exc.strerror})", hint, overwritten=False) from None
    for parent in path.parents:
        if parent.exists():
            if not parent.is_dir():
                raise OutputTaken(
                    path, f"cannot be written ({parent} is not a folder)", hint, overwritten=False
                )
            longest = os.pathconf(parent, "PC_NAME_MAX")
            # the folders still to be made, and the file: each name within the file system's limit
            if any(
                len(part.encode("utf-8", "surrogatepass")) > longest
                for part in path.relative_to(parent).parts
            ):
                raise OutputTaken(
                    path,
                    f"cannot be written (File name too long: over {longest} bytes)",
                    hint,
                    overwritten=False,
                )
            break


def record_output_file(path: Path, kind: str, job_id: str | None = None) -> None:
    """Remember ``path`` (resolved) as a ``kind`` run's output, with the digest of its current bytes."""
    values = {
        "path": str(path),
        "kind": kind,
        "sha256": file_sha256(path),
        "size_bytes": path.stat().st_size,
        "job_id": job_id,
        "written_at": utcnow(),
    }
    key = _key(path)
    for _ in range(2):  # a concurrent first insert of the same path: the second try updates it
        try:
            with session_scope() as session:
                row = session.get(OutputFile, key)
                if row is None:
                    session.add(OutputFile(path_hash=key, **values))
                else:
                    for name, value in values.items():
                        setattr(row, name, value)
            return
        except IntegrityError:
            continue
    raise RuntimeError(f"{path}: could not record it as a {kind} output")


def forget_output_file(path: Path) -> None:
    """Drop the record of ``path`` (the run removed the file it had written)."""
    with session_scope() as session:
        row = session.get(OutputFile, _key(path))
        if row is not None:
            session.delete(row)


def check_run_folder(folder: Path, marker: str, what: str) -> None:
    """Raises :class:`OutputTaken` unless ``folder`` may become (or stay) a ``what`` run's output folder:
    absent, empty, or holding ``marker``, the file every such run leaves in its folder. A run writes
    fixed names there (``config.yaml``, ``metrics.jsonl``, ``manifest.json``, ...), so any other
    folder's files of those names would be replaced or truncated."""
    check_usable(folder, "Name a new or empty folder.")
    folder = folder.resolve()  # a link to a run's folder (a run kept on another disk) is that folder
    if folder.exists() and not folder.is_dir():
        raise OutputTaken(folder, "exists and is not a folder", "Name a new or empty folder.")
    if not folder.exists() or (folder / marker).is_file():
        return
    try:
        holds = next(iter(folder.iterdir()), None)
    except OSError as exc:
        raise OutputTaken(folder, f"cannot be read ({exc.strerror})", "Name a new or empty folder.") from None
    if holds is not None:
        raise OutputTaken(
            folder, f"holds files and is not a {what} run's folder (no {marker})",
            "Name a new or empty folder (or an earlier run's, to continue it).",
        )  # fmt: skip
