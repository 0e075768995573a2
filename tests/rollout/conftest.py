"""Session fixtures for rollout tests: tiny checkpoints, a frame store with real decoded clips, and
one engine per family started on first use and shared (an engine start costs ~20 s here).

Every engine is shut down at the end of the session, and its teardown asserts that it left nothing
behind: none of the /dev/shm/psm_* segments its processes mapped, no private temp folder (which held
its ZMQ socket and gloo rendezvous files), and no new socket, vllm_dist_* or psm_* entry in the
session's temp directory. Only what this session's processes made is judged: other sessions' engines
on the machine use /dev/shm too.
"""

from __future__ import annotations

import asyncio
import stat
import tempfile
import threading
import traceback
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
import torch

from services.common.frames import FrameStore, VideoParams, clip_key, decode_clip
from services.common.frames.hashing import content_hash
from services.common.frames.synthetic import make_video
from services.common.tiny_models import build_tiny_model
from services.rollout.config import EngineConfig, RolloutConfig

FAMILIES = ("qwen2_5_vl", "qwen3_vl")
LEFTOVER_PREFIXES = ("vllm_dist_", "psm_")


def leftovers() -> set[str]:
    """Entries of the session's temp dir (tests/conftest.py gives each session its own TMPDIR) that
    an engine must not leave: sockets (ZMQ ipc), gloo rendezvous files and shared-memory files."""
    found = set()
    folder = Path(tempfile.gettempdir())
    for entry in folder.iterdir():
        try:
            is_socket = stat.S_ISSOCK(entry.lstat().st_mode)
        except FileNotFoundError:  # removed between listing and stat
            continue
        if is_socket or entry.name.startswith(LEFTOVER_PREFIXES):
            found.add(str(entry))
    return found


def small_config(**updates: Any) -> RolloutConfig:
    """Small and exact: fp32 so vLLM and HF logprobs can be compared to 1e-5."""
    base = RolloutConfig(
        n=4,
        max_tokens=12,
        engine=EngineConfig(dtype="float32", max_model_len=2048, kv_cache_gib=0.25),
    )
    return RolloutConfig.model_validate({**base.model_dump(), **updates})


@pytest.fixture(scope="session")
def shm_segments(own_shm: Callable[[], set[Path]]) -> Callable[[], set[Path]]:
    """``shm_segments()``: the /dev/shm/psm_* and vllm_dist_* files this session's processes map now.
    A segment still on disk after its engine stopped is a leak (``leaked(segments)``)."""

    def engine_segments() -> set[Path]:
        return {path for path in own_shm() if path.name.startswith(LEFTOVER_PREFIXES)}

    return engine_segments


def leaked(segments: set[Path]) -> set[Path]:
    """Those of ``segments`` that still exist: their engine is gone, so nobody will unlink them."""
    return {path for path in segments if path.exists()}


@pytest.fixture
def make_config() -> Callable[..., RolloutConfig]:
    """``make_config(**updates)``: the tests' small fp32 config with some fields replaced."""
    return small_config


@pytest.fixture(scope="session")
def tiny_models(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("tiny-models")
    return {family: build_tiny_model(family, root / family, seed=0) for family in FAMILIES}


@dataclass
class Clips:
    """Clips decoded once into a frame store: keys[family][name], and the params they used."""

    store: FrameStore
    keys: dict[str, dict[str, str]] = field(default_factory=dict)
    params: dict[str, dict[str, VideoParams]] = field(default_factory=dict)
    videos: dict[str, Path] = field(default_factory=dict)


# name → (seconds, fps, width, height, frames kept, max pixels in merged patches)
# "tall_in_time": 8 frames of 56x56 (patch 14) → grid (4, 4, 4) → merged (4, 2, 2): the temporal
# extent (4) exceeds the spatial one (2), where transformers' M-RoPE rule departs from vLLM's.
CLIP_SPECS = {
    "tall_in_time": (2.0, 30, 320, 240, 8, 6),
    "wide": (3.0, 25, 426, 240, 4, 12),
}


@pytest.fixture(scope="session")
def clips(tmp_path_factory: pytest.TempPathFactory) -> Clips:
    root = tmp_path_factory.mktemp("rollout-clips")
    result = Clips(store=FrameStore(root / "frames"))
    for name, (seconds, fps, width, height, _, _) in CLIP_SPECS.items():
        result.videos[name] = make_video(
            root / f"{name}.mp4", seconds=seconds, fps=fps, width=width, height=height
        )
    for family in FAMILIES:
        result.keys[family], result.params[family] = {}, {}
        factor = 32 if family == "qwen3_vl" else 28
        for name, (*_, nframes, max_tokens) in CLIP_SPECS.items():
            params = VideoParams(
                family=family,
                fps=None,
                nframes=nframes,
                min_pixels=4 * factor**2,
                max_pixels=max_tokens * factor**2,
            )
            video = result.videos[name]
            key = clip_key(content_hash(video), params)
            frames, meta = decode_clip(video, params)
            result.store.put(key, frames, meta)
            result.keys[family][name] = key
            result.params[family][name] = params
    # A still image: one 150x200 frame, stored as a single-frame entry and resized by the processor.
    image = torch.randint(
        0, 256, (1, 150, 200, 3), dtype=torch.uint8, generator=torch.Generator().manual_seed(0)
    )
    # "params": {} (no decode parameters: not a decoded video) because FrameStore.load reads
    # meta["params"] even when nothing is expected of it
    result.store.put("still-image", image, {"source": "synthetic", "params": {}})
    return result


class EngineRegistry:
    """Starts engines on first request, shares them, and checks each one cleans up at shutdown."""

    def __init__(self, segments: Callable[[], set[Path]]) -> None:
        self._segments = segments
        self._engines: dict[str, Any] = {}
        self._footprints: dict[str, tuple[set[Path], Path]] = {}
        self._stoppers: dict[str, Callable[[], None]] = {}
        self._baseline: set[str] | None = None  # leftovers() before the first engine still running

    def get(self, name: str, start: Callable[[], Any], stop: Callable[[Any], None] | None = None) -> Any:
        if name not in self._engines:
            if self._baseline is None:
                self._baseline = leftovers()
            before = self._segments()
            engine = start()
            self._engines[name] = engine
            self._footprints[name] = (self._segments() - before, engine.temp_folder)
            self._stoppers[name] = (lambda: stop(engine)) if stop else engine.shutdown
        return self._engines[name]

    def shutdown_all(self) -> list[str]:
        """Stop every engine started so far; returns what each left behind (each checked once)."""
        problems = []
        stoppers, self._stoppers = self._stoppers, {}
        # all at once: each stop mostly waits (vLLM gives its worker ~3 s to exit, then joins the engine
        # core), ~5 s an engine here, and the engines share nothing that one's stop could disturb
        failures = stop_all(stoppers)
        for name in stoppers:
            if name in failures:
                problems.append(f"engine {name} failed to stop: {failures[name]}")
            # forgotten with its process: a later rollout test in this session (under pytest-xdist a
            # worker may come back to tests/rollout after other files) starts a fresh one
            self._engines.pop(name, None)
            segments, private = self._footprints.pop(name)
            left = leaked(segments)
            if left:
                problems.append(f"engine {name} left shared-memory segments {sorted(map(str, left))}")
            if private.exists():
                problems.append(f"engine {name} left its temp folder {private}: {sorted(private.iterdir())}")
        if self._baseline is not None:
            new = leftovers() - self._baseline
            if new:
                problems.append(f"engines {sorted(stoppers)} left {sorted(new)}")
            self._baseline = None
        return problems


def stop_all(stoppers: dict[str, Callable[[], None]]) -> dict[str, str]:
    """Call every stopper at once, each on a daemon thread (one that hangs cannot keep the process from
    exiting; the join is where a test's timeout interrupts the wait), and return the traceback of each
    that raised, by name."""
    failures: dict[str, str] = {}

    def run(name: str, stop: Callable[[], None]) -> None:
        try:
            stop()
        except BaseException as exc:  # reported with the engine's name, not lost in a thread
            failures[name] = "".join(traceback.format_exception(exc)).strip()

    threads = [
        threading.Thread(target=run, args=item, name=f"stop-{item[0]}", daemon=True) for item in stoppers.items()
    ]  # fmt: skip
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    return failures


_registry: EngineRegistry | None = None


@pytest.fixture(scope="session")
def engine_registry(loop_thread: LoopThread, shm_segments) -> Iterator[EngineRegistry]:
    # depends on loop_thread so that the loop outlives every engine (async ones shut down on it)
    global _registry
    _registry = EngineRegistry(shm_segments)
    yield _registry
    problems = _registry.shutdown_all()
    assert not problems, "; ".join(problems)


def pytest_runtest_teardown(item: pytest.Item, nextitem: pytest.Item | None) -> None:
    """Stop the engines as soon as the last rollout test is done: later test directories get their
    memory back (session-scoped fixtures would otherwise live until the very end)."""
    here = Path(__file__).parent
    if _registry is not None and (nextitem is None or here not in Path(nextitem.path).parents):
        problems = _registry.shutdown_all()
        assert not problems, "; ".join(problems)


@pytest.fixture(scope="session")
def rollout_engine(engine_registry: EngineRegistry, tiny_models, clips) -> Callable[[str], Any]:
    """``rollout_engine(family)``: the session's shared ``RolloutEngine`` for a tiny checkpoint."""
    from services.rollout.engine import RolloutEngine

    def get(family: str) -> Any:
        return engine_registry.get(
            f"llm-{family}", lambda: RolloutEngine(tiny_models[family], small_config(), source=clips.store)
        )

    return get


class LoopThread:
    """An event loop on its own thread: AsyncLLM binds to the loop it first runs on, so a shared async
    engine needs one loop for the whole session."""

    def __init__(self) -> None:
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, name="rollout-test-loop", daemon=True)
        self.thread.start()

    def run(self, coro: Any, timeout: float = 300.0) -> Any:
        return asyncio.run_coroutine_threadsafe(coro, self.loop).result(timeout)

    def close(self) -> None:
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(10)
        self.loop.close()


@pytest.fixture(scope="session")
def loop_thread() -> Iterator[LoopThread]:
    runner = LoopThread()
    yield runner
    runner.close()


@pytest.fixture
def async_engine(engine_registry: EngineRegistry, loop_thread: LoopThread, tiny_models, clips) -> Any:
    """A shared ``AsyncRolloutEngine`` on the Qwen2.5-VL tiny checkpoint, living on ``loop_thread``.
    Asked of the registry per test, not cached for the session: the registry stops its engines when a
    session leaves tests/rollout, and under pytest-xdist (longest files first) a session comes back,
    where a cached engine would be the stopped one ('NoneType' object has no attribute 'generate')."""
    from services.rollout.async_engine import AsyncRolloutEngine

    async def start() -> AsyncRolloutEngine:
        return AsyncRolloutEngine(tiny_models["qwen2_5_vl"], small_config(), source=clips.store)

    return engine_registry.get(
        "async-qwen2_5_vl",
        lambda: loop_thread.run(start()),
        stop=lambda engine: loop_thread.run(engine.aclose()),
    )


@pytest.fixture(scope="session")
def hf_model() -> Callable[[Path], Any]:
    """``hf_model(path)``: the transformers model of a checkpoint in fp32 eval mode, loaded once."""
    from transformers import AutoModelForImageTextToText

    cache: dict[Path, Any] = {}

    def get(path: Path) -> Any:
        if path not in cache:
            cache[path] = AutoModelForImageTextToText.from_pretrained(path, dtype=torch.float32).eval()
        return cache[path]

    return get


@pytest.fixture(scope="session")
def video_sample(clips: Clips) -> Callable[..., Any]:
    """``video_sample(family, clip, sample_id, **fields)``: a sample asking about one stored clip, with
    the clip's canonical decode parameters as a preprocess output row carries them (``clip_params``)."""
    from services.rollout.samples import RolloutSample

    def make(family: str, clip: str, sample_id: str, **fields: Any) -> RolloutSample:
        return RolloutSample(
            id=sample_id,
            prompt=fields.pop("prompt", "What happens in the video?"),
            videos=(clips.keys[family][clip],),
            clip_params=(clips.params[family][clip].canonical(),),
            **fields,
        )

    return make


@pytest.fixture(scope="session")
def hf_logprobs() -> Callable[..., torch.Tensor]:
    """``hf_logprobs(engine, model, sample, response_ids, vllm_rule=True)``: the HF model's
    teacher-forced logprobs of a response, with the engine's processor and clip, shape (R,)."""
    from services.rollout import consistency
    from services.rollout.media import load_media
    from services.rollout.prompts import render_prompt

    def compute(
        engine: Any, model: Any, sample: Any, response_ids: list[int], vllm_rule: bool = True
    ) -> torch.Tensor:
        processor = engine.checkpoint.processor
        media = load_media(sample, engine.source, engine.checkpoint.family, None)
        inputs = consistency.processor_inputs(
            processor, render_prompt(processor, sample), media, engine.config
        )
        return consistency.response_logprobs(
            model, processor, inputs, response_ids, vllm_rule=vllm_rule, sample_id=sample.id
        )

    return compute
