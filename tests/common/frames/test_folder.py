"""Frame folders (numbered images at a declared rate) as video sources: order, hash, sampling, errors."""

import shutil

import numpy as np
import pytest
import torch
from PIL import Image

from services.common.frames import DecodeError, FrameStore, VideoParams, decode_clip
from services.common.frames.folder import frame_files
from services.common.frames.hashing import content_hash, source_size
from services.common.frames.resize import resize_frames

RED, BLUE = (255, 0, 0), (0, 0, 255)


def write_frames(folder, colours, name="{:05d}.jpg", size=(40, 30)):
    """One flat JPEG per colour, numbered from 1 like MVBench's TVQA frames (00001.jpg …)."""
    folder.mkdir(parents=True, exist_ok=True)
    for i, colour in enumerate(colours, start=1):
        Image.new("RGB", size, colour).save(folder / name.format(i), quality=95)
    return folder


def colours(frames):
    return ["red" if r > b else "blue" for r, _, b in frames.float().mean(dim=(1, 2)).tolist()]


@pytest.fixture
def episode(tmp_path):
    # 12 frames at 3 fps: red for frames 0-5 (t < 2 s), blue for 6-11
    return write_frames(tmp_path / "ep", [RED] * 6 + [BLUE] * 6)


def test_frames_sampled_at_the_declared_rate_with_the_same_rule(episode):
    frames, meta = decode_clip(episode, VideoParams(fps=None, nframes=4, folder_fps=3.0))
    # round(linspace(0, 11, 4)) = 0, 3.67→4, 7.33→7, 11
    assert meta["frames_indices"] == [0, 4, 7, 11] and colours(frames) == ["red", "red", "blue", "blue"]
    assert meta["timestamps"] == pytest.approx([0.0, 4 / 3, 7 / 3, 11 / 3])
    assert (meta["fps"], meta["total_num_frames"], meta["duration"]) == (3.0, 12, 4.0)
    assert (meta["source_width"], meta["source_height"], meta["backend"]) == (40, 30, "folder")
    # resized as any video: the images' own pixels through the same resize
    raw = torch.from_numpy(
        np.stack([np.asarray(Image.open(episode / f"{i + 1:05d}.jpg")) for i in [0, 4, 7, 11]])
    )
    assert torch.equal(frames, resize_frames(raw, meta["height"], meta["width"]))
    # window [2.0, 5.0]: frames ceil(6)=6 .. min(floor(4.0·3), 11)=11 → linspace(6, 11, 4) = 6, 8, 9, 11
    frames, meta = decode_clip(
        episode, VideoParams(fps=None, nframes=4, folder_fps=3.0, window={"start": 2.0, "end": 5.0})
    )
    assert meta["source_frames_indices"] == [6, 8, 9, 11] and colours(frames) == ["blue"] * 4
    assert meta["frames_indices"] == [0, 2, 3, 5]


def test_order_is_the_number_in_the_name_not_the_text(tmp_path):
    folder = tmp_path / "f"
    folder.mkdir()
    for n in (10, 9, 100, 1):  # text order: 1, 10, 100, 9
        Image.new("RGB", (8, 8), (n, 0, 0)).save(folder / f"frame_{n}.png")
    (folder / "notes.txt").write_text("not a frame")
    (folder / ".hidden.jpg").write_bytes(b"")
    assert [p.name for p in frame_files(folder)] == [
        "frame_1.png",
        "frame_9.png",
        "frame_10.png",
        "frame_100.png",
    ]
    (folder / "frame_010.png").write_bytes((folder / "frame_10.png").read_bytes())
    with pytest.raises(DecodeError, match=r"both claim frame number 10$"):
        frame_files(folder)


def test_content_hash_covers_names_and_bytes(tmp_path, episode):
    first = content_hash(episode)
    assert first.startswith("blake3-frames:") and len(first) <= 80  # the index column's width
    copy = shutil.copytree(episode, tmp_path / "elsewhere")
    assert content_hash(copy) == first  # same frames under another path: one video
    assert source_size(copy) == sum(p.stat().st_size for p in copy.iterdir())
    (copy / "00012.jpg").rename(copy / "00013.jpg")
    assert content_hash(copy) != first
    Image.new("RGB", (40, 30), RED).save(copy / "00013.jpg", quality=95)
    assert content_hash(copy) != first


def test_bad_folders_and_parameters_are_refused(tmp_path, episode, video_dir):
    with pytest.raises(DecodeError, match="set folder_fps in the clip parameters"):
        decode_clip(episode, VideoParams(fps=None, nframes=4))
    with pytest.raises(ValueError, match="folder_fps applies to frame folders only"):
        decode_clip(video_dir / "short.mp4", VideoParams(folder_fps=3.0))
    write_frames(tmp_path / "mixed", [RED, RED])
    Image.new("RGB", (20, 30), BLUE).save(tmp_path / "mixed" / "00003.jpg")
    with pytest.raises(DecodeError, match=r"'00003\.jpg' is 20x30, the first frame 40x30"):
        decode_clip(tmp_path / "mixed", VideoParams(fps=None, nframes=2, folder_fps=3.0))  # frames 0, 2
    (tmp_path / "empty").mkdir()
    with pytest.raises(DecodeError, match="none found"):
        content_hash(tmp_path / "empty")
    assert "folder_fps" not in VideoParams().canonical()
    assert VideoParams(folder_fps=3).canonical()["folder_fps"] == 3.0


def test_store_get_reads_a_folder_like_a_file(tmp_path, episode):
    store = FrameStore(tmp_path / "frames")
    params = VideoParams(fps=None, nframes=4, folder_fps=3.0)
    decoded, _ = store.get(episode, params, "realtime_only")
    cached, meta = store.get(episode, params, "prefer_cached")
    assert torch.equal(decoded, cached) and meta["frames_indices"] == [0, 4, 7, 11]


def test_frames_outside_the_data_roots_are_refused(tmp_path, monkeypatch):
    """With data roots configured, a folder inside them whose frames are symlinks to files outside is
    refused (before: read, so a job could read any image on the server); symlinks that stay inside
    the roots and folders without roots configured are read as before."""
    from services.common.settings import reset_settings_cache

    outside = write_frames(tmp_path / "outside", [RED, BLUE])
    root = tmp_path / "root"
    inside = write_frames(root / "real", [RED, BLUE])
    for name, target in (("escaping", outside), ("linked", inside)):
        (root / name).mkdir()
        for frame in sorted(target.iterdir()):
            (root / name / frame.name).symlink_to(frame)
    monkeypatch.setenv("REELRL_DATA_ROOTS", str(root))
    reset_settings_cache()
    try:
        with pytest.raises(
            DecodeError, match=r"frame file '0000[12]\.jpg' resolves to .*outside the data roots"
        ):
            frame_files(root / "escaping")
        with pytest.raises(DecodeError, match="outside the data roots"):
            content_hash(root / "escaping")
        assert [p.name for p in frame_files(root / "linked")] == ["00001.jpg", "00002.jpg"]
        monkeypatch.delenv("REELRL_DATA_ROOTS")
        reset_settings_cache()
        assert len(frame_files(root / "escaping")) == 2
    finally:
        reset_settings_cache()
