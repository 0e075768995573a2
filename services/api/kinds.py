"""Job kinds: each names its config model (imported lazily by dotted path) and its Celery task.

A kind whose service is not installed (its config model does not import) answers "not available"
instead of accepting jobs nobody can run.
"""

from __future__ import annotations

import enum
import importlib
from dataclasses import dataclass
from typing import Any

from pydantic import BaseModel


class JobKind(enum.StrEnum):
    preprocess = "preprocess"
    train = "train"
    eval = "eval"


class KindUnavailable(LookupError):
    """The kind's service is not part of this installation."""


@dataclass(frozen=True)
class KindSpec:
    config_model: str  # "package.module:ClassName", a pydantic model that rejects unknown keys
    task: str  # Celery task name; called with kwargs {"job_id": ...}
    queue: str
    # Re-queues of a job whose worker died, unless REELRL_API_MAX_RETRIES or the submit says otherwise.
    max_retries: int = 0
    # A dotted config key no two live jobs of the kind may share (refused at submit, 409).
    exclusive: str | None = None

    def load_model(self) -> type[BaseModel]:
        module_name, _, attr = self.config_model.partition(":")
        try:
            model = getattr(importlib.import_module(module_name), attr)
        except (ImportError, AttributeError) as exc:
            raise KindUnavailable(f"{exc.__class__.__name__}: {exc}") from exc
        if not (isinstance(model, type) and issubclass(model, BaseModel)):
            raise TypeError(f"{self.config_model} is not a pydantic model")
        return model

    def validate(self, config: dict[str, Any]) -> dict[str, Any]:
        """The config checked by the service's own model, defaults filled in, as JSON types.

        Raises ``pydantic.ValidationError`` naming the bad fields, or :class:`KindUnavailable`.
        """
        from services.common.config_files import check_finite_fields

        model = self.load_model().model_validate(config)
        check_finite_fields(model)  # "Infinity" or "1e400" as a string, which pydantic reads as a float
        return model.model_dump(mode="json")


KINDS: dict[JobKind, KindSpec] = {
    # Waits on the clip tasks of the `preprocess` queue, so it runs in a pool of its own: a
    # coordinator holding the pool's only slot would wait forever for clips nobody decodes.
    # Retried twice: decoded clips are content-addressed, so a retry decodes only what is missing.
    JobKind.preprocess: KindSpec(
        "services.preprocess.job_config:PreprocessJobConfig", "reelrl.preprocess.job", "preprocess-jobs", 2
    ),
    # Over the API a train config may only name files inside the data roots (TrainJobConfig).
    # Retried once: the retry resumes from the last checkpoint (trainer.resume=auto) and recomputes
    # only the steps after it, but a death that repeats (out of memory) would hold the GPUs each time.
    # One live job per trainer.output_dir: a second would fight over its checkpoints.
    JobKind.train: KindSpec(
        "services.trainer.config:TrainJobConfig", "reelrl.train.run", "train", 1, "trainer.output_dir"
    ),
    # Over the API an eval config may only name files inside the data roots (EvalJobConfig).
    # Retried twice: the run id is the job id, so a retry skips every sample already scored.
    # One live job per output_dir (when given; the default is the run's own folder), and a folder
    # earlier jobs used belongs to their owner: a second would overwrite its samples and summaries.
    JobKind.eval: KindSpec("services.eval.config:EvalJobConfig", "reelrl.eval.run", "eval", 2, "output_dir"),
}


def kind_spec(kind: JobKind | str) -> KindSpec:
    try:
        return KINDS[JobKind(kind)]
    except ValueError:
        raise KindUnavailable(
            f"unknown job kind {kind!r}; known: {', '.join(k.value for k in JobKind)}"
        ) from None
