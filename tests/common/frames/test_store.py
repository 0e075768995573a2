import json
import os
from pathlib import Path

import numpy as np
import pytest
import torch

from services.common.frames import (
    CacheMode,
    ClipNotCached,
    FrameStore,
    ParamsMismatch,
    VideoParams,
    clip_key,
    decode_clip,
)
from services.common.frames.hashing import content_hash


@pytest.fixture
def store(tmp_path):
    return FrameStore(tmp_path / "frames")


def _stored_clip(store, path, params):
    frames, meta = decode_clip(path, params)
    key = clip_key(content_hash(path), params)
    store.put(key, frames, meta)
    return key, frames, meta


def test_layout_roundtrip_and_mmap(store, video_dir):
    params = VideoParams(max_frames=8)
    key, frames, meta = _stored_clip(store, video_dir / "short.mp4", params)
    entry = store.path_for(key)
    assert entry == store.root / key[:2] / key[2:4] / key
    assert sorted(p.name for p in entry.iterdir()) == ["frames.npy", "meta.json"]
    loaded, loaded_meta = store.load(key, expect=params)
    assert loaded.dtype == torch.uint8 and torch.equal(loaded, frames)
    assert isinstance(np.load(entry / "frames.npy", mmap_mode="r"), np.memmap)
    for field in ("fps", "frames_indices", "total_num_frames", "duration", "height", "width", "params"):
        assert loaded_meta[field] == meta[field]
    on_disk = json.loads((entry / "meta.json").read_text())
    assert on_disk["params"] == params.canonical() and on_disk["backend"] in ("decord", "pyav")
    assert store.keys() == [key]
    assert not list((store.root / ".tmp").iterdir())


def test_mismatched_params_are_named(store, video_dir):
    key, _, _ = _stored_clip(store, video_dir / "short.mp4", VideoParams(max_frames=8))
    with pytest.raises(ParamsMismatch) as err:
        store.load(key, expect=VideoParams(max_frames=16, fps=1.0))
    assert "max_frames: stored 8 != requested 16" in str(err.value)
    assert "fps: stored 2.0 != requested 1.0" in str(err.value)


def test_modes(store, video_dir):
    path = video_dir / "wide.mp4"
    params = VideoParams(max_frames=6)
    with pytest.raises(ClipNotCached, match="cached_only"):
        store.get(path, params, CacheMode.cached_only)
    decoded, _ = store.get(path, params, CacheMode.prefer_cached)  # falls back to decoding
    key, stored, _ = _stored_clip(store, path, params)
    cached, meta = store.get(path, params, CacheMode.cached_only)
    assert meta["key"] == key
    # The fallback runs the same code: bit-identical to what the store holds.
    assert torch.equal(decoded, cached) and torch.equal(stored, cached)
    realtime, meta = store.get(path, params, CacheMode.realtime_only)
    assert torch.equal(realtime, cached) and "key" not in meta


def test_partial_writes_are_never_visible(store, video_dir, monkeypatch):
    frames, meta = decode_clip(video_dir / "short.mp4", VideoParams(max_frames=4))

    def crash(*args, **kwargs):
        raise OSError("disk full")

    monkeypatch.setattr("services.common.frames.store.os.rename", crash)
    with pytest.raises(OSError, match="disk full"):
        store.put("ab" * 32, frames, meta)
    assert not store.has("ab" * 32)
    with pytest.raises(ClipNotCached):
        store.load("ab" * 32)
    assert not list((store.root / ".tmp").iterdir())


def test_second_writer_keeps_first_entry(store, video_dir):
    frames, meta = decode_clip(video_dir / "short.mp4", VideoParams(max_frames=4))
    first = store.put("cd" * 32, frames, meta)
    again = store.put("cd" * 32, torch.zeros_like(frames), meta)
    assert first == again and torch.equal(store.load("cd" * 32)[0], frames)


def test_rejects_non_uint8(store):
    with pytest.raises(ValueError, match="uint8"):
        store.put("ef" * 32, torch.zeros(2, 4, 4, 3), {})


def test_an_entry_records_its_uint8_size(store, video_dir):
    key, _frames, _ = _stored_clip(store, video_dir / "short.mp4", VideoParams(max_frames=4))
    _, meta = store.load(key)
    # short.mp4 is 320x240 = 76,800 pixels, below Qwen2.5-VL's floor of 128 tokens × 28² = 100,352:
    # scaled by sqrt(100352 / 76800) = 1.1431 and rounded up to multiples of 28 → 280 × 392.
    # 4 frames × 280 × 392 × 3 bytes (uint8 RGB; float32 would be 4 bytes each) = 1,317,120 bytes.
    assert meta["shape"] == [4, 280, 392, 3] and meta["nbytes"] == 1_317_120
    # On disk: those bytes plus one 128-byte .npy header.
    assert store.disk_bytes() == 1_317_120 + 128


def test_the_rename_into_place_is_made_durable(store, video_dir, monkeypatch):
    frames, meta = decode_clip(video_dir / "short.mp4", VideoParams(max_frames=4))
    events = []
    real_fsync, real_rename = os.fsync, os.rename

    def fsync(fd):
        events.append(("fsync", Path(os.readlink(f"/proc/self/fd/{fd}"))))
        real_fsync(fd)

    def rename(src, dst):
        events.append(("rename", Path(dst)))
        real_rename(src, dst)

    monkeypatch.setattr(os, "fsync", fsync)
    monkeypatch.setattr(os, "rename", rename)
    final = store.put("ab" * 32, frames, meta)
    renamed = events.index(("rename", final))
    before = {path.name for kind, path in events[:renamed] if kind == "fsync"}
    after = {path for kind, path in events[renamed:] if kind == "fsync"}
    # The files and the folder listing them are synced before the rename, the new name after it.
    assert {"frames.npy", "meta.json"} <= before and any(name.startswith("abab") for name in before)
    assert {final.parent, final.parent.parent} <= after


def test_entry_problems_are_named(store, video_dir):
    key, _, _ = _stored_clip(store, video_dir / "short.mp4", VideoParams(max_frames=4))
    assert store.entry_problem(key) is None
    assert store.entry_problem("ee" * 32) == "no entry folder"
    np.save(store.path_for(key) / "frames.npy", np.zeros((2, 4, 4, 3), np.uint8))
    assert (
        "frames.npy holds uint8 [2, 4, 4, 3], meta.json says uint8 [4, 280, 392, 3]"
        in store.entry_problem(key)
    )
    (store.path_for(key) / "frames.npy").unlink()
    assert store.entry_problem(key) == "no frames.npy"
    assert store.remove(key) and not store.path_for(key).exists() and not store.remove(key)
    assert not list((store.root / ".tmp").iterdir())


def test_same_bytes_under_two_paths_share_a_key(tmp_path, video_dir):
    copy = tmp_path / "elsewhere" / "copy.mp4"
    copy.parent.mkdir()
    copy.write_bytes((video_dir / "short.mp4").read_bytes())
    p = VideoParams()
    assert clip_key(content_hash(copy), p) == clip_key(content_hash(video_dir / "short.mp4"), p)
