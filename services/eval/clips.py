"""Clips for a benchmark's samples: the protocol's decode parameters (config overrides applied), the
frame-store key of every video, and preprocessing of the missing ones through the preprocess service
(local worker processes when embedded, or running workers) before any request is sent."""

from __future__ import annotations

import json
import logging
import re
import tempfile
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from services.common.data_roots import inside_roots
from services.common.families import FamilyName
from services.common.frames import DecodeError, FrameStore, VideoParams, clip_key
from services.common.frames.hashing import content_hash
from services.common.samples import Sample
from services.common.settings import get_settings

log = logging.getLogger(__name__)
_LINE = re.compile(r"^line (\d+): ")


def clip_params(family: FamilyName | str, *layers: Mapping[str, Any]) -> VideoParams:
    """The benchmark's protocol defaults with each override layer applied in turn. Setting ``fps`` in a
    layer clears ``nframes`` unless the layer sets it too (and the other way round): the two exclude
    each other, and an override names the one it wants."""
    merged: dict[str, Any] = {}
    for layer in layers:
        layer = dict(layer)
        if "fps" in layer and "nframes" not in layer:
            merged["nframes"] = None
        if "nframes" in layer and "fps" not in layer:
            merged["fps"] = None
        merged.update(layer)
    merged["family"] = FamilyName(family)
    return VideoParams.model_validate(merged)


class PreprocessStopped(Exception):
    """The run's stop flag was raised while its clips were being planned (hashed) or preprocessed."""


@dataclass
class PlannedSample:
    """A sample with the clip key and parameters of each of its videos, or why it cannot run."""

    sample: Sample
    params: VideoParams | None = None
    files: list[Path] = field(default_factory=list)
    keys: list[str] = field(default_factory=list)
    error: str | None = None


class ClipPlanner:
    """Hashes each video file once per run (many questions share a video)."""

    def __init__(
        self,
        store: FrameStore,
        roots: Sequence[Path] | None = None,
        stop: Callable[[], bool] | None = None,
    ) -> None:
        self.store = store
        self.stop = stop  # asked before each sample: hashing a benchmark's videos reads every byte
        # video names come from annotation files: with data roots configured, each must stay inside
        # them (a "../" or absolute name would read any file on the server)
        given = get_settings().data_roots if roots is None else roots
        self.roots = [Path(root).resolve() for root in given]
        self._hashes: dict[tuple[Path, int, int], str] = {}

    def _hash(self, path: Path) -> str:
        stat = path.stat()
        stamp = (path, stat.st_size, stat.st_mtime_ns)
        if stamp not in self._hashes:
            self._hashes[stamp] = content_hash(path)
        return self._hashes[stamp]

    def plan(self, samples: Sequence[Sample], video_root: Path, params: VideoParams) -> list[PlannedSample]:
        planned = []
        for sample in samples:
            if self.stop is not None and self.stop():
                raise PreprocessStopped("stopped while planning clips")
            item = PlannedSample(sample)
            planned.append(item)
            if sample.images:
                item.error = "image samples are not supported by the eval pipeline (videos or text only)"
                continue
            try:
                item.params = params.with_overrides(sample.video_params)
            except ValidationError as exc:
                item.error = f"invalid video_params: {exc.errors()[0]['msg']}"
                continue
            for raw in sample.videos:
                path = (video_root / raw).resolve()
                if self.roots:
                    try:
                        path = inside_roots(path, self.roots)
                    except ValueError as exc:
                        item.error = f"video {exc}"
                        break
                if not (path.is_file() or path.is_dir()):  # a directory is a frame folder
                    item.error = f"video file not found: {path}"
                    break
                try:
                    source_hash = self._hash(path)
                except DecodeError as exc:  # a frame folder without usable frame images
                    item.error = str(exc)
                    break
                item.files.append(path)
                item.keys.append(clip_key(source_hash, item.params))
        return planned

    def missing(self, planned: Sequence[PlannedSample]) -> list[PlannedSample]:
        return [p for p in planned if p.error is None and not all(self.store.has(k) for k in p.keys)]


def preprocess_missing(
    planned: Sequence[PlannedSample],
    store: FrameStore,
    params: VideoParams,
    *,
    workers: int,
    timeout_s: float | None,
    work_dir: Path,
    stop: Callable[[], bool] | None = None,
) -> int:
    """Decode the clips ``planned`` lacks with the preprocess service; samples whose clips still fail
    get their error. Returns how many samples were sent. ``stop`` is asked before the work starts and
    at every poll of the wait (a few times a second); once it answers true the wait ends (its local
    workers stopped) with :class:`PreprocessStopped`."""
    from services.preprocess.dispatch import run_preprocess

    todo = [p for p in planned if p.error is None and not all(store.has(k) for k in p.keys)]
    if not todo:
        return 0

    def check(_done: int = 0, _total: int = 0) -> None:
        if stop is not None and stop():
            raise PreprocessStopped("stopped while preprocessing clips")

    check()
    work_dir.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=work_dir, prefix="preprocess-") as folder:
        dataset = Path(folder) / "missing.jsonl"
        rows = []
        for item in todo:
            row: dict[str, Any] = {"id": item.sample.id, "videos": [str(f) for f in item.files]}
            if item.sample.video_params:
                row["video_params"] = item.sample.video_params
            rows.append(json.dumps(row))
        dataset.write_text("\n".join(rows) + "\n", encoding="utf-8")
        log.info("preprocessing the clips of %d samples", len(todo))
        report = run_preprocess(
            dataset, Path(folder) / "out.jsonl", params, workers=workers, timeout_s=timeout_s,
            progress=check,
        )  # fmt: skip
    errors: dict[int, str] = {}
    for message in report.errors:
        match = _LINE.match(message)
        if match:
            errors[int(match.group(1))] = message[match.end() :]
    for line, item in enumerate(todo, start=1):
        if not all(store.has(k) for k in item.keys):
            item.error = f"clip could not be preprocessed: {errors.get(line, 'no clip was stored')}"
    return len(todo)
