"""``bench/results.json``: the latest figure of every benchmark, key → number."""

from __future__ import annotations

import json
import os
import tempfile
from pathlib import Path

RESULTS = Path(__file__).with_name("results.json")


def record(figures: dict[str, float]) -> dict[str, float]:
    """Merge ``figures`` into results.json (atomic replace, other keys kept) and return the whole map."""
    current = json.loads(RESULTS.read_text()) if RESULTS.exists() else {}
    current.update(figures)
    fd, tmp = tempfile.mkstemp(dir=RESULTS.parent, suffix=".tmp")
    with os.fdopen(fd, "w") as fh:
        json.dump(dict(sorted(current.items())), fh, indent=2)
        fh.write("\n")
    os.replace(tmp, RESULTS)
    return current
