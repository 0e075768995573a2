"""`reelrl preprocess` with clip windows and frame folders: real worker process, embedded SQLite index."""

import pytest
from PIL import Image
from sqlalchemy import select

from services.common.db import VideoAsset, session_scope
from services.common.frames import FrameStore, VideoParams
from services.common.frames.synthetic import make_colour_change_video
from services.preprocess.dataset import InputError, read_jsonl, resolve_video
from services.preprocess.dispatch import run_preprocess


def colours(frames):
    return ["red" if r > b else "blue" for r, _, b in frames.float().mean(dim=(1, 2)).tolist()]


def test_a_folder_is_a_video_path_only_where_frame_folders_are_allowed(tmp_path):
    folder = tmp_path / "frames" / "ep1"
    folder.mkdir(parents=True)
    Image.new("RGB", (8, 8)).save(folder / "00001.jpg")
    assert resolve_video("frames/ep1", tmp_path, []) == folder
    assert resolve_video("frames/ep1", tmp_path, [tmp_path]) == folder  # inside the data roots
    # images and datasets must be files
    with pytest.raises(InputError, match=r"frames/ep1: not a regular file \("):
        resolve_video("frames/ep1", tmp_path, [], frame_folders=False)
    with pytest.raises(InputError, match=r"frames: not a usable frame folder: .* none found"):
        resolve_video("frames", tmp_path, [])  # holds a folder, no images


def test_with_data_roots_a_relative_video_path_is_taken_beside_the_dataset_first(tmp_path):
    """Datasets name their videos relative to themselves (Video-R1, EasyR1): with a data root set, the
    file beside the dataset is found (before: looked for only under the roots, so 'not found'), it
    wins over a same-named file under a root, a root is still searched next, and a file beside a
    dataset outside the roots is still refused."""
    root = tmp_path / "root"
    (root / "ds" / "videos").mkdir(parents=True)
    (root / "ds" / "videos" / "a.mp4").write_bytes(b"beside")
    (root / "videos").mkdir()
    (root / "videos" / "a.mp4").write_bytes(b"under the root")
    (root / "videos" / "b.mp4").write_bytes(b"under the root only")
    assert resolve_video("videos/a.mp4", root / "ds", [root]) == root / "ds" / "videos" / "a.mp4"
    assert resolve_video("videos/b.mp4", root / "ds", [root]) == root / "videos" / "b.mp4"
    (tmp_path / "outside" / "videos").mkdir(parents=True)
    (tmp_path / "outside" / "videos" / "c.mp4").write_bytes(b"outside")
    with pytest.raises(InputError, match="outside the data roots"):
        resolve_video("videos/c.mp4", tmp_path / "outside", [root])


@pytest.mark.integration
@pytest.mark.slow
def test_frame_folders_and_windows_go_through_the_workers_into_the_store(
    reelrl_home, tmp_path, write_dataset
):
    data = tmp_path / "data"
    episode = data / "frames" / "ep1"
    episode.mkdir(parents=True)
    for i in range(1, 13):  # 12 frames at 3 fps: red for t < 2 s, then blue
        Image.new("RGB", (40, 30), (255, 0, 0) if i <= 6 else (0, 0, 255)).save(episode / f"{i:05d}.jpg")
    (data / "frames" / "empty").mkdir()
    make_colour_change_video(data / "change.mp4")  # 2 s at 10 fps: red for t < 1 s, then blue
    folder_params = {"folder_fps": 3.0}
    dataset = write_dataset(
        data / "in.jsonl",
        [
            {"id": "folder", "videos": ["frames/ep1"], "video_params": folder_params},
            {"id": "folder-late", "videos": ["frames/ep1"],
             "video_params": {**folder_params, "window": {"start": 2.0, "end": 5.0}}},
            {"id": "late", "videos": ["change.mp4"], "video_params": {"window": {"start": 1.0, "end": 2.5}}},
            {"id": "outside", "videos": ["change.mp4"], "video_params": {"window": {"start": 2.0, "end": 3.0}}},
            {"id": "empty", "videos": ["frames/empty"], "video_params": folder_params},
            {"id": "bad-window", "videos": ["change.mp4"], "video_params": {"window": {"start": 2.0, "end": 1.0}}},
        ],
    )  # fmt: skip
    out = tmp_path / "out.jsonl"
    report = run_preprocess(dataset, out, VideoParams(fps=None, nframes=4), workers=1, timeout_s=240)

    ok = {row["id"]: row for row in read_jsonl(out)}
    failed = {row["id"]: row["error"] for row in read_jsonl(out.with_name("out.failed.jsonl"))}
    assert set(ok) == {"folder", "folder-late", "late"}
    assert "lies outside the video" in failed["outside"]
    assert "frames/empty: not a usable frame folder" in failed["empty"] and "none found" in failed["empty"]
    assert "window end (1.0) must be after its start (2.0)" in failed["bad-window"]
    assert (report.succeeded, report.failed, report.clips, report.clip_failures) == (3, 3, 4, 1)

    store = FrameStore.from_settings()
    expected = {
        # round(linspace(0, 11, 4)) = 0, 4, 7, 11
        "folder": ([0, 4, 7, 11], ["red", "red", "blue", "blue"]),
        # frames 6..11 → round(linspace(6, 11, 4)) = 6, 8, 9, 11
        "folder-late": ([6, 8, 9, 11], ["blue"] * 4),
        # frames 10..19 → 10, 13, 16, 19
        "late": ([10, 13, 16, 19], ["blue"] * 4),
    }
    for sample, (indices, seen) in expected.items():
        (key,), (params,) = ok[sample]["clips"], ok[sample]["clip_params"]
        frames, meta = store.load(key, expect=params)
        assert meta["source_frames_indices"] == indices and colours(frames) == seen, sample
    assert ok["folder"]["clips"] != ok["folder-late"]["clips"]
    with session_scope() as session:
        asset = session.scalars(
            select(VideoAsset).where(VideoAsset.content_hash.like("blake3-frames:%"))
        ).one()
        # the source's facts, not the window's: 12 frames, 4 s
        assert (asset.frame_count, asset.duration_s, asset.fps) == (12, 4.0, 3.0)
        assert asset.size_bytes == sum(p.stat().st_size for p in episode.iterdir())
        video = session.scalars(select(VideoAsset).where(VideoAsset.content_hash.like("blake3:%"))).one()
        assert (video.frame_count, video.duration_s) == (20, pytest.approx(2.0))
