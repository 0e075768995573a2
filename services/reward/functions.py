"""Reward functions from a file: ``reward.functions: [{name, path: "rewards/my.py:score", weight}]``.

A function is called as ``fn(sample, response)`` with the validated ``RewardSample`` (what the library
scores) and the response text, and returns a number or a dict of named numbers (``overall``, else its
first value, is the score; the others are logged beside it). ``async def`` functions are awaited.

Every call of a batch runs at once (at most ``function_concurrency``), on one event loop in a thread of
its own that lives as long as the runner: an async function may keep clients bound to that loop between
batches. A plain function runs in a worker thread under ``function_timeout_s`` (the library's
``time_limit``: pure-Python work past it is stopped), an async one under ``asyncio.wait_for``. What a call
raises, returns unusable (NaN, inf, not a number) or overruns fails that item alone (``Outcome.error``);
the caller decides what a batch where every item failed means (services/reward/mix.py fails it).

Where a function may come from: anywhere, for the CLI on one's own machine; only inside the operator's
``REELRL_PLUGIN_ROOTS`` for a job submitted over the API (``confine``), resolved (``..`` and symlinks
included) before the check, and stored resolved so the worker loads what was checked.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import importlib.util
import inspect
import math
import numbers
import re
import sys
import threading
import traceback
from collections.abc import Callable, Coroutine, Mapping, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from concurrent.futures import TimeoutError as FutureTimeout
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from services.reward.errors import ItemTimeout, RewardError
from services.reward.timelimit import time_limit

# A key of a returned dict becomes part of a metric name (reward/<name>/<key>).
_KEY = re.compile(r"[A-Za-z0-9_.-]{1,64}")
# The grace a plain function gets past its limit before the item is failed without it: time_limit stops
# Python code at the limit, but one long C call (a regex, a numpy op) finishes first.
_GRACE_S = 1.0


class RewardFunctionError(RewardError):
    """A reward function cannot be loaded or used: the message names the function and the reason."""


class _PluginExit(Exception):
    """A plugin's SystemExit or KeyboardInterrupt carried out of its task as an ordinary exception."""


class PluginRefused(RewardFunctionError):
    """A job named a reward function outside the operator's plugin roots (or no roots are configured)."""


@dataclass(frozen=True)
class Outcome:
    """One item's result from one function: its score and extra named values, or why it has none."""

    value: float = 0.0
    extras: dict[str, float] = field(default_factory=dict)
    error: str | None = None  # one line: what an item's result and the logs show
    trace: str | None = None  # the traceback of a raise: what a batch that failed throughout is raised with

    def parts(self, name: str) -> dict[str, float]:
        """The outcome as named parts of function ``name``: its score, and each extra as ``name/key``."""
        return {name: self.value, **{f"{name}/{key}": value for key, value in self.extras.items()}}


def parse_target(target: str) -> tuple[str, str]:
    """``"rewards/my.py:score"`` → ``("rewards/my.py", "score")``; a clear error for anything else."""
    file, sep, attr = target.rpartition(":")
    if not sep or not file or not attr.isidentifier():
        raise RewardFunctionError(f"reward function {target!r}: expected 'path/to/file.py:function_name'")
    if not file.endswith(".py"):
        raise RewardFunctionError(f"reward function {target!r}: {file!r} is not a .py file")
    return file, attr


def confine(target: str, roots: Sequence[Path]) -> str:
    """``target`` with its file resolved inside one of ``roots`` (a relative path is looked up under each
    root in turn), as ``"/abs/file.py:function"``; PluginRefused when none holds it."""
    if not roots:
        raise PluginRefused(
            f"reward function {target!r}: no plugin roots are configured, so a job may not name reward "
            "functions: the operator sets REELRL_PLUGIN_ROOTS to the folders (':'-separated) whose files "
            "jobs may load, for the API and its workers"
        )
    file, attr = parse_target(target)
    given = Path(file)
    resolved_roots = [Path(root).resolve() for root in roots]
    candidates = [given] if given.is_absolute() else [root / given for root in resolved_roots]
    for candidate in candidates:
        path = candidate.resolve()  # follows every symlink and '..': what would really be loaded
        if any(path.is_relative_to(root) for root in resolved_roots) and path.is_file():
            return f"{path}:{attr}"
    raise PluginRefused(
        f"reward function {target!r}: {file} is not a file inside the plugin roots "
        f"{[str(r) for r in resolved_roots]} (paths are resolved, '..' and symlinks included, before the check)"
    )


def confine_all(specs: Sequence[Any], roots: Sequence[Path], key: str) -> list[Any]:
    """Each function config (``name``, ``path``) with its path confined (``confine``) and stored resolved;
    one without a path (a function the reward service serves by name) as it is. A ValueError naming
    ``key[index] (name)``."""
    confined = []
    for index, spec in enumerate(specs):
        if spec.path is None:
            confined.append(spec)
            continue
        try:
            confined.append(spec.model_copy(update={"path": confine(spec.path, roots)}))
        except ValueError as exc:
            raise ValueError(f"{key}[{index}] ({spec.name}): {exc}") from None
    return confined


def load_function(target: str) -> Callable[..., Any]:
    """Import ``path:function`` from its file (relative paths: from the working directory). A file is
    imported once per process under a name derived from its resolved path."""
    file, attr = parse_target(target)
    path = Path(file).resolve()
    if not path.is_file():
        raise RewardFunctionError(f"reward function {target!r}: no file {path}")
    module_name = "reelrl_reward_fn_" + hashlib.sha1(str(path).encode()).hexdigest()[:16]
    module = sys.modules.get(module_name)
    if module is None:
        spec = importlib.util.spec_from_file_location(module_name, path)
        if spec is None or spec.loader is None:
            raise RewardFunctionError(f"reward function {target!r}: {path} cannot be imported")
        module = importlib.util.module_from_spec(spec)
        try:
            spec.loader.exec_module(module)
        except Exception as exc:
            raise RewardFunctionError(
                f"reward function {target!r}: importing {path} failed: {type(exc).__name__}: {exc}\n"
                + traceback.format_exc()
            ) from exc
        sys.modules[module_name] = module
    fn = getattr(module, attr, None)
    if fn is None:
        raise RewardFunctionError(f"reward function {target!r}: {path} defines no {attr!r}")
    if not callable(fn):
        raise RewardFunctionError(
            f"reward function {target!r}: {attr!r} is a {type(fn).__name__}, not callable"
        )
    return fn


def _number(value: Any, what: str) -> float:
    """A finite float from a returned value; bools and other non-numbers are refused, not coerced."""
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise ValueError(f"{what} is {type(value).__name__} {value!r:.80}, not a number")
    number = float(value)
    if not math.isfinite(number):
        raise ValueError(f"{what} is {number}")
    return number


def read_returned(returned: Any) -> tuple[float, dict[str, float]]:
    """A function's return value → (score, extra named values). A number is the score; a dict's
    ``overall`` (else its first value) is, and its other values are extras. ValueError for the rest."""
    if isinstance(returned, Mapping):
        if not returned:
            raise ValueError("returned an empty dict")
        values: dict[str, float] = {}
        for key, value in returned.items():
            if not isinstance(key, str) or not _KEY.fullmatch(key):
                raise ValueError(
                    f"returned a dict whose key {key!r:.80} is not a name ([A-Za-z0-9_.-], ≤ 64)"
                )
            values[key] = _number(value, f"its value for {key!r}")
        head = "overall" if "overall" in values else next(iter(values))
        score = values.pop(head)
        return score, values
    return _number(returned, "the returned value"), {}


class _LoopThread:
    """One event loop in a daemon thread: the runner's calls all run there, batch after batch."""

    def __init__(self, name: str) -> None:
        self.loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._run, name=name, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        try:
            self.loop.run_forever()
        finally:  # stopped (or left behind, blocked, and let go since): end what it still holds
            pending = asyncio.all_tasks(self.loop)
            for task in pending:
                task.cancel()
            with contextlib.suppress(BaseException):
                self.loop.run_until_complete(asyncio.gather(*pending, return_exceptions=True))
            self.loop.close()

    def alive(self) -> bool:
        return self._thread.is_alive()

    def submit(self, coro: Coroutine[Any, Any, Any]) -> Future[Any]:
        return asyncio.run_coroutine_threadsafe(coro, self.loop)

    def stop(self) -> None:
        """Stop the loop as soon as it is free (the thread then closes it)."""
        with contextlib.suppress(RuntimeError):  # already closed
            self.loop.call_soon_threadsafe(self.loop.stop)

    def close(self) -> None:
        self.stop()
        self._thread.join(timeout=5)


class FunctionRunner:
    """Calls one reward function over batches: concurrently, each call limited and isolated."""

    def __init__(self, name: str, fn: Callable[..., Any], timeout_s: float, concurrency: int) -> None:
        self.name = name
        self.fn = fn
        self.timeout_s = timeout_s
        self.concurrency = concurrency
        self.is_async = inspect.iscoroutinefunction(fn) or inspect.iscoroutinefunction(
            getattr(fn, "__call__", None)  # noqa: B004 - an instance whose __call__ is async
        )
        self._loop = _LoopThread(f"reward-fn-{name}")
        self._pool = None if self.is_async else ThreadPoolExecutor(concurrency, f"reward-fn-{name}")

    def _limited(self, sample: Any, response: str) -> Any:
        with time_limit(self.timeout_s):
            return self.fn(sample, response)

    async def _call(self, gate: asyncio.Semaphore, sample: Any, response: str) -> Outcome:
        async with gate:
            try:
                if self.is_async:
                    returned = await asyncio.wait_for(self._guarded(sample, response), self.timeout_s)
                else:
                    running = asyncio.get_running_loop().run_in_executor(
                        self._pool, self._limited, sample, response
                    )
                    returned = await asyncio.wait_for(running, self.timeout_s + _GRACE_S)
            except (TimeoutError, ItemTimeout):
                return Outcome(error=f"reward function {self.name}: no result within {self.timeout_s:g} s")
            except asyncio.CancelledError:
                task = asyncio.current_task()
                if task is not None and task.cancelling():
                    raise  # the batch itself is being cancelled
                return self._raised(asyncio.CancelledError())
            except BaseException as exc:  # SystemExit or KeyboardInterrupt from a plugin: its item only
                return self._raised(exc)
        try:
            value, extras = read_returned(returned)
        except ValueError as exc:
            return Outcome(error=f"reward function {self.name} {exc}")
        return Outcome(value, extras)

    async def _guarded(self, sample: Any, response: str) -> Any:
        """The async function's call, its SystemExit or KeyboardInterrupt caught inside the task: a task
        re-raises those two out of the event loop, which would end the loop thread."""
        try:
            return await self.fn(sample, response)
        except (SystemExit, KeyboardInterrupt) as exc:
            raise _PluginExit(exc) from exc

    def _raised(self, exc: BaseException) -> Outcome:
        if isinstance(exc, _PluginExit):
            exc = exc.args[0]
        return Outcome(
            error=f"reward function {self.name} raised {type(exc).__name__}: {exc}",
            trace="".join(traceback.format_exception(exc)).rstrip(),
        )

    async def _batch(self, items: Sequence[tuple[Any, str]], slots: list[Outcome | None]) -> None:
        gate = asyncio.Semaphore(self.concurrency)

        async def one(index: int, sample: Any, response: str) -> None:
            slots[index] = await self._call(gate, sample, response)

        await asyncio.gather(*(one(i, s, r) for i, (s, r) in enumerate(items)))

    def _deadline(self, n: int) -> float:
        """How long a batch of ``n`` may take: every call its whole limit, ``concurrency`` at a time. Only
        a function that blocks the loop itself (an async one calling time.sleep or spinning) reaches it:
        every call has its own limit otherwise."""
        return self.timeout_s * math.ceil(n / self.concurrency) + 2 * _GRACE_S

    def _start(self, items: Sequence[tuple[Any, str]]) -> tuple[Future[Any], list[Outcome | None]]:
        if not self._loop.alive():
            self._loop = _LoopThread(f"reward-fn-{self.name}")
        slots: list[Outcome | None] = [None] * len(items)
        return self._loop.submit(self._batch(items, slots)), slots

    def _collect(self, slots: list[Outcome | None], overran: bool) -> list[Outcome]:
        """The outcomes; past the batch's deadline, the unfinished items fail and the blocked loop is left
        behind (a daemon thread stuck in the function's code) for a fresh one."""
        if overran:
            self._loop.stop()  # runs once the function lets go, if ever
            self._loop = _LoopThread(f"reward-fn-{self.name}")
        blocked = Outcome(
            error=f"reward function {self.name}: no result within {self.timeout_s:g} s (its calls blocked "
            "their event loop: an async reward function must await, never block)"
        )
        return [slot if slot is not None else blocked for slot in slots]

    def run(self, items: Sequence[tuple[Any, str]]) -> list[Outcome]:
        """One outcome per ``(RewardSample, response)``, in order."""
        if not items:
            return []
        future, slots = self._start(items)
        try:
            future.result(timeout=self._deadline(len(items)))
        except FutureTimeout:
            future.cancel()
            return self._collect(slots, overran=True)
        return self._collect(slots, overran=False)

    async def arun(self, items: Sequence[tuple[Any, str]]) -> list[Outcome]:
        if not items:
            return []
        future, slots = self._start(items)
        try:
            await asyncio.wait_for(asyncio.wrap_future(future), self._deadline(len(items)))
        except TimeoutError:
            return self._collect(slots, overran=True)
        return self._collect(slots, overran=False)

    def close(self) -> None:
        closing = getattr(self.fn, "aclose", None)  # a function holding connections (the judge's client)
        if closing is not None and self._loop.alive():
            # closing connections must not hide why the run ended
            with contextlib.suppress(Exception):
                self._loop.submit(asyncio.wait_for(closing(), 5)).result(timeout=10)
        if self._pool is not None:
            self._pool.shutdown(wait=False, cancel_futures=True)
        self._loop.close()
