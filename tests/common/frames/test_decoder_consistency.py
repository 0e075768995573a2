"""Rotated and edit-listed videos: one definition of frames, whichever backend decodes.

Fixtures are real mp4 files written with PyAV only (no ffmpeg CLI): a synthetic H.264 source is
stream-copied with a display matrix (``set_display_rotation``) or cut like ``ffmpeg -ss … -c copy``
(packets from the keyframe before the cut, timestamps shifted so the cut is at 0, which makes the mp4
muxer write an edit list hiding the frames before it). One edit list is then shortened in place to
also hide frames at the end.

Source clip (all cases): 4 s at 30 fps, 160×96, a keyframe every 30 frames → 120 frames.
"""

import struct
from pathlib import Path

import av
import numpy as np
import pytest
import torch

from services.common.frames import DecodeError, VideoParams, decode_clip
from services.common.frames.decoders import DECODERS, _quarter_turns
from services.common.frames.resize import resize_frames
from services.common.frames.synthetic import make_video

FPS, WIDTH, HEIGHT, SECONDS = 30, 160, 96, 4


def _copy(src: Path, dst: Path, *, rotation: float | None = None, cut_s: float | None = None) -> Path:
    """Stream-copy ``src`` to ``dst`` with a display rotation and/or a start cut at ``cut_s``."""
    with av.open(str(src)) as inp, av.open(str(dst), "w") as out:
        ist = inp.streams.video[0]
        ost = out.add_stream_from_template(ist)
        if rotation is not None:
            ost.set_display_rotation(rotation)
        packets = [p for p in inp.demux(ist) if p.dts is not None]
        cut = round(cut_s / ist.time_base) if cut_s else 0
        # Keep from the last keyframe at or before the cut, as `ffmpeg -ss -c copy` does.
        keep_from = max(p.pts for p in packets if p.is_keyframe and p.pts <= cut)
        for packet in packets:
            if packet.pts < keep_from:
                continue
            packet.pts -= cut
            packet.dts -= cut
            packet.stream = ost
            out.mux(packet)
    return dst


def _boxes(data: bytes, start: int, end: int, path: str = ""):
    """(path, offset, size) of every mp4 box under the containers an edit list lives in."""
    while start + 8 <= end:
        size, kind = struct.unpack(">I4s", data[start : start + 8])
        name = f"{path}/{kind.decode('latin-1')}"
        yield name, start, size
        if kind in (b"moov", b"trak", b"edts"):
            yield from _boxes(data, start + 8, start + size, name)
        start += size


def _shorten_edit(path: Path, seconds: float) -> None:
    """Rewrite the single edit of ``path`` (elst v0) to present only ``seconds`` from its start."""
    data = bytearray(path.read_bytes())
    found = {name: offset for name, offset, _ in _boxes(data, 0, len(data))}
    # mvhd v0 payload: version/flags, creation, modification, timescale, ...
    timescale = struct.unpack_from(">I", data, found["/moov/mvhd"] + 8 + 12)[0]
    elst = found["/moov/trak/edts/elst"]
    version, count = struct.unpack_from(">II", data, elst + 8)
    assert (version, count) == (0, 1), f"{path}: expected one v0 edit, found version {version}, {count}"
    # elst v0 entry: segment_duration (movie timescale), media_time, rate.
    struct.pack_into(">I", data, elst + 16, round(seconds * timescale))
    path.write_bytes(bytes(data))


@pytest.fixture(scope="module")
def clips(tmp_path_factory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("consistency")
    src = make_video(root / "src.mp4", seconds=SECONDS, fps=FPS, width=WIDTH, height=HEIGHT)
    out = {"src": src}
    for degrees in (90, 270, 180):
        out[f"rot{degrees}"] = _copy(src, root / f"rot{degrees}.mp4", rotation=degrees)
    out["cut"] = _copy(src, root / "cut.mp4", cut_s=1.5)
    out["cut_both"] = _copy(src, root / "cut_both.mp4", cut_s=1.5)
    _shorten_edit(out["cut_both"], 2.0)
    out["rot90_cut"] = _copy(src, root / "rot90_cut.mp4", rotation=90, cut_s=1.5)
    return out


def _read_all(decoder: str, path: Path) -> np.ndarray:
    video = DECODERS[decoder](path, 1)
    try:
        return video.read(list(range(video.info.timing.total_frames)))
    finally:
        video.close()


def _square_centre(frame: np.ndarray) -> tuple[float, float]:
    """(row, col) centroid of the synthetic clip's white square (the only pixels near (255, 255, 255))."""
    rows, cols = np.nonzero((frame > 230).all(axis=-1))
    return float(rows.mean()), float(cols.mean())


def test_fixtures_are_what_they_claim(clips):
    # Checked with PyAV directly, independent of the code under test.
    with av.open(str(clips["rot90"])) as c:
        assert next(c.decode(c.streams.video[0])).rotation == 90
    with av.open(str(clips["rot270"])) as c:
        assert next(c.decode(c.streams.video[0])).rotation == -90  # FFmpeg reads angles in [-180, 180]
    for name, coded, hidden in [("cut", 90, 15), ("cut_both", 90, 30)]:
        # Cut at 1.5 s: packets from the keyframe at 1.0 s (frame 30) on → 120 - 30 = 90 coded frames;
        # frames 30..44 come before the cut → 15 hidden. cut_both presents 2.0 s = 60 → 30 hidden.
        with av.open(str(clips[name])) as c:
            stream = c.streams.video[0]
            assert stream.frames == coded
            assert sum(e.is_discard for e in stream.index_entries) == hidden
            assert sum(1 for _ in c.decode(stream)) == coded - hidden


@pytest.mark.parametrize(
    ("name", "shape", "centre"),
    [
        # Stored frame 0: a 19-px square (min(96, 160) // 5) at rows 38..56, cols 0..18 → centre
        # (47, 9), left edge, vertically centred. Displayed (H, W) and centre after the rotation:
        ("src", (96, 160), (47, 9)),
        # 90° counter-clockwise: (r, c) → (W-1-c, r) = (159-9, 47): bottom, horizontally centred.
        ("rot90", (160, 96), (150, 47)),
        # 270° ccw = 90° clockwise: (r, c) → (c, H-1-r) = (9, 95-47): top.
        ("rot270", (160, 96), (9, 48)),
        # 180°: (r, c) → (H-1-r, W-1-c) = (48, 150): right edge.
        ("rot180", (96, 160), (48, 150)),
    ],
)
def test_rotated_frames_are_displayed_and_identical_across_backends(clips, name, shape, centre):
    a = _read_all("decord", clips[name])
    b = _read_all("pyav", clips[name])
    # 120 frames either way, H.264 decoded by the same FFmpeg decoder → bit-identical.
    assert a.shape == b.shape == (120, *shape, 3)
    assert np.array_equal(a, b)
    assert _square_centre(b[0]) == pytest.approx(centre, abs=1.0)
    # The red channel grows along the stored x axis (0 → 255 across the 160 columns at frame 0); after
    # the rotation it must grow along the displayed axis the stored x axis maps to. Far edge mean 255;
    # near edge mean: the square's 19 white pixels of 96 → 19·255/96 ≈ 50.5; difference ≈ 204.5, give or
    # take H.264's smearing of the sharp square edge (measured 198.8).
    red = b[0, ..., 0].astype(int)
    rising = {
        "src": red[:, -1].mean() - red[:, 0].mean(),  # left → right
        "rot90": red[0].mean() - red[-1].mean(),  # bottom → top
        "rot270": red[-1].mean() - red[0].mean(),  # top → bottom
        "rot180": red[:, 0].mean() - red[:, -1].mean(),  # right → left
    }[name]
    assert rising == pytest.approx(204.5, abs=10)


@pytest.mark.parametrize("name", ["rot90", "rot270", "rot180"])
def test_decode_clip_agrees_on_rotated_clips(clips, name):
    a, ma = decode_clip(clips[name], VideoParams(), decoders=["decord"])
    b, mb = decode_clip(clips[name], VideoParams(), decoders=["pyav"])
    c, mc = decode_clip(clips[name], VideoParams())
    assert mc["backend"] == "decord"
    assert torch.equal(a, b) and torch.equal(a, c)
    displayed = (160, 96) if name != "rot180" else (96, 160)
    for meta in (ma, mb, mc):
        # 4 s at 2 fps → 8 frames from 120: round(linspace(0, 119, 8)) = 0, 17, 34, 51, 68, 85, 102, 119.
        assert meta["frames_indices"] == [0, 17, 34, 51, 68, 85, 102, 119]
        assert meta["timestamps"] == [i / 30 for i in meta["frames_indices"]]
        assert meta["total_num_frames"] == 120 and meta["duration"] == pytest.approx(4.0)
        assert (meta["source_height"], meta["source_width"]) == displayed


@pytest.mark.parametrize(
    ("name", "first", "presented", "rotation"),
    [
        # Presented frames are source frames 45.. (1.5 s × 30): 120 - 45 = 75 ...
        ("cut", 45, 75, 0),
        # ... or 2.0 s × 30 = 60 of them when the edit also ends early (source frames 45..104).
        ("cut_both", 45, 60, 0),
        ("rot90_cut", 45, 75, 1),
    ],
)
def test_edit_lists_define_the_frames(clips, name, first, presented, rotation):
    source = _read_all("decord", clips["src"])
    expected = np.rot90(source[first : first + presented], rotation, axes=(1, 2))

    with pytest.raises(DecodeError, match="edit list"):
        DECODERS["decord"](clips[name], 1)

    raw = _read_all("pyav", clips[name])
    # Stream copy of a closed-GOP H.264 source: the presented frames are the source's, bit for bit.
    assert np.array_equal(raw, expected)

    frames, meta = decode_clip(clips[name], VideoParams())
    assert meta["backend"] == "pyav"
    assert meta["total_num_frames"] == presented
    assert meta["duration"] == pytest.approx(presented / 30)
    # 75 frames at 2 fps → 75/30·2 = 5 → floored to even 4: round(linspace(0, 74, 4)) = 0, 25, 49, 74
    # (24.67 and 49.33 round to 25 and 49). 60 frames → 4 s·2 = 4: round(linspace(0, 59, 4)) = 0, 20, 39, 59.
    indices = [0, 25, 49, 74] if presented == 75 else [0, 20, 39, 59]
    assert meta["frames_indices"] == indices
    assert meta["timestamps"] == [i / 30 for i in indices]
    want = resize_frames(
        torch.from_numpy(np.ascontiguousarray(expected[indices])), meta["height"], meta["width"]
    )
    assert torch.equal(frames, want)


def test_decord_only_clip_with_hidden_frames_fails_naming_the_reason(clips):
    with pytest.raises(DecodeError, match=r"· decord · .*decord: its edit list hides 15 of 90 coded frames"):
        decode_clip(clips["cut"], VideoParams(), decoders=["decord"])


def test_pyav_reads_again_from_the_start(clips):
    video = DECODERS["pyav"](clips["rot90"], 1)
    try:
        first = video.read([0, 5, 5, 40])
        again = video.read([40, 0])
    finally:
        video.close()
    assert np.array_equal(first[[3, 0]], again) and np.array_equal(first[1], first[2])


@pytest.mark.parametrize(
    ("rotation", "turns"),
    [(0, 0), (90, 1), (-90, 3), (180, 2), (-180, 2), (45, 0), (-135, 0)],
)
def test_quarter_turns(rotation, turns):
    # np.rot90's k counts counter-clockwise turns: -90° ccw = 3 turns; angles off the 90° grid stay as stored.
    assert _quarter_turns(rotation) == turns


@pytest.mark.parametrize("name", ["src", "rot90", "cut", "cut_both", "rot90_cut"])
def test_pyav_seeking_to_a_late_window_reads_the_frames_decoding_from_the_start_does(
    clips, name, monkeypatch
):
    """A window late in a long file is read after one seek to the keyframe before it (frames known by
    pts). With the seek threshold lowered to 0.5 s, every clip here seeks; the frames must equal a
    read from the start, through rotation and edit lists (their cut shifts keyframes off whole seconds)."""
    import services.common.frames.decoders as decoders

    video = DECODERS["pyav"](clips[name], 1)
    try:
        total = video.info.timing.total_frames
        indices = [total - 40, total - 33, total - 20, total - 1, total - 40]  # repeated, unordered
        monkeypatch.setattr(decoders, "SEEK_AFTER_S", float("inf"))
        expected = video.read(indices)
        seeks = []
        real = decoders._PyAVVideo._read_after_seek
        monkeypatch.setattr(decoders, "SEEK_AFTER_S", 0.5)
        monkeypatch.setattr(
            decoders._PyAVVideo, "_read_after_seek", lambda self, i: seeks.append(i) or real(self, i)
        )
        seeked = video._read_after_seek(indices)
        assert seeked is not None and np.array_equal(seeked, expected)
        assert np.array_equal(video.read(indices), expected) and len(seeks) == 2
        assert np.array_equal(video.read([0, 1]), _read_all("pyav", clips[name])[:2])  # back to the start
    finally:
        video.close()
