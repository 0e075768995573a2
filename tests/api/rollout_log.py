"""A train run's rollout log as the trainer writes it (``rollouts/step_NNNNNN.jsonl``), with its clips in a
real frame store: every frame is two flat colours, left and right, distinct per frame, so a thumbnail's
pixels tell which frame it shows and that it is not blank."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any

import numpy as np

from services.common.frames.store import FrameStore

FRAME_H, FRAME_W = 120, 200
#: left half of frame i; the right half is its complement (255 - c)
COLOURS = [(220, 30, 30), (30, 200, 40), (40, 60, 230), (240, 200, 20), (200, 40, 210), (20, 200, 210)]
IMAGE_KEY = hashlib.sha256(b"a still image").hexdigest()
XSS = '<script>window.__xss = 1</script><img src="x" onerror="window.__xss = 2"><b>bold?</b>'


def left_colour(frame: int) -> tuple[int, int, int]:
    return COLOURS[frame % len(COLOURS)]


def right_colour(frame: int) -> tuple[int, int, int]:
    return tuple(255 - c for c in left_colour(frame))


def clip_frames(count: int, first: int = 0) -> np.ndarray:
    """(count, H, W, 3) uint8: frame i has left_colour(first + i) on its left half, its complement right."""
    frames = np.empty((count, FRAME_H, FRAME_W, 3), dtype=np.uint8)
    for i in range(count):
        frames[i, :, : FRAME_W // 2] = left_colour(first + i)
        frames[i, :, FRAME_W // 2 :] = right_colour(first + i)
    return frames


def store_clip(store: FrameStore, name: str, count: int, first: int = 0) -> str:
    """A clip of ``count`` frames under a key like the store's own (hex sha256); its key."""
    key = hashlib.sha256(name.encode()).hexdigest()
    store.put(key, clip_frames(count, first), {"source": "synthetic", "params": {}, "name": name})
    return key


def response(index: int, text: str, overall: float, advantage: float, **extra: Any) -> dict[str, Any]:
    return {
        "index": index, "text": text,
        "reward": {"overall": overall, "accuracy": overall, "format": 1.0, **extra.pop("parts", {})},
        "advantage": advantage, "length": len(text.split()), "offline": False, "engine": 0, "error": None,
        **extra,
    }  # fmt: skip


def group(
    step: int, number: int, key: str, frames: int, responses: list[dict[str, Any]], **extra: Any
) -> dict:
    return {
        "step": step, "group": number, "sample_id": f"s{number}", "problem_type": "multiple choice",
        "prompt": f"What colour comes first? (group {number})", "answer": "A",
        "clips": [{"key": key, "timestamps": [0.5 * i for i in range(frames)]}],
        "responses": responses, **extra,
    }  # fmt: skip


def write_step(run: Path, step: int, groups: list[dict[str, Any]]) -> Path:
    path = run / "rollouts" / f"step_{step:06d}.jsonl"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(json.dumps(g) + "\n" for g in groups))
    return path


def write_run(run: Path, store: FrameStore) -> dict[str, Any]:
    """Steps 3 and 6 of a run: step 6 has two groups (one response is an XSS attempt; the second group
    also shows a still image), step 3 one group of a four-frame clip; every clip's frames in ``store``.
    Returns the clips' keys by name."""
    keys = {
        "a": store_clip(store, "clip-a", 4),
        "b": store_clip(store, "clip-b", 3, first=4),
        "c": store_clip(store, "clip-c", 2, first=2),
    }
    write_step(
        run, 3, [group(3, 0, keys["a"], 4, [response(0, "A", 1.0, 0.87), response(1, "B", 0.0, -0.87)])]
    )
    write_step(
        run,
        6,
        [
            group(6, 0, keys["b"], 3, [
                response(0, "The answer is A.", 1.0, 1.15, parts={"builtin": 1.0, "brevity": 0.4}),
                response(1, XSS, 0.0, -0.58, offline=True, engine=None),
                response(2, "Probably C", 0.25, -0.29),
            ], answer={"choice": "A", "note": "<i>json</i>"}),
            # beside its clip, a still image: read from its file, never stored, so no frames to show
            group(6, 1, keys["c"], 2, [response(0, "B", 0.5, 0.0), response(1, "B", 0.5, 0.0)],
                  clips=[{"key": keys["c"], "timestamps": [0.0, 0.5]}, {"key": IMAGE_KEY, "timestamps": []}]),
        ],
    )  # fmt: skip
    return keys
