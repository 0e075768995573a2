"""Rollouts to read (``trainer.rollout_log``): every ``every``-th step, the first ``max_groups`` groups of
the step's batch go to ``OUTPUT_DIR/rollouts/step_NNNNNN.jsonl``, one JSON object per group: its prompt,
clips and ground truth, and each response with its rewards, advantage and length. The same records
reach the experiment trackers (:meth:`services.trainer.tracking.MetricsLogger.log_rollouts`).

A step's file belongs to the run's history like its metrics: written whole (a temp file renamed into
place), and a run resuming from a checkpoint first removes the files of the steps after it
(:meth:`RolloutLog.discard_after`), which it then writes again; generation is a function of the step
(``services/rollout/seeds.py``), so they come back the same. docs/training.md, "Looking at rollouts".
"""

from __future__ import annotations

import contextlib
import json
import math
import re
from collections.abc import Callable, Iterable, Mapping, Sequence
from contextlib import AbstractContextManager
from pathlib import Path
from typing import TYPE_CHECKING, Any

from services.common.atomic_files import atomic_text
from services.common.frames import FrameStore
from services.common.frames.store import META_FILE
from services.common.rollout_files import ROLLOUTS_DIR, rollout_file, step_of
from services.rollout.prompts import IMAGE_PLACEHOLDER, VIDEO_PLACEHOLDER
from services.rollout.samples import RolloutGroup
from services.trainer.config import RolloutLogConfig

if TYPE_CHECKING:
    import torch

    from services.trainer.data import TrainSample
    from services.trainer.loop import Scored

# a run of vision placeholders, as the processor expands one image's or video's (one per merged patch)
_PLACEHOLDER_RUN = re.compile(f"({re.escape(IMAGE_PLACEHOLDER)}|{re.escape(VIDEO_PLACEHOLDER)})\\1+")
#: what a sink gets: the step and its records (MetricsLogger.log_rollouts sends them to the trackers)
RolloutSink = Callable[[int, list[dict[str, Any]]], None]
PhaseTimer = Callable[[str], AbstractContextManager[None]]


def records_text(records: Iterable[Mapping[str, Any]]) -> str:
    """The JSONL text of ``records``: one object a line."""
    return "".join(json.dumps(r, ensure_ascii=False, allow_nan=False) + "\n" for r in records)


def _number(value: float) -> float | None:
    """JSON has no NaN or infinity: a non-finite value is written as null."""
    value = float(value)
    return value if math.isfinite(value) else None


def response_advantage(token_advantages: torch.Tensor) -> float | None:
    """A response's sequence-level advantage: the mean of its token advantages ``[response_len]`` (0 for
    an empty response; null when not finite)."""
    if token_advantages.numel() == 0:
        return 0.0
    return _number(token_advantages.double().mean())


def full_prompt(tokenizer: Any, prompt_token_ids: Sequence[int]) -> str:
    """The prompt as the engine took it (chat template, system turn, assistant prefix), decoded from its
    token ids; each image's or video's run of placeholder tokens shown as one placeholder, as the chat
    template writes it (the vision features themselves are not text)."""
    text = tokenizer.decode(list(prompt_token_ids), skip_special_tokens=False)
    return _PLACEHOLDER_RUN.sub(r"\1", text)


def rollout_records(
    step: int,
    samples: Sequence[TrainSample],
    groups: Sequence[RolloutGroup],
    scored: Scored,
    advantages: Sequence[torch.Tensor],
    *,
    max_groups: int,
    timestamps: Mapping[str, Sequence[float]],
    prompts_full: Sequence[str | None] | None = None,
) -> list[dict[str, Any]]:
    """One record per group for the first ``max_groups`` groups of a step's batch.

    ``scored`` and ``advantages`` are the step's, flattened in (sample, response) order over the whole
    batch (``advantages[i]``: response i's token advantages, ``[len(token_ids)]``); ``timestamps`` maps
    a clip's frame-store key to the seconds of its sampled frames (a key it lacks: ``[]``);
    ``prompts_full[g]``: group g's prompt as the engine took it (None, or no list: null)."""
    records: list[dict[str, Any]] = []
    first = 0  # flat index of the group's first response
    for g, (sample, group) in enumerate(zip(samples, groups, strict=True)):
        if g >= max_groups:
            break
        rollout = sample.rollout
        clips = [{"key": k, "timestamps": [float(t) for t in timestamps.get(k, ())]} for k in rollout.videos]
        clips += [{"key": k, "timestamps": []} for k in rollout.images]
        responses = []
        for j, response in enumerate(group.responses):
            i = first + j
            reward = {
                "overall": _number(scored.overall[i]),
                "accuracy": _number(scored.accuracy[i]),
                "format": _number(scored.format[i]),
            }
            for name, values in scored.parts.items():
                reward.setdefault(name, _number(values[i]))
            responses.append(
                {
                    "index": j,
                    "text": response.text,
                    "reward": reward,
                    "advantage": response_advantage(advantages[i]),
                    "length": len(response.token_ids),
                    "offline": response.offline,
                    "engine": group.engine,  # the fleet's index of the engine that generated it
                    "error": scored.item_errors[i] if scored.item_errors else None,
                }
            )
        records.append(
            {
                "step": step,
                "group": g,
                "sample_id": sample.sample.id,
                "problem_type": sample.problem_type,
                "prompt": rollout.prompt,
                "prompt_full": prompts_full[g] if prompts_full is not None else None,
                "answer": sample.reward.get("answer", sample.sample.answer),
                "clips": clips,
                "responses": responses,
            }
        )
        first += len(group.responses)
    return records


def store_timestamps(store: FrameStore, keys: Iterable[str]) -> dict[str, list[float]]:
    """The sampled frames' seconds of each clip in ``keys``, from its frame-store ``meta.json``; a clip the
    store does not hold (``data.source_mode: realtime_only`` decodes without storing) is left out."""
    found: dict[str, list[float]] = {}
    for key in keys:
        path = store.path_for(key) / META_FILE
        try:
            meta = json.loads(path.read_text())
        except FileNotFoundError:
            continue
        except ValueError as exc:
            raise ValueError(f"clip {key}: unreadable {path}: {exc}") from exc
        found[key] = [float(t) for t in meta.get("timestamps", [])]
    return found


class RolloutLog:
    """Writes the rollout records of the steps ``config`` asks for, and hands them to ``sinks``.

    ``store``: where clips' timestamps are read (None: none); ``tokenizer``: decodes the prompts the
    engine took (None: ``prompt_full`` is null)."""

    def __init__(
        self,
        output_dir: Path,
        config: RolloutLogConfig,
        *,
        store: FrameStore | None = None,
        tokenizer: Any = None,
        sinks: Sequence[RolloutSink] = (),
    ) -> None:
        self.folder = Path(output_dir) / ROLLOUTS_DIR
        self.every, self.max_groups = config.every, config.max_groups
        self.store, self.tokenizer, self.sinks = store, tokenizer, list(sinks)

    def due(self, step: int) -> bool:
        return bool(self.every) and step % self.every == 0

    def discard_after(self, step: int) -> list[int]:
        """Remove the files of the steps after ``step`` (a resume from its checkpoint writes them again;
        with ``step`` 0, a fresh start, every file) and any temp file a killed write left. Returns the
        steps removed."""
        removed = []
        if not self.folder.is_dir():
            return removed
        for path in sorted(self.folder.iterdir()):
            logged = step_of(path.name)
            if logged is not None and logged > step:
                path.unlink()
                removed.append(logged)
            elif path.name.startswith(".step_") and path.name.endswith(".tmp"):
                path.unlink()
        return removed

    def write(
        self,
        step: int,
        samples: Sequence[TrainSample],
        groups: Sequence[RolloutGroup],
        scored: Scored,
        advantages: Sequence[torch.Tensor],
        *,
        timer: PhaseTimer | None = None,
    ) -> list[dict[str, Any]] | None:
        """On a step that is due: the records of its first groups written to
        ``rollouts/step_NNNNNN.jsonl`` and sent to the sinks, timed as ``timer("rollout_log")``; None on
        other steps (nothing timed)."""
        if not self.due(step):
            return None
        with timer("rollout_log") if timer is not None else contextlib.nullcontext():
            shown = list(zip(samples, groups, strict=True))[: self.max_groups]
            keys = [k for s, _ in shown for k in s.rollout.videos]
            times = store_timestamps(self.store, keys) if self.store is not None else {}
            prompts = None
            if self.tokenizer is not None:
                prompts = [full_prompt(self.tokenizer, g.prompt_token_ids) for _, g in shown]
            records = rollout_records(
                step, samples, groups, scored, advantages, max_groups=self.max_groups, timestamps=times,
                prompts_full=prompts,
            )  # fmt: skip
            with atomic_text(rollout_file(self.folder.parent, step)) as fh:
                fh.write(records_text(records))
            for sink in self.sinks:
                sink(step, records)
        return records
