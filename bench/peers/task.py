"""The work every framework of the peer bench does: the direction task's samples (video, and the same
frames as images), the held-out split, the warm-started checkpoint they all start from, and the one
set of GRPO settings (:class:`Budget`) every side is configured from.

Everything here runs in the product venv; the peers' drivers read what it writes (files and a JSON
spec), never import it.
"""

from __future__ import annotations

import json
import shutil
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from bench.bench_learning import RL_CONFIG, run_train

FAMILY = "qwen2_5_vl"
TASK = "direction"
#: the frames of one video as the image form holds them (nframes, and the 56x56 of 3136 pixels)
FRAMES = 4
PIXELS = 56 * 56


@dataclass(frozen=True)
class Budget:
    """The GRPO settings every framework gets (examples/tiny_cpu_rl.yaml's, the pure-RL part)."""

    steps: int
    val_every: int
    group: int = 8  # completions per prompt (ReelRL rollout.n, TRL num_generations)
    prompts: int = 8  # prompts per optimizer step: 64 completions
    lr: float = 3.0e-4
    betas: tuple[float, float] = (0.9, 0.999)
    adam_eps: float = 1.0e-8
    weight_decay: float = 0.0
    grad_clip: float = 1.0
    clip_low: float = 0.2  # PPO clip (ReelRL's ppo defaults: DAPO's clip-higher)
    clip_high: float = 0.28
    max_tokens: int = 8
    temperature: float = 1.0
    seed: int = 0

    def reelrl_overrides(self) -> list[str]:
        """The same settings as ``reelrl train`` overrides on examples/tiny_cpu_rl.yaml (most are its
        values already; naming them keeps both sides reading one source)."""
        return [
            f"data.batch_size={self.prompts}", f"rollout.n={self.group}", f"actor.optim.lr={self.lr}",
            f"actor.optim.betas=[{self.betas[0]},{self.betas[1]}]", f"actor.optim.eps={self.adam_eps}",
            f"actor.optim.weight_decay={self.weight_decay}", f"actor.optim.grad_clip={self.grad_clip}",
            "actor.optim.schedule=constant", "actor.optim.warmup_steps=0",
            f"algorithm.clip_ratio_low={self.clip_low}", f"algorithm.clip_ratio_high={self.clip_high}",
            f"rollout.max_tokens={self.max_tokens}", f"rollout.temperature={self.temperature}",
            "rollout.top_p=1.0", "rollout.top_k=null", "rollout.val_temperature=0.0",
            f"trainer.total_steps={self.steps}", f"trainer.val_freq={self.val_every}", "trainer.save_freq=0",
            f"trainer.seed={self.seed}", f"data.seed={self.seed}",
        ]  # fmt: skip


@dataclass(frozen=True)
class TaskFiles:
    """Where one bench run's data lives (all under the work folder)."""

    data: Path  # make_task_datasets' folder: videos and the video-form JSONL files

    @property
    def model(self) -> Path:
        return self.data / "tiny-qwen2_5_vl"

    def split(self, split: str, form: str) -> Path:
        """``direction_<split>.jsonl`` (video) or ``direction_<split>_images.jsonl`` (image form)."""
        return self.data / f"{TASK}_{split}{'_images' if form == 'image' else ''}.jsonl"


def prepare(work: Path, train_videos: int, val_videos: int) -> TaskFiles:
    """The direction task's videos and samples, the image form of each split and the tiny model."""
    from services.common.synthetic_tasks import make_task_datasets
    from services.common.tiny_models import build_tiny_model

    files = TaskFiles(work / "reelrl-data")
    stamp = files.data / "peers.json"
    wanted = {"train_videos": train_videos, "val_videos": val_videos}
    if not stamp.exists() or json.loads(stamp.read_text()) != wanted:
        shutil.rmtree(files.data, ignore_errors=True)
        for stale in work.glob("warmup*"):  # warm starts of the data replaced here
            shutil.rmtree(stale, ignore_errors=True)
        make_task_datasets(files.data, train_videos=train_videos, val_videos=val_videos)
        for split in ("train", "val", "format"):
            write_image_form(files.split(split, "video"), files.split(split, "image"))
        build_tiny_model(FAMILY, files.model, seed=0)
        stamp.write_text(json.dumps(wanted))
    return files


def video_params():
    """The decode parameters of examples/tiny_cpu_rl.yaml's data section (4 frames of 56x56)."""
    from services.trainer.config import load_config

    params = load_config(RL_CONFIG).data.video_params(FAMILY)
    if params.nframes != FRAMES or params.min_pixels != PIXELS or params.max_pixels != PIXELS:
        raise ValueError(
            f"{RL_CONFIG}: the image form expects nframes={FRAMES} at {PIXELS} pixels, not {params}"
        )
    return params


def write_image_form(video_rows: Path, image_rows: Path) -> None:
    """Each sample's video as the frames our pipeline samples from it (decode_clip with the run's
    parameters: the 4 frames at 56x56 the model would see), written as 4 PNG images; the sample
    otherwise unchanged (same id, question, options, answer, offline output)."""
    from PIL import Image

    from services.common.frames import decode_clip

    params = video_params()
    out = []
    for line in video_rows.read_text().splitlines():
        row = json.loads(line)
        (video,) = row["videos"]
        stem = Path(video).stem
        frames, _ = decode_clip(video_rows.parent / video, params)
        names = []
        for i, frame in enumerate(frames.numpy()):
            name = f"frames/{stem}_{i}.png"
            path = image_rows.parent / name
            path.parent.mkdir(parents=True, exist_ok=True)
            if not path.exists():
                Image.fromarray(frame).save(path)
            names.append(name)
        image_row = {k: v for k, v in row.items() if k != "videos"}
        out.append({**image_row, "data_type": "image", "images": names})
    image_rows.write_text("".join(json.dumps(r) + "\n" for r in out))


def form_overrides(files: TaskFiles, form: str) -> list[str]:
    """``reelrl train`` overrides that point a run at one input form's train and held-out splits."""
    over = [
        f"data.train_files=[{files.split('train', form)}]",
        f"data.val_files=[{files.split('val', form)}]",
    ]
    if form == "image":
        # the frames at exactly the size the video path samples them (56x56), four images per prompt
        over += [
            f"data.image_min_pixels={PIXELS}", f"data.image_max_pixels={PIXELS}",
            f"rollout.engine.limit_mm_per_prompt.image={FRAMES}", "rollout.engine.limit_mm_per_prompt.video=0",
        ]  # fmt: skip
    return over


def warm_start(files: TaskFiles, work: Path, steps: int | None = None) -> tuple[Path, list[dict]]:
    """The format warm start of examples/tiny_cpu_rl.yaml (its ``warmup:`` section: supervised steps on
    uniformly random answer letters; ``steps`` overrides its 120), made once by ReelRL and saved as an HF
    checkpoint that every framework's GRPO starts from. No RL step runs (total_steps=0). The trainer saves
    the warmed weights when a reference model is configured (it is KL's anchor), so KL is named with
    coefficient 0: the folder ``reference/`` is the warm start, nothing else. Returns it and the run's
    metrics rows (its step-0 validation, on the video form). Reused when an earlier bench run with the
    same data and steps left it; ``steps=0`` starts everyone from the random weights."""
    if steps == 0:
        return files.model, []
    name = "warmup" if steps is None else f"warmup-{steps}"
    checkpoint = work / name / "reference"
    rows_file = work / name / "metrics.jsonl"
    if (checkpoint / "config.json").exists() and rows_file.exists():
        return checkpoint, [json.loads(x) for x in rows_file.read_text().splitlines() if x.strip()]
    overrides = [
        f"actor.model_path={files.model}", f"warmup.files=[{files.split('format', 'video')}]",
        f"data.train_files=[{files.split('train', 'video')}]", f"data.val_files=[{files.split('val', 'video')}]",
        "trainer.total_steps=0", "algorithm.kl.mode=loss", "algorithm.kl.coef=0.0",
        *([] if steps is None else [f"warmup.steps={steps}"]),
    ]  # fmt: skip
    rows = run_train(RL_CONFIG, overrides, work, name)
    if not (checkpoint / "config.json").exists():
        raise RuntimeError(f"the warm start left no checkpoint at {checkpoint}")
    return checkpoint, rows


def driver_spec(files: TaskFiles, model: Path, budget: Budget, form: str, out: Path) -> dict[str, Any]:
    """What a peer's driver needs, as plain JSON: the checkpoint, the samples (prompt text, image paths,
    the reward library's sample) and the budget."""
    return {
        "model": str(model),
        "form": form,
        "train": sample_views(files.split("train", form)),
        "val": sample_views(files.split("val", form)),
        "budget": asdict(budget),
        "out": str(out),
    }


def sample_views(path: Path) -> list[dict[str, Any]]:
    """Each sample as the product's data path sees it: the prompt our trainer renders for it (the reward
    library's template of its question and options), its media as absolute paths, and the reward
    library's sample that scores its answers."""
    from services.common.samples import load_samples, reward_fields
    from services.reward import render_prompt

    views = []
    for sample in load_samples(path):
        reward = reward_fields(sample, FAMILY)
        views.append(
            {
                "id": sample.id,
                "prompt": render_prompt(reward, variant="instruct"),
                "images": [str((path.parent / p).resolve()) for p in sample.images],
                "videos": [str((path.parent / p).resolve()) for p in sample.videos],
                "reward": reward,
            }
        )
    return views
