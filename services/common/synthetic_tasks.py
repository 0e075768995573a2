"""Synthetic video tasks whose answers depend on what the video shows, for learning tests and the demo.

Every clip shows one coloured square moving across a dark background. Two multiple-choice questions:
- ``colour`` (appearance): which colour is the square; any single frame answers it.
- ``direction`` (time): which way it moves; only the order of frames answers it.
Options are always listed in the same order, so the question text is identical across samples and only
the video tells the answers apart. Train and validation splits use different videos (different seeds).
``make_image_task`` adds still images of the square for the colour question (joint image-video data).
Each train sample carries an ``offline_output``: the correct answer (the cold start that mix-policy
exists for), or, for the format warm start, a uniformly random letter (format without the answer).
"""

from __future__ import annotations

import json
import os
import random
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from services.common.frames.synthetic import write_rgb_clip

COLOURS = {"red": (230, 40, 40), "green": (40, 200, 60), "blue": (50, 80, 240), "yellow": (240, 220, 40)}
DIRECTIONS = ("left", "right", "up", "down")
LETTERS = "ABCD"
QUESTIONS = {
    "colour": ("What colour is the moving square?", tuple(COLOURS)),
    "direction": ("Which way does the square move?", DIRECTIONS),
}
TASKS = tuple(QUESTIONS)


@dataclass(frozen=True)
class Clip:
    name: str
    colour: str
    direction: str


def clip_frames(
    colour: str, direction: str, *, size: int = 64, frames: int = 16, seed: int = 0
) -> np.ndarray:
    """``(frames, size, size, 3)`` uint8: the square crosses the frame in ``direction``."""
    rng = np.random.default_rng(seed)
    background = rng.integers(10, 60, size=3)
    side = size // 4
    travel = size - side
    out = np.empty((frames, size, size, 3), dtype=np.uint8)
    out[:] = background
    # A little jitter on the fixed axis, so position alone never encodes the answer.
    fixed = int(rng.integers(side // 2, size - side - side // 2 + 1))
    for i in range(frames):
        pos = round(travel * i / max(frames - 1, 1))
        along = {"right": pos, "left": travel - pos, "down": pos, "up": travel - pos}[direction]
        x, y = (along, fixed) if direction in ("left", "right") else (fixed, along)
        out[i, y : y + side, x : x + side] = COLOURS[colour]
    return out


def make_clips(
    root: Path, prefix: str, count: int, seed: int, *, size: int = 64, frames: int = 16, fps: int = 8
) -> list[Clip]:
    """``count`` clips with balanced colours and directions (every pair appears), in a seeded order."""
    rng = random.Random(seed)
    pairs = [(c, d) for c in COLOURS for d in DIRECTIONS]
    chosen = [pairs[i % len(pairs)] for i in range(count)]
    rng.shuffle(chosen)
    clips = []
    for i, (colour, direction) in enumerate(chosen):
        name = f"{prefix}_{i:04d}.mp4"
        path = root / "videos" / name
        if not path.exists():
            write_rgb_clip(
                path, clip_frames(colour, direction, size=size, frames=frames, seed=seed * 100_003 + i), fps
            )
        clips.append(Clip(name=name, colour=colour, direction=direction))
    return clips


def task_sample(clip: Clip, task: str, *, split: str, offline: str | None) -> dict:
    """One sample row: ``offline`` is "correct", "random" (a uniformly random letter) or None."""
    question, options = QUESTIONS[task]
    truth = clip.colour if task == "colour" else clip.direction
    letter = LETTERS[options.index(truth)]
    row = {
        "id": f"{split}-{task}-{Path(clip.name).stem}",
        "problem": question,
        "problem_type": "multiple choice",
        "data_type": "video",
        "videos": [f"videos/{clip.name}"],
        "options": [f"{LETTERS[i]}. {o}" for i, o in enumerate(options)],
        "answer": letter,
        "task": task,
    }
    if offline == "correct":
        row["offline_output"] = f"<answer>{letter}</answer>"
    elif offline == "random":
        rng = random.Random(f"{row['id']}-format")
        row["offline_output"] = f"<answer>{rng.choice(LETTERS)}</answer>"
    return row


def _write_jsonl(path: Path, rows: list[dict]) -> None:
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    tmp.write_text("".join(json.dumps(r) + "\n" for r in rows))
    os.replace(tmp, path)


def make_task_datasets(
    root: Path,
    *,
    train_videos: int = 64,
    val_videos: int = 32,
    seed: int = 0,
    size: int = 64,
    seconds: float = 2.0,
    fps: int = 8,
) -> dict:
    """Write videos and, per task, ``<task>_train.jsonl`` (no answer anywhere but the ground truth the
    reward checks), ``<task>_mix.jsonl`` (the same samples with the correct answer as offline output),
    ``<task>_format.jsonl`` (offline answers uniformly random: a format warm start that teaches the
    answer format but not the answer) and ``<task>_val.jsonl`` (other videos). Returns {stem: path}.

    ``size`` × ``size`` pixels, ``seconds`` at ``fps``: the defaults make tiny clips that decode in
    milliseconds; larger ones make decoding cost what it costs on real data (the caching benchmark)."""
    root.mkdir(parents=True, exist_ok=True)
    shape = {"size": size, "frames": max(2, round(seconds * fps)), "fps": fps}
    train = make_clips(root, "train", train_videos, seed=seed + 1, **shape)
    val = make_clips(root, "val", val_videos, seed=seed + 2, **shape)
    written = {}
    for task in TASKS:
        files = {
            f"{task}_train": [task_sample(c, task, split="train", offline=None) for c in train],
            f"{task}_mix": [task_sample(c, task, split="train", offline="correct") for c in train],
            f"{task}_val": [task_sample(c, task, split="val", offline=None) for c in val],
            f"{task}_format": [task_sample(c, task, split="format", offline="random") for c in train],
        }
        for stem, rows in files.items():
            path = root / f"{stem}.jsonl"
            _write_jsonl(path, rows)
            written[stem] = path
    return written


def make_image_task(root: Path, count: int, *, seed: int = 3, size: int = 56) -> Path:
    """``count`` still PNG images of a coloured square (one frame of a clip) and
    ``colour_images_mix.jsonl``: the colour question about each image, the correct answer as offline
    output. Returns the JSONL path."""
    from PIL import Image

    rng = random.Random(seed)
    rows = []
    for i in range(count):
        colour, direction = list(COLOURS)[i % len(COLOURS)], rng.choice(DIRECTIONS)
        name = f"image_{seed}_{i:04d}.png"
        path = root / "images" / name
        if not path.exists():
            path.parent.mkdir(parents=True, exist_ok=True)
            frame = clip_frames(colour, direction, size=size, frames=2, seed=seed * 100_003 + i)[0]
            tmp = path.with_name(f".{name}.{os.getpid()}.tmp.png")
            Image.fromarray(frame).save(tmp)
            os.replace(tmp, path)
        letter = LETTERS[list(COLOURS).index(colour)]
        question, options = QUESTIONS["colour"]
        rows.append(
            {
                "id": f"image-colour-{i:04d}",
                "problem": question.replace("moving square", "square"),
                "problem_type": "multiple choice",
                "data_type": "image",
                "images": [f"images/{name}"],
                "options": [f"{LETTERS[j]}. {o}" for j, o in enumerate(options)],
                "answer": letter,
                "offline_output": f"<answer>{letter}</answer>",
            }
        )
    out = root / "colour_images_mix.jsonl"
    _write_jsonl(out, rows)
    return out
