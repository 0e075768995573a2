"""The data roots a job may name files in (``REELRL_DATA_ROOTS``): every job kind checks its paths here.

A job submitted over the API names files on the server, so without configured roots no path is
accepted; relative paths are taken under the first root.
"""

from __future__ import annotations

from pathlib import Path

from services.common.settings import get_settings


def job_roots() -> list[Path]:
    """The configured roots, resolved; a ValueError saying how to set them when there are none."""
    roots = get_settings().data_roots
    if not roots:
        raise ValueError(
            "no data roots are configured, so a job may not name files: set REELRL_DATA_ROOTS to the "
            "folders (':'-separated) jobs may read and write, for the API and its workers"
        )
    return [root.resolve() for root in roots]


def inside_roots(value: str | Path, roots: list[Path]) -> Path:
    """``value`` resolved (relative: under the first root); a ValueError when it lies outside them."""
    given = Path(value)
    try:
        path = (given if given.is_absolute() else roots[0] / given).resolve()
    except (OSError, ValueError) as exc:
        raise ValueError(f"{value}: {exc}") from None
    if not any(path.is_relative_to(root) for root in roots):
        raise ValueError(f"{value}: resolves to {path}, outside the data roots {[str(r) for r in roots]}")
    return path
