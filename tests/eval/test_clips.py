"""Clip planning: the video names annotation files give must stay inside the data roots when roots
are configured (a per-sample error otherwise, never a read elsewhere on the server)."""

from __future__ import annotations

import pytest

from services.common.frames import FrameStore, VideoParams
from services.common.samples import Sample
from services.eval.clips import ClipPlanner, PreprocessStopped


def test_video_names_outside_the_data_roots_fail_their_sample(tmp_path, reelrl_home, monkeypatch):
    """Inside the roots a name is planned; ``../`` out of them or an absolute path elsewhere is that
    sample's error (before: hashed and sent to preprocessing). Without roots, names are not limited."""
    from services.common.settings import reset_settings_cache

    root, outside = tmp_path / "root", tmp_path / "outside"
    (root / "bench").mkdir(parents=True)
    outside.mkdir()
    (root / "bench" / "a.mp4").write_bytes(b"inside")
    (outside / "b.mp4").write_bytes(b"outside")
    names = {"in": "a.mp4", "up": "../../outside/b.mp4", "abs": str(outside / "b.mp4")}
    samples = [Sample(id=k, problem="?", problem_type="free-form", videos=(v,)) for k, v in names.items()]
    store = FrameStore(tmp_path / "frames")

    monkeypatch.setenv("REELRL_DATA_ROOTS", str(root))
    reset_settings_cache()
    planned = {p.sample.id: p for p in ClipPlanner(store).plan(samples, root / "bench", VideoParams())}
    assert planned["in"].error is None and planned["in"].files == [root / "bench" / "a.mp4"]
    for key in ("up", "abs"):
        assert "outside the data roots" in planned[key].error and not planned[key].keys

    monkeypatch.delenv("REELRL_DATA_ROOTS")
    reset_settings_cache()
    planned = ClipPlanner(store).plan(samples, root / "bench", VideoParams())
    assert [p.error for p in planned] == [None, None, None]


def test_planning_stops_when_the_stop_flag_is_raised(tmp_path):
    """Planning hashes every byte of a benchmark's videos; a raised stop flag ends it before the next
    sample (an eval job cancelled there ends at once)."""
    (tmp_path / "a.mp4").write_bytes(b"video")
    samples = [Sample(id=f"s{i}", problem="?", problem_type="free-form", videos=("a.mp4",)) for i in range(3)]
    asked = []

    def stop() -> bool:
        asked.append(True)
        return len(asked) > 1  # raised once the first sample is planned

    planner = ClipPlanner(FrameStore(tmp_path / "frames"), roots=[], stop=stop)
    with pytest.raises(PreprocessStopped):
        planner.plan(samples, tmp_path, VideoParams())
    assert len(asked) == 2
