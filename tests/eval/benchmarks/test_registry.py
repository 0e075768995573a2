"""The registry: every benchmark of SPEC §6 registered by name, unknown names and options rejected."""

from __future__ import annotations

import pytest

from services.eval.benchmarks import BenchmarkError, adapter_class, benchmark_names, get_benchmark
from services.eval.benchmarks.base import Benchmark
from services.eval.benchmarks.registry import register

SPEC_BENCHMARKS = {
    "videomme", "videomme_v2", "mvbench", "tempcompass", "motionbench", "lvbench", "longvideobench", "mlvu",
    "video_holmes", "minerva", "vcrbench", "videoreasonbench", "longvideo_reason", "mmvu", "videommmu",
    "videomathqa", "vsibench", "charades_sta", "stvg", "ovobench", "odvbench", "livesports3k",
}  # fmt: skip


def test_all_22_and_the_generic_adapter_are_registered():
    assert len(SPEC_BENCHMARKS) == 22
    assert set(benchmark_names()) == SPEC_BENCHMARKS | {"videomme_subtitles", "video_r1"}
    for name in benchmark_names():
        cls = adapter_class(name)
        assert cls.name == name and cls.annotations and cls.title
        # every protocol default is a valid clip parameter set
        from services.common.frames import VideoParams

        VideoParams.model_validate({"family": "qwen3_vl", **cls.video})


def test_unknown_benchmark_and_option_are_errors():
    with pytest.raises(
        BenchmarkError, match="unknown benchmark 'videome'; registered benchmarks: charades_sta"
    ):
        get_benchmark("videome")
    with pytest.raises(BenchmarkError, match="benchmark 'mvbench' options: frames: Extra inputs"):
        get_benchmark("mvbench", frames=8)
    assert get_benchmark("stvg", video_seconds=10).options.video_seconds == 10


def test_a_name_registers_once():
    class Twin(Benchmark):
        name = "mvbench"

    with pytest.raises(ValueError, match="registered twice"):
        register(Twin)


def test_missing_annotations_name_the_globs(tmp_path):
    with pytest.raises(
        BenchmarkError, match=r"mvbench: no annotation files under .* \(looked for json/\*\.json\)"
    ):
        get_benchmark("mvbench").find_annotations(tmp_path)
