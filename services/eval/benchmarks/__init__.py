"""Benchmark adapters, one module each; importing this package registers every one of them."""

from services.eval.benchmarks import (  # noqa: F401 - imported for their @register side effect
    charades_sta,
    livesports3k,
    longvideo_reason,
    longvideobench,
    lvbench,
    minerva,
    mlvu,
    mmvu,
    motionbench,
    mvbench,
    odvbench,
    ovobench,
    stvg,
    tempcompass,
    vcrbench,
    video_holmes,
    video_r1,
    videomathqa,
    videomme,
    videomme_v2,
    videommmu,
    videoreasonbench,
    vsibench,
)
from services.eval.benchmarks.base import Benchmark
from services.eval.benchmarks.errors import BenchmarkError
from services.eval.benchmarks.registry import adapter_class, benchmark_names, get_benchmark, register
from services.eval.benchmarks.results import Cell, ItemResult, Summary

__all__ = [
    "Benchmark",
    "BenchmarkError",
    "Cell",
    "ItemResult",
    "Summary",
    "adapter_class",
    "benchmark_names",
    "get_benchmark",
    "register",
]
