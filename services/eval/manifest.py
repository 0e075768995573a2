"""What every result records about how it was made (SPEC §6): model, family, clip parameters (frames,
fps, pixel budgets), prompt template version, sampling parameters and code version."""

from __future__ import annotations

import subprocess
from functools import lru_cache
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path
from typing import Any

from services.rollout.config import RolloutConfig

_SAMPLING = ("n", "temperature", "top_p", "top_k", "max_tokens", "seed")


@lru_cache(maxsize=1)
def code_version() -> str:
    """The package version, plus the git commit (``+dirty`` with uncommitted changes) of a source tree."""
    try:
        base = version("reelrl")
    except PackageNotFoundError:
        base = "unknown"
    here = Path(__file__).resolve().parent
    try:
        commit = subprocess.run(
            ["git", "rev-parse", "--short=12", "HEAD"],
            cwd=here,
            capture_output=True,
            text=True,
            timeout=5,
            check=True,
        ).stdout.strip()
        dirty = subprocess.run(
            ["git", "status", "--porcelain", "--untracked-files=no"], cwd=here, capture_output=True, text=True,
            timeout=5, check=True,
        ).stdout.strip()  # fmt: skip
    except (OSError, subprocess.SubprocessError):
        return base
    return f"{base}+{commit}{'.dirty' if dirty else ''}"


def sampling(config: RolloutConfig) -> dict[str, Any]:
    return {name: getattr(config, name) for name in _SAMPLING}


def run_manifest(
    model: str, fingerprint: str, family: str, config: RolloutConfig, thinking: bool
) -> dict[str, Any]:
    """The parts shared by every result of a run."""
    return {
        "model": model,
        "model_fingerprint": fingerprint,
        "family": family,
        "sampling": sampling(config),
        "thinking": thinking,
        "code_version": code_version(),
    }


def result_manifest(
    run: dict[str, Any], clip: dict[str, Any] | None, prompt_version: str, assistant_prefix: str | None = None
) -> dict[str, Any]:
    """A result's manifest: the run's plus its clip parameters, prompt template version and the
    assistant prefix its response continues (re-scoring reads it back)."""
    return {
        **run,
        "clip": clip,
        "prompt_template_version": prompt_version,
        "assistant_prefix": assistant_prefix,
    }
