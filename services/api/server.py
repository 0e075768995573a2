"""The API's uvicorn server, stopped the way a service should be.

uvicorn stops gracefully on SIGINT/SIGTERM and then raises the signal again, so a clean ``kill`` ends
the process with 143 and skips the command's own cleanup (the demo's engines and shared memory).
:class:`StoppableServer` stops the same way and returns; the caller chooses the exit status.
"""

from __future__ import annotations

import contextlib
import signal
import threading
from collections.abc import Iterator
from types import FrameType

import uvicorn


class StoppableServer(uvicorn.Server):
    def __init__(self, config: uvicorn.Config) -> None:
        super().__init__(config)
        #: the signals that asked the server to stop, in order
        self.stopped_by: list[int] = []

    def handle_exit(self, sig: int, frame: FrameType | None) -> None:
        self.stopped_by.append(sig)
        super().handle_exit(sig, frame)

    @contextlib.contextmanager
    def capture_signals(self) -> Iterator[None]:
        if threading.current_thread() is not threading.main_thread():  # signals reach the main thread only
            yield
            return
        originals = {sig: signal.signal(sig, self.handle_exit) for sig in (signal.SIGINT, signal.SIGTERM)}
        try:
            yield
        finally:
            for sig, handler in originals.items():
                signal.signal(sig, handler)
