"""Persistence of a run: its row in ``eval_runs`` and one ``eval_results`` row per scored sample, written
the moment the sample is scored. The unique (run, benchmark, sample) key makes a restart skip finished
samples and makes a duplicate write impossible (the second insert is a no-op)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from sqlalchemy import delete, select
from sqlalchemy.exc import IntegrityError

from services.common.db import session_scope
from services.common.db.models import EvalResult, EvalRun, utcnow
from services.eval.benchmarks import ItemResult


class RunMismatch(ValueError):
    """A stored run with this id was made with other result-deciding settings."""


@dataclass(frozen=True)
class ResultRecord:
    """Everything stored for one scored sample."""

    benchmark: str
    item: ItemResult
    manifest: dict[str, Any]
    clip_meta: list[dict[str, Any]] | None = None
    judge_response: str | None = None
    finish_reason: str | None = None
    prompt_tokens: int | None = None
    response_tokens: int | None = None
    latency_s: float | None = None


def open_run(
    run_id: str, *, model: str, family: str, benchmarks: list[str], identity: dict[str, Any],
    config: dict[str, Any], manifest: dict[str, Any], output_dir: str, job_id: str | None = None,
) -> bool:  # fmt: skip
    """Create the run, or reopen it after checking it was made with the same settings; True if it existed."""
    with session_scope() as session:
        run = session.get(EvalRun, run_id)
        if run is not None:
            stored = run.config.get("identity", {})
            if stored != identity:
                diff = sorted(k for k in set(stored) | set(identity) if stored.get(k) != identity.get(k))
                raise RunMismatch(
                    f"eval run {run_id} exists with other settings ({', '.join(diff)}); use another run_id "
                    "or output folder to start a new run"
                )
            run.status, run.error, run.updated_at = "running", None, utcnow()
            run.benchmarks = sorted(set(run.benchmarks) | set(benchmarks))
            run.job_id = job_id or run.job_id
            return True
        session.add(
            EvalRun(
                id=run_id, job_id=job_id, model=model, family=family, benchmarks=list(benchmarks),
                config={**config, "identity": identity}, manifest=manifest, output_dir=output_dir,
                status="running",
            )
        )  # fmt: skip
        return False


def finished_ids(run_id: str, benchmark: str) -> set[str]:
    with session_scope() as session:
        rows = session.scalars(
            select(EvalResult.sample_id).where(EvalResult.run_id == run_id, EvalResult.benchmark == benchmark)
        )
        return set(rows)


def current_ids(run_id: str, benchmark: str, versions: Mapping[str, str]) -> tuple[set[str], int]:
    """The samples of ``versions`` (sample id → current prompt template version) whose stored result
    was made with that version, and how many stale results (another version) were deleted so they
    are redone. A resume on changed prompt code would otherwise mix rows of two prompt versions in
    one summary. Results of samples outside ``versions`` are left alone."""
    with session_scope() as session:
        rows = session.execute(
            select(EvalResult.id, EvalResult.sample_id, EvalResult.manifest).where(
                EvalResult.run_id == run_id, EvalResult.benchmark == benchmark
            )
        )
        current, stale = set(), []
        for row_id, sample_id, manifest in rows:
            if sample_id not in versions:
                continue
            if (manifest or {}).get("prompt_template_version") == versions[sample_id]:
                current.add(sample_id)
            else:
                stale.append(row_id)
        if stale:
            session.execute(delete(EvalResult).where(EvalResult.id.in_(stale)))
        return current, len(stale)


def save_result(run_id: str, record: ResultRecord) -> bool:
    """Insert one result; False (and nothing written) if the sample already has one."""
    item = record.item
    row = EvalResult(
        run_id=run_id, benchmark=record.benchmark, sample_id=item.id, response=item.response,
        accuracy=item.accuracy, format=item.format, extracted=item.extracted, details=item.details,
        error=item.error, judged=item.judged, judge_response=record.judge_response,
        finish_reason=record.finish_reason, prompt_tokens=record.prompt_tokens,
        response_tokens=record.response_tokens, latency_s=record.latency_s, clip_meta=record.clip_meta,
        manifest=record.manifest,
    )  # fmt: skip
    try:
        with session_scope() as session:
            session.add(row)
        return True
    except IntegrityError:
        return False


def stored_results(run_id: str, benchmark: str) -> list[EvalResult]:
    with session_scope() as session:
        return list(
            session.scalars(
                select(EvalResult)
                .where(EvalResult.run_id == run_id, EvalResult.benchmark == benchmark)
                .order_by(EvalResult.id)
            )
        )


def as_item(row: EvalResult) -> ItemResult:
    return ItemResult(
        id=row.sample_id, accuracy=row.accuracy, format=row.format, response=row.response,
        extracted=row.extracted, problem_type=None, missing=False, error=row.error, judged=row.judged,
        details=row.details or {},
    )  # fmt: skip


def finish_run(run_id: str, status: str, summaries: dict[str, Any] | None, error: str | None = None) -> None:
    with session_scope() as session:
        run = session.get(EvalRun, run_id)
        if run is None:
            raise LookupError(f"no eval run {run_id!r}")
        run.status, run.error, run.updated_at = status, error, utcnow()
        if summaries is not None:
            run.summaries = {**(run.summaries or {}), **summaries}


def count_results(run_id: str, benchmarks: Sequence[str] | None = None) -> int:
    with session_scope() as session:
        query = select(EvalResult.id).where(EvalResult.run_id == run_id)
        if benchmarks is not None:
            query = query.where(EvalResult.benchmark.in_(list(benchmarks)))
        return len(list(session.scalars(query)))
