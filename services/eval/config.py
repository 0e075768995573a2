"""The evaluation run's config: what to evaluate, how clips and prompts are made, how requests stream.

One typed tree, YAML plus dotted ``key=value`` overrides, unknown keys rejected. The run id is derived
from the fields that decide results (model and its weights, benchmarks, data, clip and prompt settings,
sampling, judge, and reward functions when there are any), so re-running the same command resumes the
same run; ``limit`` and the throughput knobs can change between attempts.
"""

from __future__ import annotations

import hashlib
import json
import re
from pathlib import Path
from typing import Any

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    ValidationError,
    ValidationInfo,
    field_validator,
    model_validator,
)

from services.common.trackers import MlflowConfig, TrackerName, WandbConfig
from services.eval.benchmarks import BenchmarkError, benchmark_names
from services.reward.config import RewardConfig, RewardFunctionConfig, repeated
from services.reward.functions import parse_target
from services.rollout.config import EngineConfig, RolloutConfig


class ConfigError(ValueError):
    """An unusable run config; the message names the field and the fix."""


# The run id names a folder under <REELRL_HOME>/eval and a key in the results store: a separator, a
# leading dot or an absolute path would let it write outside that folder.
RUN_ID_PATTERN = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,127}")


class BenchmarkSettings(BaseModel):
    """Per-benchmark settings under ``bench.<name>``."""

    model_config = ConfigDict(extra="forbid")

    root: Path | None = Field(None, description="the benchmark's folder (default: <data_root>/<name>)")
    annotations: Path | None = Field(None, description="annotation file or folder (default: the root)")
    video_root: Path | None = Field(None, description="folder the samples' video paths are relative to")
    video: dict[str, Any] = Field(default_factory=dict, description="clip parameter overrides (VideoParams)")
    options: dict[str, Any] = Field(default_factory=dict, description="the adapter's own options")


class JudgeConfig(BaseModel):
    """An LLM judge for open answers, run through the same streaming engine machinery."""

    model_config = ConfigDict(extra="forbid")

    model: str = Field("self", description="'self' (the evaluated model's engine) or a checkpoint folder")
    max_tokens: int = Field(16, gt=0)


def eval_rollout_defaults() -> RolloutConfig:
    """Greedy single answers; chunked prefill so long video prompts interleave with decoding."""
    return RolloutConfig(
        n=1, temperature=0.0, max_tokens=1024, engine=EngineConfig(enable_chunked_prefill=True)
    )


class EvalConfig(BaseModel):
    model_config = ConfigDict(extra="forbid")

    model: Path
    benchmarks: list[str] = Field(min_length=1)
    data_root: Path | None = Field(None, description="holds one folder per benchmark (named as registered)")
    run_id: str | None = Field(None, description="default: derived from the result-deciding fields")
    output_dir: Path | None = Field(None, description="default: <REELRL_HOME>/eval/<run_id>")
    limit: int | None = Field(None, gt=0, description="at most this many samples per benchmark (file order)")
    thinking: bool = Field(False, description="the shared thinking prompt instead of each benchmark's own")
    video: dict[str, Any] = Field(
        default_factory=dict, description="clip parameter overrides for every benchmark"
    )
    bench: dict[str, BenchmarkSettings] = Field(default_factory=dict)
    rollout: RolloutConfig = Field(default_factory=eval_rollout_defaults)
    judge: JudgeConfig | None = None
    reward_functions: list[RewardFunctionConfig] = Field(
        default_factory=list,
        description="reward functions ('file.py:function') that also score every answer, each reported "
        "unweighted as reward/<name> (a `weight`, as in training's reward.functions, is ignored)",
    )
    reward_function_timeout_s: float = Field(
        RewardConfig.model_fields["function_timeout_s"].default,
        gt=0.0,
        le=3600.0,
        description="limit for one call of a reward function; past it, that item has no score",
    )
    concurrency: int = Field(16, gt=0, description="requests in flight in the engine")
    io_threads: int = Field(4, gt=0, description="threads loading clips and rendering prompts")
    queue_size: int = Field(32, gt=0, description="prepared requests waiting for the engine (bounds memory)")
    preprocess_workers: int = Field(
        1, ge=0, description="local preprocess workers for missing clips (0: running ones)"
    )
    preprocess_timeout_s: float | None = Field(None, gt=0)
    loggers: list[TrackerName] = Field(default_factory=list, description="trackers the summaries go to")
    wandb: WandbConfig = Field(default_factory=WandbConfig, description="with loggers: wandb")
    mlflow: MlflowConfig = Field(default_factory=MlflowConfig, description="with loggers: mlflow")

    @field_validator("benchmarks", mode="before")
    @classmethod
    def _split(cls, value: Any) -> Any:
        return [v.strip() for v in value.split(",") if v.strip()] if isinstance(value, str) else value

    @field_validator("run_id")
    @classmethod
    def _safe_run_id(cls, value: str | None) -> str | None:
        if value is not None and not RUN_ID_PATTERN.fullmatch(value):
            raise ValueError(
                f"run_id {value!r} is not a plain name: use 1-128 letters, digits, '.', '_' or '-', "
                "starting with a letter or digit (it names a folder under <REELRL_HOME>/eval)"
            )
        return value

    @field_validator("rollout", mode="before")
    @classmethod
    def _eval_defaults(cls, value: Any) -> Any:
        """A partial ``rollout`` fills in from the eval defaults, not the trainer's (n=8, sampling)."""
        if isinstance(value, dict):
            return merge(eval_rollout_defaults().model_dump(mode="json"), value)
        return value

    @field_validator("reward_functions")
    @classmethod
    def _functions_from_files(cls, value: list[RewardFunctionConfig]) -> list[RewardFunctionConfig]:
        for index, spec in enumerate(value):
            if spec.path is None:
                raise ValueError(
                    f"reward_functions[{index}] ({spec.name}): no path; evaluation loads every function "
                    "from its file: give path: 'file.py:function'"
                )
            try:
                parse_target(spec.path)  # a malformed target is refused now, not after the clips are made
            except ValueError as exc:
                raise ValueError(f"reward_functions[{index}] ({spec.name}): {exc}") from None
        taken = repeated([spec.name for spec in value])
        if taken:
            raise ValueError(
                f"reward_functions: the names {taken} are used more than once (each is a metric)"
            )
        return value

    @model_validator(mode="after")
    def _check(self) -> EvalConfig:
        known = set(benchmark_names())
        unknown = [b for b in [*self.benchmarks, *self.bench] if b not in known]
        if unknown:
            raise ValueError(f"unknown benchmark(s) {unknown}; registered: {', '.join(sorted(known))}")
        if len(set(self.benchmarks)) != len(self.benchmarks):
            raise ValueError(f"benchmarks lists a name twice: {self.benchmarks}")
        if self.rollout.engine.in_process:
            raise ValueError(
                "rollout.engine.in_process: evaluation streams through vLLM's asynchronous engine, whose "
                "engine core always runs in a process of its own: drop it"
            )
        if self.rollout.n != 1 or self.rollout.mix_policy:
            raise ValueError(
                "rollout.n must be 1 and rollout.mix_policy false for evaluation (one answer each)"
            )
        for name in self.benchmarks:
            settings = self.bench.get(name)
            if self.data_root is None and (settings is None or settings.root is None):
                raise ValueError(f"benchmark {name!r} has no folder: set data_root or bench.{name}.root")
        return self

    def settings(self, name: str) -> BenchmarkSettings:
        return self.bench.get(name) or BenchmarkSettings()

    def root(self, name: str) -> Path:
        settings = self.settings(name)
        return settings.root if settings.root is not None else self.data_root / name  # type: ignore[operator]

    def identity(self) -> dict[str, Any]:
        """The fields that decide results, with the model's weights fingerprinted."""
        fields = self.model_dump(
            mode="json",
            include={"benchmarks", "data_root", "thinking", "video", "bench", "rollout", "judge"},
        )
        fields["model"] = str(self.model.resolve())
        fields["model_fingerprint"] = model_fingerprint(self.model)
        if self.reward_functions:  # only then: the ids of runs without functions stay as they were
            fields["reward_functions"] = [function_identity(spec) for spec in self.reward_functions]
            fields["reward_function_timeout_s"] = self.reward_function_timeout_s
        return fields

    def resolved_run_id(self) -> str:
        if self.run_id:
            return self.run_id
        text = json.dumps(self.identity(), sort_keys=True, separators=(",", ":"))
        return hashlib.sha256(text.encode()).hexdigest()[:16]


def model_fingerprint(path: Path) -> str:
    """sha256 over (name, size, mtime) of the checkpoint's files: a changed checkpoint is a new run."""
    digest = hashlib.sha256()
    if Path(path).is_dir():
        for file in sorted(p for p in Path(path).iterdir() if p.is_file()):
            stat = file.stat()
            digest.update(f"{file.name}:{stat.st_size}:{stat.st_mtime_ns}\n".encode())
    return digest.hexdigest()[:16]


def function_identity(spec: RewardFunctionConfig) -> dict[str, Any]:
    """A reward function as the run id sees it: its name, resolved file and function, and a sha256 of the
    file (an edited function is a new run); not its weight, which evaluation ignores."""
    file, attr = parse_target(spec.path or "")
    path = Path(file).resolve()
    digest = hashlib.sha256(path.read_bytes()).hexdigest()[:16] if path.is_file() else None
    return {"name": spec.name, "path": f"{path}:{attr}", "file_sha256": digest}


def merge(base: dict[str, Any], update: dict[str, Any]) -> dict[str, Any]:
    """``update`` merged into ``base`` recursively (dotted overrides into the YAML tree)."""
    out = dict(base)
    for key, value in update.items():
        out[key] = (
            merge(out[key], value) if isinstance(value, dict) and isinstance(out.get(key), dict) else value
        )
    return out


def load_config(values: dict[str, Any], path: Path | None = None) -> EvalConfig:
    """``values`` (CLI flags and dotted overrides, already nested) over the YAML at ``path``."""
    from services.common.config_files import (
        ConfigFileError,
        check_finite_fields,
        read_yaml_mapping,
        refuse_non_finite,
    )

    base: dict[str, Any] = {}
    if path is not None:
        try:
            base = read_yaml_mapping(path)
        except ConfigFileError as exc:
            raise ConfigError(str(exc)) from None
    try:
        refuse_non_finite(values, "eval overrides")
    except ConfigFileError as exc:
        raise ConfigError(str(exc)) from None
    try:
        config = EvalConfig.model_validate(merge(base, values))
        check_finite_fields(config)  # "inf" or "1e400" (YAML's string) read as a float
        return config
    except ValidationError as exc:
        problems = "; ".join(
            f"{'.'.join(map(str, e['loc'])) or 'config'}: {e['msg'].removeprefix('Value error, ')}"
            for e in exc.errors()
        )
        raise ConfigError(f"eval config: {problems}") from None
    except BenchmarkError as exc:
        raise ConfigError(str(exc)) from None


# Every evaluation leaves this file in its output folder: a folder holding files but not this one is no
# run's, and a run refuses to write its fixed names there (``<benchmark>.samples.jsonl``, summaries).
RUN_MARKER = "manifest.json"


class EvalJobConfig(EvalConfig):
    """An eval config submitted as a job over the API. A job names files on the server, so every path it
    reads or writes (checkpoint, judge checkpoint, benchmark folders, output folder) must lie inside
    ``REELRL_DATA_ROOTS`` (none is accepted without roots); relative paths are taken under the first
    root and stored resolved, so the worker reads exactly what was checked. Checked per field, so a
    path outside the roots is reported beside any other problem of the config."""

    @field_validator("model", "data_root", "output_dir")
    @classmethod
    def _path_inside_roots(cls, value: Path | None, info: ValidationInfo) -> Path | None:
        return None if value is None else _inside_roots(value, info.field_name or "path")

    @field_validator("output_dir")
    @classmethod
    def _output_dir_is_a_run_folder(cls, value: Path | None) -> Path | None:
        from services.common.outputs import OutputTaken, check_run_folder

        if value is not None:
            try:
                check_run_folder(value, RUN_MARKER, "evaluation")
            except OutputTaken as exc:
                raise ValueError(str(exc)) from None
        return value

    @field_validator("judge")
    @classmethod
    def _judge_inside_roots(cls, value: JudgeConfig | None) -> JudgeConfig | None:
        if value is not None and value.model != "self":
            value.model = str(_inside_roots(value.model, "judge.model"))
        return value

    @field_validator("reward_functions")
    @classmethod
    def _functions_inside_plugin_roots(cls, value: list[RewardFunctionConfig]) -> list[RewardFunctionConfig]:
        """A job runs its reward functions' code on the server: only files inside the operator's
        ``REELRL_PLUGIN_ROOTS`` (none without roots), stored resolved so the worker loads what was checked."""
        if not value:
            return value
        from services.common.settings import get_settings
        from services.reward.functions import confine_all

        return confine_all(value, get_settings().plugin_roots, "reward_functions")

    @field_validator("bench")
    @classmethod
    def _bench_inside_roots(cls, value: dict[str, BenchmarkSettings]) -> dict[str, BenchmarkSettings]:
        for name, settings in value.items():
            for field in ("root", "annotations", "video_root"):
                path = getattr(settings, field)
                if path is not None:
                    setattr(settings, field, _inside_roots(path, f"bench.{name}.{field}"))
        return value


def _inside_roots(value: Path | str, key: str) -> Path:
    """``value`` resolved inside the job data roots; the error names the config key."""
    from services.common.data_roots import inside_roots, job_roots

    try:
        return inside_roots(value, job_roots())
    except ValueError as exc:
        raise ValueError(f"{key}={exc}") from None
