"""When each step's batch is generated (``trainer.off_policy_steps``).

``0``: at the start of its step, by the weights the step updates (on-policy). ``1``: during the previous
step's update, by the weights before that update, so the engines generate while the actor learns (as
verl's one-step-off-policy recipe and AReaL do). A batch records that ``lag``: how many updates lie
between the weights that generated it and the weights that train on it. The loop takes batches from a
:class:`BatchSchedule` and never branches on the setting; only a lagging batch changes the loss, whose
importance ratio is then taken against the log-probs vLLM reported while sampling
(:func:`behaviour_log_probs`), not against the current weights.

The engines must not take new weights while they generate: :meth:`BatchSchedule.settle` waits for the
batch in flight before every push. A checkpoint holds the batch generated ahead (:func:`save_pending`),
so a resumed run trains on the very batch the uninterrupted one did.
"""

from __future__ import annotations

import json
import logging
import threading
from collections.abc import Callable, Sequence
from concurrent.futures import Future
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch

from services.rollout.samples import RolloutGroup

log = logging.getLogger(__name__)

PENDING_FILE = "pending_batch.json"
#: how long closing waits for a generation still in flight. The engines are stopped by then: Ray
#: engines end it at once; an in-process engine's shutdown first waits for its call to finish
#: (engine_base.IN_PROCESS_STOP_WAIT_S), so it has ended too. Past the limit the run's shutdown goes on.
CLOSE_WAIT_S = 30.0


@dataclass
class Batch:
    """One step's samples and their groups, with what generating them measured."""

    samples: list[Any]  # TrainSample
    groups: list[RolloutGroup]
    metrics: dict[str, float] = field(default_factory=dict)
    lag: int = 0  # updates between the generating weights and the trained ones


class BatchSchedule:
    """Hands out each step's :class:`Batch`; with ``off_policy_steps=1`` it starts generating the next
    step's batch (in a thread of its own; the engines work in their own processes) as soon as a step has
    taken its own, unless that step is the last."""

    def __init__(
        self,
        generate: Callable[[int], tuple[list[Any], list[RolloutGroup], dict[str, float]]],
        *,
        off_policy_steps: int,
        last_step: int,
    ) -> None:
        if off_policy_steps not in (0, 1):
            raise ValueError(f"off_policy_steps must be 0 or 1, got {off_policy_steps!r}")
        self._generate, self.off_policy_steps, self.last_step = generate, off_policy_steps, last_step
        self._ahead: tuple[int, Future[Batch]] | None = None

    def take(self, step: int) -> Batch:
        """Step ``step``'s batch: the one generated ahead for it (waiting for it if need be), else one
        generated now."""
        if self._ahead is not None and self._ahead[0] != step:
            raise RuntimeError(f"the batch generated ahead is for step {self._ahead[0]}, not {step}")
        if self._ahead is not None:
            # cleared once it has ended: interrupted meanwhile, close() still waits for it
            batch = self._ahead[1].result()
            self._ahead = None
        else:
            batch = Batch(*self._generate(step), lag=0)
        if self.off_policy_steps and step < self.last_step:
            future: Future[Batch] = Future()
            # a daemon: this thread does not hold the process open (the fleet's own calls, in its pool,
            # end when its engines stop)
            thread = threading.Thread(
                target=self._ahead_batch,
                args=(step + 1, future),
                name=f"rollout-ahead-{step + 1}",
                daemon=True,
            )
            self._ahead = (step + 1, future)
            thread.start()
        return batch

    def _ahead_batch(self, step: int, future: Future[Batch]) -> None:
        try:
            future.set_result(Batch(*self._generate(step), lag=self.off_policy_steps))
        except BaseException as exc:  # handed to whoever takes or settles the batch
            future.set_exception(exc)

    def settle(self) -> None:
        """Wait until no batch is being generated (before the engines take new weights); a generation
        that failed raises here, at once, rather than a step later."""
        if self._ahead is not None:
            self._ahead[1].result()

    def pending(self) -> tuple[int, Batch] | None:
        """The batch generated ahead and its step, once finished (what a checkpoint keeps)."""
        if self._ahead is None:
            return None
        step, future = self._ahead
        return step, future.result()

    def restore(self, step: int, batch: Batch) -> None:
        """Start from a checkpoint's pending batch for ``step`` (the resumed run's first)."""
        done: Future[Batch] = Future()
        done.set_result(batch)
        self._ahead = (step, done)

    def close(self, wait_s: float = CLOSE_WAIT_S) -> None:
        """Drop a batch generated ahead that no step will take. A generation still in flight (only when
        a step failed before it settled) is waited for at most ``wait_s``: the trainer stops the engines
        first, which ends it."""
        ahead, self._ahead = self._ahead, None
        if ahead is None:
            return
        try:
            # its own error is returned, not raised: no step takes it; what is raised here (a signal on
            # this thread) is this thread's and goes on
            error = ahead[1].exception(timeout=wait_s)
        except TimeoutError:
            log.warning(
                "the batch generated ahead for step %d was still generating after %.0f s", ahead[0], wait_s
            )
            return
        if error is not None:
            log.info("the batch generated ahead for step %d is dropped: %s", ahead[0], error)


def behaviour_log_probs(
    groups: Sequence[RolloutGroup], recomputed: Sequence[torch.Tensor] | None
) -> list[torch.Tensor | None]:
    """The old log-probs of a lagging batch's importance ratio, per response in (sample, response)
    order: the log-probs vLLM reported for the tokens it sampled (the behaviour policy's). An offline
    response, which no rollout policy produced, takes what it takes in an on-policy step: its
    ``recomputed`` row (the actor's own pass) when there is one, else None (the update's current
    log-probs, ``SequenceTargets``)."""
    rows = [r for g in groups for r in g.responses]
    if recomputed is not None and len(recomputed) != len(rows):
        raise ValueError(f"{len(recomputed)} recomputed rows for {len(rows)} responses")
    out = []
    for i, response in enumerate(rows):
        if response.offline:
            out.append(None if recomputed is None else recomputed[i])
        elif response.logprobs is None or len(response.logprobs) != len(response.token_ids):
            raise ValueError(
                f"response {i} carries {None if response.logprobs is None else len(response.logprobs)} "
                f"log-probs for {len(response.token_ids)} tokens: the engine must report one per token"
            )
        else:
            out.append(torch.tensor(response.logprobs, dtype=torch.float32))
    return out


def save_pending(folder: Path, pending: tuple[int, Batch] | None, samples: Sequence[Any]) -> None:
    """Write the batch generated ahead into a checkpoint's temp ``folder`` (nothing when there is none),
    which the trainer flushes and renames into place as a whole. Its samples are stored as positions in
    the run's ``samples`` (the checkpoint's identity pins that list)."""
    if pending is None:
        return
    step, batch = pending
    position = {id(s): i for i, s in enumerate(samples)}
    record = {
        "step": step,
        "lag": batch.lag,
        "samples": [position[id(s)] for s in batch.samples],
        "groups": [g.model_dump(mode="json") for g in batch.groups],
        "metrics": batch.metrics,
    }
    # floats as repr: the log-probs come back bit for bit
    (folder / PENDING_FILE).write_text(json.dumps(record))


def load_pending(folder: Path, samples: Sequence[Any]) -> tuple[int, Batch] | None:
    """The batch a checkpoint ``folder`` holds for its next step, or None."""
    path = folder / PENDING_FILE
    if not path.is_file():
        return None
    record = json.loads(path.read_text())
    groups = [RolloutGroup.model_validate(g) for g in record["groups"]]
    chosen = [samples[i] for i in record["samples"]]
    if [g.sample_id for g in groups] != [s.sample.id for s in chosen]:
        raise ValueError(f"{path}: its groups do not answer its samples")
    batch = Batch(chosen, groups, {k: float(v) for k, v in record["metrics"].items()}, lag=int(record["lag"]))
    return int(record["step"]), batch
