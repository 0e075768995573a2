"""A small synthetic video QA dataset, so `reelrl preprocess` (and the demo) runs on a fresh machine."""

from __future__ import annotations

import json
from pathlib import Path

from services.common.frames.synthetic import make_video

# (file, seconds, width, height): short clips of a few sizes and lengths.
CLIPS = [
    ("clip_a.mp4", 4.0, 320, 240),
    ("clip_b.mp4", 6.0, 426, 240),
    ("clip_c.mp4", 3.0, 240, 320),
    ("clip_d.mp4", 8.0, 480, 270),
]


def make_sample_dataset(root: Path, *, samples_per_clip: int = 2) -> Path:
    """Write videos under ``root/videos`` and ``root/train.jsonl``; returns the dataset path."""
    root.mkdir(parents=True, exist_ok=True)
    rows = []
    for name, seconds, width, height in CLIPS:
        video = root / "videos" / name
        if not video.exists():
            make_video(video, seconds=seconds, fps=30, width=width, height=height)
        for k in range(samples_per_clip):
            rows.append(
                {
                    "id": f"{video.stem}-{k}",
                    "problem": "How many seconds long is the video?"
                    if k == 0
                    else "Is a white square visible?",
                    "problem_type": "numerical" if k == 0 else "boolean",
                    "data_type": "video",
                    "videos": [f"videos/{name}"],
                    "answer": str(int(seconds)) if k == 0 else "yes",
                }
            )
    dataset = root / "train.jsonl"
    dataset.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return dataset
