"""Keep a command's console for its own words: third-party output goes to a log file instead.

vLLM, torch and the worker pools write to the process's stderr/stdout from C code and from the
processes they spawn (NUMA binding, tcmalloc, Triton, progress bars, deprecation warnings), so a
Python logging filter cannot quiet them. :func:`third_party_to_log` therefore moves file descriptors 1
and 2 onto the log file, where every child inherits them, and hands back a stream on the original
terminal for the command's own console. Python logging and warnings go to the same file.
"""

from __future__ import annotations

import contextlib
import logging
import os
import sys
import warnings
from collections.abc import Iterator
from pathlib import Path
from typing import TextIO

FORMAT = "%(asctime)s %(levelname)s %(name)s: %(message)s"


@contextlib.contextmanager
def third_party_to_log(log: Path, *, verbose: bool = False) -> Iterator[TextIO]:
    """Within the block, fds 1 and 2 (and so every child process's output), Python logging at INFO and
    warnings go to ``log`` (appended); the yielded stream writes to the terminal that stderr was.
    With ``verbose`` nothing is moved: the yielded stream is stderr and logging shows INFO there."""
    root = logging.getLogger()
    if verbose:
        handler: logging.Handler = logging.StreamHandler(sys.stderr)
        handler.setFormatter(logging.Formatter(FORMAT))
        previous_level = root.level
        root.addHandler(handler)
        root.setLevel(logging.INFO)
        try:
            yield sys.stderr
        finally:
            root.removeHandler(handler)
            root.setLevel(previous_level)
        return

    log.parent.mkdir(parents=True, exist_ok=True)
    sys.stdout.flush()
    sys.stderr.flush()
    saved_out, saved_err = os.dup(1), os.dup(2)
    terminal = os.fdopen(os.dup(saved_err), "w", buffering=1, encoding="utf-8", errors="replace")
    target = os.open(log, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    os.dup2(target, 1)
    os.dup2(target, 2)
    os.close(target)
    handler = logging.FileHandler(log, encoding="utf-8")
    handler.setFormatter(logging.Formatter(FORMAT))
    # Handlers that already write to the terminal (logging.basicConfig, a library's own) would bypass
    # the redirect through their saved stream objects: park them for the block.
    parked = [h for h in root.handlers if isinstance(h, logging.StreamHandler)]
    for h in parked:
        root.removeHandler(h)
    previous_level = root.level
    root.addHandler(handler)
    root.setLevel(logging.INFO)
    logging.captureWarnings(True)
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("default")  # each warning once per place, into the log
            yield terminal
    finally:
        logging.captureWarnings(False)
        root.removeHandler(handler)
        handler.close()
        for h in parked:
            root.addHandler(h)
        root.setLevel(previous_level)
        sys.stdout.flush()
        sys.stderr.flush()
        os.dup2(saved_out, 1)
        os.dup2(saved_err, 2)
        os.close(saved_out)
        os.close(saved_err)
        terminal.close()
