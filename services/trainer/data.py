"""Training data: samples → clip keys in the frame store (preprocessing what is missing) → rollout and
reward views, prompt token counts from clip metadata, and a stateful, seeded loader.

Only keys and paths leave this module; frames are loaded beside the engine and the actor.
"""

from __future__ import annotations

import json
import logging
import random
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from services.common.families import Family, get_family
from services.common.frames import FrameStore, VideoParams, clip_key
from services.common.frames.decoders import failure_reason
from services.common.frames.hashing import content_hash
from services.common.frames.store import META_FILE
from services.common.samples import Sample, load_samples, reward_fields
from services.common.settings import get_settings
from services.preprocess.dataset import InputError, resolve_video
from services.reward import canonical_name, render_prompt
from services.reward.errors import UnknownProblemType
from services.rollout.adapters import rollout_sample
from services.rollout.samples import RolloutSample
from services.rollout.sources import ImageError, ImageFiles, RealtimeSource, image_key
from services.trainer.config import DataConfig

log = logging.getLogger(__name__)
# Qwen3-VL writes a "<t seconds>" text stamp before each temporal patch: a few tokens each.
TIMESTAMP_TOKENS = 6


class DataError(ValueError):
    """The data cannot start a run (missing clips in cached_only mode, unknown types, nothing left)."""


@dataclass
class TrainSample:
    """One sample ready for the loop: what the rollout gets, what the reward scores, its prompt length."""

    sample: Sample
    problem_type: str
    rollout: RolloutSample
    reward: dict[str, Any]
    prompt_tokens: int


@dataclass
class DataReport:
    loaded: int = 0
    kept: int = 0
    dropped_decode: int = 0
    dropped_overlong: int = 0
    dropped_media: int = 0  # more images/videos than the engine takes per prompt
    preprocessed: int = 0
    errors: list[str] = field(default_factory=list)


def video_tokens_from_meta(meta: dict[str, Any], family: Family) -> int:
    """Merged patches of a stored clip, from its metadata alone: (T/tp)·(H/p)·(W/p)/merge²."""
    t, h, w = int(meta["num_frames"]), int(meta["height"]), int(meta["width"])
    patches = (t // family.temporal_patch_size) * (h // family.patch_size) * (w // family.patch_size)
    tokens = patches // family.merge_size**2
    if family.name.value in ("qwen3_vl", "qwen3_5"):
        tokens += (t // family.temporal_patch_size) * TIMESTAMP_TOKENS
    return tokens


def image_tokens_from_meta(meta: dict[str, Any], family: Family) -> int:
    """Merged patches of an image read at its budgeted size: (H/p)·(W/p)/merge²."""
    return (
        (int(meta["height"]) // family.patch_size)
        * (int(meta["width"]) // family.patch_size)
        // family.merge_size**2
    )


def image_meta(images: ImageFiles, key: str) -> dict[str, Any]:
    """An image's original and budgeted sizes, as a clip's metadata gives them. The image is decoded in
    full once here, so an unusable one is dropped at start (ImageError), not met mid-run."""
    return images.read(key)[1]


def _resolve(sample: Sample, dataset_dir: Path, roots: list[Path]) -> list[Path]:
    return [resolve_video(raw, dataset_dir, roots) for raw in sample.videos]


def _store_meta(store: FrameStore, key: str) -> dict[str, Any] | None:
    try:
        return json.loads((store.path_for(key) / META_FILE).read_text())
    except FileNotFoundError:
        return None


def _clip_meta(store: FrameStore, realtime: RealtimeSource | None, key: str) -> dict[str, Any]:
    meta = _store_meta(store, key)
    if meta is None and realtime is not None:
        # realtime_only: counting tokens needs the clip's grid, so each clip is decoded once here
        _, meta = realtime.load(key, None)
    if meta is None:
        raise DataError(f"clip {key} is not in the frame store after preprocessing")
    return meta


#: a sample with its clips' parameters, files and frame-store keys (of its images, for an image sample)
Entry = tuple[Sample, VideoParams, list[Path], list[str]]


@dataclass
class _Split:
    """One split read and resolved, before the clips missing from the store are decoded."""

    name: str
    entries: list[Entry]
    report: DataReport
    missing: list[Entry]  # video samples with a clip the store lacks


def prepare_split(
    files: Sequence[str],
    cfg: DataConfig,
    family: str,
    tokenizer: Any,
    store: FrameStore,
    work_dir: Path,
    *,
    split: str,
    **options: Any,
) -> tuple[list[TrainSample], DataReport]:
    """One split's samples: :func:`prepare_splits` of ``{split: files}`` (its options, the same)."""
    return prepare_splits({split: files}, cfg, family, tokenizer, store, work_dir, **options)[split]


def prepare_splits(
    splits: Mapping[str, Sequence[str]],
    cfg: DataConfig,
    family: str,
    tokenizer: Any,
    store: FrameStore,
    work_dir: Path,
    *,
    realtime: RealtimeSource | None = None,
    system_prompt: str | None = None,
    images: ImageFiles | None = None,
    media_limits: Mapping[str, int] | None = None,
    check_stop: Callable[[], None] = lambda: None,
) -> dict[str, tuple[list[TrainSample], DataReport]]:
    """Every usable sample of each split's ``files``, by split name; clips missing from the store are preprocessed first (or, with
    ``cached_only``, the run fails naming them). A sample whose clip cannot be decoded, or whose prompt
    exceeds ``max_prompt_tokens``, is dropped, counted and logged, never a crash. Image samples' files are
    added to ``images`` (read from their files within its pixel budget, not preprocessed). A sample with
    more images or videos than ``media_limits`` (the engine's ``limit_mm_per_prompt``) is dropped and
    counted too: the engine would refuse it mid-run. ``check_stop`` is called often (per file, every
    256 samples, while preprocessing waits) and raises to abandon the preparation (a cancelled job).

    The clips missing in all the splits are decoded by one worker pool, each clip once: a pool's start
    and stop cost seconds, and a run reads up to three splits (train, validation, warm-up)."""
    base = cfg.video_params(family)
    read = dict(realtime=realtime, images=images, media_limits=media_limits, check_stop=check_stop)
    parts = [_read_split(name, files, base, store, **read) for name, files in splits.items()]
    for part in parts:
        if part.missing and cfg.source_mode == "cached_only":
            names = ", ".join(repr(e[0].id) for e in part.missing[:10])
            more = f" and {len(part.missing) - 10} more" if len(part.missing) > 10 else ""
            raise DataError(
                f"data.source_mode=cached_only but {len(part.missing)} {part.name} sample(s) have clips missing"
                f" from the frame store: {names}{more}; run `reelrl preprocess` first or use"
                " source_mode=prefer_cached"
            )
    # each split's missing entries, in order, and their decoding errors (None: decoded or not attempted)
    todo = [e for part in parts for e in part.missing] if cfg.source_mode == "prefer_cached" else []
    errors: list[str | None] = [None] * sum(len(part.missing) for part in parts)
    if todo:
        errors = _preprocess(todo, base, cfg, work_dir / f"{'+'.join(splits)}.pending.jsonl", check_stop)
    out: dict[str, tuple[list[TrainSample], DataReport]] = {}
    for part in parts:
        mine, errors = errors[: len(part.missing)], errors[len(part.missing) :]
        if todo:
            part.report.preprocessed = len(part.missing)
        out[part.name] = _finish_split(
            part, mine, family, tokenizer, store, cfg, realtime=realtime, images=images,
            system_prompt=system_prompt,
        )  # fmt: skip
    return out


def _read_split(
    name: str,
    files: Sequence[str],
    base: VideoParams,
    store: FrameStore,
    *,
    realtime: RealtimeSource | None,
    images: ImageFiles | None,
    media_limits: Mapping[str, int] | None,
    check_stop: Callable[[], None],
) -> _Split:
    settings = get_settings()
    report = DataReport()
    entries: list[Entry] = []
    hashes: dict[Path, str] = {}
    for file in files:
        dataset_dir = Path(file).resolve().parent
        check_stop()
        for sample in load_samples(file):
            report.loaded += 1
            if report.loaded % 256 == 0:
                check_stop()
            try:
                canonical_name(sample.problem_type)
            except UnknownProblemType as exc:
                raise DataError(f"{file}: sample {sample.id!r}: {exc}") from None
            over = {
                kind: len(items)
                for kind, items in (("image", sample.images), ("video", sample.videos))
                if media_limits is not None and len(items) > media_limits.get(kind, 0)
            }
            if over:
                report.dropped_media += 1
                report.errors.append(
                    f"sample {sample.id!r}: {over} exceed rollout.engine.limit_mm_per_prompt={dict(media_limits or {})}"
                )
                continue
            if sample.images:
                if images is None:
                    raise DataError(f"{file}: sample {sample.id!r} has images and no image source was given")
                try:
                    paths = [
                        resolve_video(raw, dataset_dir, settings.data_roots, frame_folders=False)
                        for raw in sample.images
                    ]
                    keys = [image_key(content_hash(p), images.min_pixels, images.max_pixels) for p in paths]
                except (InputError, ValueError, OSError) as exc:
                    report.errors.append(f"sample {sample.id!r}: {exc}")
                    report.dropped_decode += 1
                    continue
                images.images.update(zip(keys, map(str, paths), strict=True))
                entries.append((sample, base, paths, keys))
                continue
            try:
                params = base.with_overrides(sample.video_params)
                paths = _resolve(sample, dataset_dir, settings.data_roots)
            except (InputError, ValueError) as exc:
                report.errors.append(f"sample {sample.id!r}: {exc}")
                report.dropped_decode += 1
                continue
            try:
                for p in paths:
                    if p not in hashes:
                        hashes[p] = content_hash(p)
            except OSError as exc:
                report.errors.append(f"sample {sample.id!r}: cannot read its video: {exc}")
                report.dropped_decode += 1
                continue
            entries.append((sample, params, paths, [clip_key(hashes[p], params) for p in paths]))

    videos = [e for e in entries if not e[0].images]
    if realtime is not None:
        for _, params, paths, keys in videos:
            for path, key in zip(paths, keys, strict=True):
                realtime.clips[key] = (path, params)
    missing = [e for e in videos if any(not store.has(k) for k in e[3])]
    return _Split(name, entries, report, missing)


def _finish_split(
    part: _Split,
    decode_errors: Sequence[str | None],
    family: str,
    tokenizer: Any,
    store: FrameStore,
    cfg: DataConfig,
    *,
    realtime: RealtimeSource | None,
    images: ImageFiles | None,
    system_prompt: str | None,
) -> tuple[list[TrainSample], DataReport]:
    """The split's training samples: those whose clips decoded, whose prompts fit, with token counts."""
    fam = get_family(family)
    entries, report, split = part.entries, part.report, part.name
    failed = {
        sample.id: error for (sample, *_), error in zip(part.missing, decode_errors, strict=True) if error
    }
    samples: list[TrainSample] = []
    for sample, params, _, keys in entries:
        if sample.id in failed:
            report.dropped_decode += 1
            report.errors.append(f"sample {sample.id!r}: {failed[sample.id]}")
            continue
        metas = []
        for key in keys:
            if sample.images:
                try:
                    metas.append(image_meta(images, key))  # type: ignore[arg-type]
                except ImageError as exc:
                    failed[sample.id] = f"cannot use its image: {exc}"
                continue
            meta = _store_meta(store, key)
            if meta is None and realtime is not None:
                # realtime_only: counting tokens needs the clip's grid, so each clip is decoded once here
                try:
                    _, meta = realtime.load(key, None)
                except Exception as exc:  # whatever decoding raised: this sample's failure, not the run's
                    failed[sample.id] = f"cannot decode its video: {failure_reason(exc)}"
                    break
            if meta is None:
                raise DataError(
                    f"sample {sample.id!r}: clip {key} is not in the frame store after preprocessing"
                )
            metas.append(meta)
        if sample.id in failed:
            report.errors.append(f"sample {sample.id!r}: {failed[sample.id]}")
            report.dropped_decode += 1
            continue
        reward = reward_fields(sample, family, metas)
        prompt = render_prompt(reward, variant=cfg.prompt_variant)
        media: dict[str, Any] = (
            {"images": keys} if sample.images else {"videos": keys, "video_params": params}
        )
        rollout = rollout_sample(sample, prompt, system=system_prompt, reward=reward, **media)
        text_tokens = len(tokenizer(prompt, add_special_tokens=False).input_ids)
        vision = (
            sum(image_tokens_from_meta(m, fam) for m in metas)
            if sample.images
            else sum(video_tokens_from_meta(m, fam) for m in metas)
        )
        tokens = text_tokens + vision + 16
        if tokens > cfg.max_prompt_tokens:
            report.dropped_overlong += 1
            continue
        samples.append(
            TrainSample(
                sample=sample,
                problem_type=canonical_name(sample.problem_type),
                rollout=rollout,
                reward=reward,
                prompt_tokens=tokens,
            )
        )
    report.kept = len(samples)
    for line in report.errors[:20]:
        log.warning("%s data: dropped %s", split, line)
    if report.dropped_overlong:
        log.warning(
            "%s data: dropped %d sample(s) longer than data.max_prompt_tokens=%d",
            split, report.dropped_overlong, cfg.max_prompt_tokens,
        )  # fmt: skip
    return samples, report


def _preprocess(
    entries: list[Entry],
    base: VideoParams,
    cfg: DataConfig,
    pending: Path,
    check_stop: Callable[[], None] = lambda: None,
) -> list[str | None]:
    """Decode the clips of ``entries`` through the worker pool; returns each entry's error (None: decoded).
    Entries with the same files and parameters (a video in two splits) make one row, decoded once."""
    from services.preprocess.dataset import read_jsonl, write_jsonl_atomic
    from services.preprocess.dispatch import run_preprocess

    rows: dict[str, dict[str, Any]] = {}
    row_of: list[str] = []
    for sample, _, paths, keys in entries:
        videos = [str(p) for p in paths]
        what = "\n".join(keys)  # the clips' store keys: content and parameters, whatever the file names
        if what not in rows:
            rows[what] = {"id": f"clip-{len(rows)}", "videos": videos, "video_params": sample.video_params}
        row_of.append(rows[what]["id"])
    write_jsonl_atomic(pending, list(rows.values()))
    out = pending.with_name(pending.stem + ".clips.jsonl")
    log.info("preprocessing %d sample(s) with missing clips (%d distinct)", len(entries), len(rows))
    report = run_preprocess(
        pending, out, base, workers=cfg.preprocess_workers, progress=lambda done, total: check_stop()
    )
    failed_file = report.failed_out
    failures: dict[str, str] = {}
    if failed_file is not None and Path(failed_file).exists():
        for row in read_jsonl(Path(failed_file)):
            failures[str(row.get("id"))] = str(row.get("error"))
    return [failures.get(row) for row in row_of]


class StatefulLoader:
    """Batches of sample indices from a seeded permutation per epoch (identity without shuffling), read
    as one stream: full batches, no sample skipped. Its position is part of every checkpoint."""

    def __init__(self, size: int, batch_size: int, *, seed: int, shuffle: bool = True) -> None:
        if size < batch_size:
            raise DataError(f"{size} usable training sample(s), fewer than data.batch_size={batch_size}")
        self.size, self.batch_size, self.seed, self.shuffle = size, batch_size, seed, shuffle
        self.epoch, self.position = 0, 0

    def _order(self) -> list[int]:
        order = list(range(self.size))
        if self.shuffle:
            random.Random(f"{self.seed}-{self.epoch}").shuffle(order)
        return order

    def next_batch(self) -> list[int]:
        """The next ``batch_size`` indices of the stream of epoch permutations: an epoch's tail is
        completed from the next epoch's order, so every sample is seen once per epoch (shuffled or not)."""
        batch: list[int] = []
        while len(batch) < self.batch_size:
            if self.position == self.size:
                self.epoch, self.position = self.epoch + 1, 0
            order = self._order()
            take = min(self.batch_size - len(batch), self.size - self.position)
            batch += order[self.position : self.position + take]
            self.position += take
        return batch

    def state_dict(self) -> dict[str, int]:
        return {"epoch": self.epoch, "position": self.position, "size": self.size, "seed": self.seed}

    def load_state_dict(self, state: dict[str, int]) -> None:
        if state.get("size") != self.size or state.get("seed") != self.seed:
            raise DataError(
                f"checkpoint data position is for {state.get('size')} samples with seed {state.get('seed')}, "
                f"this run has {self.size} with seed {self.seed}: the data changed; resume=none to start over"
            )
        self.epoch, self.position = int(state["epoch"]), int(state["position"])
