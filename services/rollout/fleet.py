"""A fleet of rollout engines behind the one-engine interface the training loop calls.

``rollout`` splits a call's groups over the live engines (``services.rollout.routing``: all responses of
a prompt on one engine, groups balanced by estimated tokens) and returns them in sample order; each
request's seed depends only on where it belongs in the run (``services.rollout.seeds``), so the
tokens do not depend on how many engines serve the call. ``push_weights`` loads new weights into every
engine, which then reports its weight version; an engine whose weights are not the fleet's newest gets
no work, and every response is checked to come from the newest weights.

Faults: an engine that raises (anything but a ValueError, which is the input's fault) or does not
answer within ``timeout_s`` is dropped, its groups go to the other engines (``rollout/engine_failures``
counts it), and, given a ``restart`` factory, a replacement starts in the background; it gets work
only after it has been brought to the current weights. When no engine is left the call fails naming
the failures.

Members may be in-process :class:`~services.rollout.engine.RolloutEngine` s (placement ``driver``) or
``RayRolloutEngine`` actors (``disaggregated``); anything with ``rollout``, ``push_weights``,
``weight_version``, ``sleep``, ``wake_up`` and ``shutdown`` fits.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from concurrent.futures import TimeoutError as FutureTimeout
from dataclasses import dataclass, field
from typing import Any

from services.rollout import routing
from services.rollout.samples import RolloutGroup, RolloutResponse, RolloutSample
from services.rollout.seeds import SeedKey
from services.rollout.weight_sync import BucketBroadcast, BucketRefs

log = logging.getLogger(__name__)
RESTART_WAIT_S = 900.0  # at shutdown, for a replacement still starting (a cold vLLM start, loaded machine)
#: starts of a replacement per engine failure (one that fails to start or to take the current weights is
#: started again; a cluster's placement or a node can fail for a while); after these it stays out
RESTART_TRIES = 3


class FleetError(RuntimeError):
    """No engine of the fleet could serve the call."""


class StaleWeights(RuntimeError):
    """An engine generated, or was about to generate, with weights older than the fleet's newest."""


class _Broken(Exception):
    """A weight group's collective failed for ``members`` (all of them: one broadcast reaches every
    member); ``error``: the first failure, ``cause``: every failure, named; ``culprits``: the members
    that failed on their own (``reasons`` by ``id``), not through the group."""

    def __init__(
        self,
        members: list[_Member],
        error: BaseException,
        cause: str,
        culprits: list[_Member] | None = None,
        reasons: dict[int, str] | None = None,
    ) -> None:
        super().__init__(cause)
        self.members, self.error, self.cause = members, error, cause
        self.culprits, self.reasons = culprits or [], reasons or {}


@dataclass
class _Member:
    index: int
    engine: Any
    #: the fleet version whose weights the engine holds, and the engine's own label for them
    synced: int = 0
    label: int = 0
    alive: bool = True
    restart: Future | None = None
    restart_tries: int = 0  # replacements that failed since the engine's last failure
    failures: list[str] = field(default_factory=list)


class Fleet:
    """``engines``: started engines, all on the checkpoint's weights. ``max_tokens``: the response limit
    (for the token estimate of a group). ``restart(index)`` starts a replacement for engine ``index``
    (None: a failed engine stays out). ``timeout_s``: how long one engine may take for its share of a
    call or a push before it counts as hung (None: no limit). ``current_weights()``: the weights of the
    newest push, fetched again for a replacement (e.g. rank 0's object reference); without it the
    fleet keeps the last weights pushed (for Ray references: a copy in the object store).
    ``independent``: whether one engine may fail alone; False for colocated shards, which are members of
    the actor ranks' collectives (a push gathers every bucket on every rank, and stopping a shard
    destroys its ranks' process group), so any engine failure fails the call by name instead.
    ``sleep_level``: how the engines sleep through the update when :meth:`sleep` names no level (2:
    weights and KV cache dropped, the push replaces every weight; 1: weights kept in host memory;
    None: they keep their memory and :meth:`sleep` does nothing)."""

    def __init__(
        self,
        engines: Sequence[Any],
        *,
        max_tokens: int,
        n: int,
        timeout_s: float | None = None,
        restart: Callable[[int], Any] | None = None,
        current_weights: Callable[[], Any] | None = None,
        independent: bool = True,
        sleep_level: int | None = None,
    ) -> None:
        if not engines:
            raise ValueError("a fleet needs at least one engine")
        self.members = [_Member(i, e, label=int(e.weight_version)) for i, e in enumerate(engines)]
        self.max_tokens, self.n, self.timeout_s = max_tokens, n, timeout_s
        self._restart, self._current_weights = restart, current_weights
        self.independent, self.sleep_level = independent, sleep_level
        #: pushes so far: the version every serving engine must hold
        self.weight_version = 0
        self._weights: Any = None  # the newest weights, for engines that restart
        self._failures = 0  # engine failures since the last pop_metrics
        self._pool = ThreadPoolExecutor(max_workers=max(2, 2 * len(engines)), thread_name_prefix="fleet")
        self._lock = threading.Lock()
        self._closed = False
        #: clear while the engines sleep for the update: a replacement starts awake, taking its share of
        #: the device, so it waits for the wake-up (or the shutdown)
        self._awake = threading.Event()
        self._awake.set()
        self.last_engines: list[int] = []
        #: the weight-broadcast group as last formed: (sender, its token, the member engines); None: none
        self._group: tuple[str, Any, tuple[Any, ...]] | None = None
        #: the thread that drives the actor ranks (the one that made the fleet): only it adopts
        #: replacements, whose current weights come from the ranks
        self._owner = threading.get_ident()

    # ------------------------------------------------------------------ the engine interface ----------

    @property
    def engines(self) -> int:
        return len(self.members)

    @property
    def accepts_refs(self) -> bool:
        """Whether every engine takes weights as an object reference (Ray members)."""
        return all(getattr(m.engine, "accepts_refs", False) for m in self.members)

    @property
    def loads_from_ranks(self) -> bool:
        """Whether every engine loads its weights from the actor ranks itself (colocated shards): a
        push then carries no weights."""
        return all(getattr(m.engine, "loads_from_ranks", False) for m in self.members)

    def rollout(
        self,
        samples: Sequence[RolloutSample],
        n: int | None = None,
        *,
        mix_policy: bool | None = None,
        key: SeedKey | None = None,
        prompt_tokens: Sequence[int] | None = None,
        **overrides: Any,
    ) -> list[RolloutGroup]:
        """One group per sample, in sample order (see ``RolloutEngine.rollout``); ``prompt_tokens``
        (each sample's prompt length, when known) weighs the split."""
        if not samples:
            return []
        responses = n or self.n
        lengths = prompt_tokens if prompt_tokens is not None else [0] * len(samples)
        if len(lengths) != len(samples):
            raise ValueError(f"{len(lengths)} prompt lengths for {len(samples)} samples")
        max_tokens = overrides.get("max_tokens", self.max_tokens)
        costs = [routing.group_cost(p, responses, max_tokens) for p in lengths]
        out: list[RolloutGroup | None] = [None] * len(samples)
        #: the engine that generated each group of the last call (re-sent groups: the one that answered)
        self.last_engines = [-1] * len(samples)
        pending = list(range(len(samples)))
        while pending:
            live = self._serving()
            split = routing.assign([costs[i] for i in pending], len(live), [samples[i].id for i in pending])
            shards = routing.shards(split, range(len(live)))
            calls = {
                self._pool.submit(
                    live[e].engine.rollout, [samples[pending[j]] for j in ids], n=n, mix_policy=mix_policy,
                    key=key, **overrides,
                ): (live[e], [pending[j] for j in ids])
                for e, ids in shards.items()
            }  # fmt: skip
            retry: list[int] = []
            deadline = None if self.timeout_s is None else time.monotonic() + self.timeout_s
            for future, (member, ids) in calls.items():
                try:
                    groups = future.result(timeout=_left(deadline))
                except ValueError:
                    raise  # the input's fault (a sample named in the message): every engine would refuse it
                except FutureTimeout as exc:
                    self._fail(member, _timeout_reason(future, exc, "no answer within", self.timeout_s))
                    retry += ids
                    continue
                except Exception as exc:
                    self._fail(member, f"{type(exc).__name__}: {exc}")
                    retry += ids
                    continue
                answered, asked = [g.sample_id for g in groups], [samples[i].id for i in ids]
                if answered != asked:  # pairing by position would hand one sample's responses to another
                    self._fail(member, f"answered samples {answered} when asked for {asked}")
                    retry += ids
                    continue
                for i, group in zip(ids, self._fleet_versions(member, groups), strict=True):
                    out[i] = group.model_copy(update={"engine": member.index})
                    self.last_engines[i] = member.index
            pending = sorted(retry)
        return [g for g in out if g is not None]

    def push_weights(self, weights: Any) -> float:
        """Load ``weights`` into every serving engine (in parallel); returns the seconds it took. Each
        engine then reports its weight version, which must be the next one. ``BucketRefs`` (buckets made
        one at a time by the actor ranks) are one pass that every engine shares, bucket by bucket."""
        started = time.perf_counter()
        if isinstance(weights, BucketRefs) and self._restart is not None and self._current_weights is None:
            raise ValueError(
                "buckets pushed by reference are one pass: a fleet that restarts engines needs "
                "current_weights to make another for a replacement"
            )
        live = self._serving()  # replacements adopted first: their pushes are over before this one starts
        version = self.weight_version + 1
        if isinstance(weights, BucketRefs | BucketBroadcast):
            pushed = self._push_pass(live, weights)
        else:
            pushed = self._each(live, lambda m: m.engine.push_weights(weights))
        recorded = []
        for member in pushed:
            try:
                self._record_push(member, version)
            except StaleWeights:
                raise
            except Exception as exc:  # e.g. an actor that died right after its push: asking fails
                self._fail(member, f"weight version after the push: {type(exc).__name__}: {exc}")
                continue
            recorded.append(member)
        pushed = recorded
        if not pushed:
            raise FleetError(f"no engine took the new weights: {self._failure_summary()}")
        self.weight_version = version
        if self._restart is not None and self._current_weights is None:
            self._weights = weights
        return time.perf_counter() - started

    def _push_shared_pass(
        self, members: list[_Member], weights: BucketRefs, fail: Callable[[_Member, str], None] | None = None
    ) -> list[_Member]:
        """Every engine opens the push, takes each bucket before the next is made, and closes it; each
        call under a limit of its own (making a bucket is the trainer's time, not the engines'). An
        engine that fails leaves the pass (``fail``, default ``_fail``); the others go on. Names or
        shapes refused at the start leave every engine as it was. Anything else that stops the pass
        (a rank that failed making a bucket, a bucket unlike the announced ones) is raised after each
        engine still in it has finished its reload; their weights are then undefined, so they leave
        the fleet too (a replacement is brought to the current weights before it gets work)."""
        fail = fail or self._fail
        members = self._each(members, lambda m: m.engine.begin_weight_buckets(weights.announced), fail=fail)
        try:
            for ref in weights.refs:
                if not members:
                    break
                members = self._each(members, lambda m, ref=ref: m.engine.load_weight_bucket(ref), fail=fail)
                del ref  # before the next bucket is made: the object store frees this one
        except BaseException as exc:
            ended = self._each(
                members, lambda m: m.engine.end_weight_buckets(failed=True), fail=fail, refusals=()
            )
            for member in ended:
                fail(member, f"weight push interrupted ({type(exc).__name__}: {exc}): weights undefined")
            raise
        finally:
            close = getattr(weights.refs, "close", None)
            if close is not None:  # a pass left early: the ranks close theirs
                close()
        return self._each(members, lambda m: m.engine.end_weight_buckets(), fail=fail)

    def _push_pass(
        self, members: list[_Member], weights: Any, fail: Callable[[_Member, str], None] | None = None
    ) -> list[_Member]:
        if isinstance(weights, BucketBroadcast):
            return self._push_broadcast(members, weights, fail)
        return self._push_shared_pass(members, weights, fail)

    def _push_broadcast(
        self,
        members: list[_Member],
        weights: BucketBroadcast,
        fail: Callable[[_Member, str], None] | None = None,
    ) -> list[_Member]:
        """A push over the weight-broadcast group (``services.rollout.weight_group``): every engine opens
        the push (names and shapes checked; a refusal leaves them all as they were), the group is formed
        if its members changed, then each bucket is broadcast by rank 0 to every engine's workers. One
        broadcast reaches all of them, so one member's failure breaks it for every member: the engines
        that failed on their own, and those that no longer answer, leave (counted, replaced); the
        others finish their reloads and, if an engine was lost, take the push once more over a new
        group (a second break leaves none). A break with no engine lost (the ranks failed, or the group
        timed out) fails every engine in it (weights undefined) and is raised."""
        fail = fail or self._fail
        for attempt in range(2):
            try:
                return self._broadcast_pass(members, weights, fail)
            except _Broken as broken:
                self._group = None
                for member in broken.culprits:
                    fail(member, f"weight push: {broken.reasons[id(member)]}")
                rest = [m for m in broken.members if m not in broken.culprits]
                ended = self._each(
                    rest, lambda m: m.engine.end_weight_buckets(failed=True), fail=fail, refusals=()
                )
                for member in ended:
                    member.label += 1  # an ended reload moves the engine's own count on, as a push does
                lost = len(broken.members) - len(ended)
                if lost and not attempt and ended:
                    log.warning(
                        "weight group broke (%s) with %d engine(s) lost: pushing again to the other %d",
                        broken.cause, lost, len(ended),
                    )  # fmt: skip
                    members = ended
                    continue
                for member in ended:
                    fail(member, f"weight push over the group broke ({broken.cause}): weights undefined")
                if lost:
                    return []
                raise broken.error from None
        return []

    def _broadcast_pass(
        self, members: list[_Member], weights: BucketBroadcast, fail: Callable[[_Member, str], None]
    ) -> list[_Member]:
        members = self._each(members, lambda m: m.engine.begin_weight_buckets(weights.announced), fail=fail)
        if not members:
            return []
        try:
            self._join_group(members, weights)
            weights.open()
            try:
                for index, slots in enumerate(weights.buckets):
                    wait = weights.send(index)
                    self._collective(
                        members, lambda m, i=index, s=slots: m.engine.receive_weight_bucket(i, s), wait,
                        f"weight bucket {index}",
                    )  # fmt: skip
            except BaseException:
                try:  # the ranks close their pass; the failure on its way out is the one to report
                    weights.close()
                except Exception as exc:
                    log.warning("closing the ranks' bucket pass after a failed push: %s", exc)
                raise
            weights.close()
        except _Broken:
            raise
        except Exception as exc:  # the ranks could not form the group, or open or close their pass
            raise _Broken(members, exc, f"{type(exc).__name__}: {exc}") from exc
        return self._each(members, lambda m: m.engine.end_weight_buckets(), fail=fail)

    def _join_group(self, members: list[_Member], weights: BucketBroadcast) -> None:
        """Form the group of rank 0 and every worker of ``members`` (in order, from rank 1), unless rank 0
        still holds the group last formed and its members are exactly these engines."""
        engines = tuple(m.engine for m in members)
        if self._holds_group(weights, engines):
            return
        self._group = None
        firsts, world = [], 1
        for member in members:
            firsts.append(world)
            world += int(getattr(member.engine, "group_ranks", 1))
        address = weights.address()
        wait = weights.connect(address, world)
        first = dict(zip(map(id, members), firsts, strict=True))
        token = self._collective(
            members,
            lambda m: m.engine.join_weight_group(
                address, first[id(m)], world, weights.timeout_s, weights.backend
            ),
            wait,
            "joining the weight group",
        )
        self._group = (weights.sender, token, engines)
        log.info("weight group formed: rank 0 and %d engine workers at %s", world - 1, address)

    def _holds_group(self, weights: BucketBroadcast, engines: tuple[Any, ...]) -> bool:
        held = self._group
        if held is None or held[0] != weights.sender or len(held[2]) != len(engines):
            return False
        same = all(a is b for a, b in zip(held[2], engines, strict=True))
        return same and weights.group() == held[1]

    def _collective(
        self, members: list[_Member], call: Callable[[_Member], Any], wait: Callable[[], Any], what: str
    ) -> Any:
        """``call`` on every member at once while the ranks' side runs; returns what ``wait`` (the
        ranks' side) returns. Any failure breaks the group (:class:`_Broken`), since each member's part
        needs all the others'; a member that failed on its own (not through the group: an error loading
        the bucket, a receive past the fleet's limit) is named a culprit."""
        from services.rollout.weight_group import WeightGroupError

        deadline = None if self.timeout_s is None else time.monotonic() + self.timeout_s
        calls = {self._pool.submit(call, m): m for m in members}
        reasons: dict[int, str] = {}
        culprits: list[_Member] = []
        first: BaseException | None = None
        for future, member in calls.items():
            try:
                future.result(timeout=_left(deadline))
            except FutureTimeout as exc:
                reasons[id(member)] = _timeout_reason(future, exc, "took more than", self.timeout_s)
                culprits.append(member)
                first = first or exc
            except Exception as exc:
                reasons[id(member)] = f"{type(exc).__name__}: {exc}"
                if not isinstance(exc, WeightGroupError):
                    culprits.append(member)
                first = first or exc
        try:
            result = wait()
        except Exception as exc:
            reasons[0] = f"the actor ranks: {type(exc).__name__}: {exc}"
            first = exc
        if first is not None:
            named = [f"engine {m.index}: {reasons[id(m)]}" for m in members if id(m) in reasons]
            cause = f"{what}: " + "; ".join(([reasons[0]] if 0 in reasons else []) + named)
            raise _Broken(members, first, cause, culprits, reasons)
        return result

    def _each(
        self,
        members: list[_Member],
        call: Callable[[_Member], Any],
        *,
        fail: Callable[[_Member, str], None] | None = None,
        refusals: tuple[type[BaseException], ...] = (ValueError, StaleWeights),
        what: str = "weight push",
    ) -> list[_Member]:
        """``call`` on every member at once, within ``timeout_s`` from now; returns the members it
        succeeded on. A member that raises or runs past the deadline is failed (``fail``,
        default ``_fail``); ``refusals`` (wrong names or shapes: the same for every engine) are raised."""
        fail = fail or self._fail
        deadline = None if self.timeout_s is None else time.monotonic() + self.timeout_s
        calls = {self._pool.submit(call, m): m for m in members}
        done = []
        for future, member in calls.items():
            try:
                future.result(timeout=_left(deadline))
                done.append(member)
            except refusals:
                raise
            except FutureTimeout as exc:
                fail(member, f"{what}: " + _timeout_reason(future, exc, "took more than", self.timeout_s))
            except Exception as exc:
                fail(member, f"{what}: {type(exc).__name__}: {exc}")
        return done

    def sleep(self, level: int | None = None) -> bool:
        """Every serving engine sleeps at ``level`` (None: the fleet's ``sleep_level``; see
        ``RolloutEngine.sleep``); False where none could, or when there is no level to sleep at. An
        engine that fails to is dropped as in a rollout (its replacement starts awake)."""
        level = self.sleep_level if level is None else level
        if level is None:
            return False
        self._awake.clear()
        slept = self._on_each("sleep", lambda m: m.engine.sleep(level))
        if not slept:  # nothing was released (no sleep mode): no wake-up follows, and nothing to wait for
            self._awake.set()
        return slept

    def wake_up(self) -> bool:
        woke = self._on_each("wake-up", lambda m: m.engine.wake_up())
        self._awake.set()
        return woke

    def _on_each(self, what: str, call: Callable[[_Member], bool]) -> bool:
        answers: dict[int, bool] = {}

        def ask(member: _Member) -> None:
            answers[member.index] = bool(call(member))

        self._each(self._serving(), ask, what=what, refusals=(ValueError,))  # the setting's, not an engine's
        return any(answers.values())

    def pop_metrics(self) -> dict[str, float]:
        """``rollout/engine_failures`` since the last call (engines dropped or timed out), and
        ``rollout/engines_alive``: the engines that get work now (a dropped one is back once its
        replacement holds the current weights)."""
        with self._lock:
            failures, self._failures = self._failures, 0
            alive = sum(m.alive for m in self.members)
        return {"rollout/engine_failures": float(failures), "rollout/engines_alive": float(alive)}

    def shutdown(self) -> None:
        """Stop every engine, replacements being started included, each even when another fails; the
        first error is raised at the end. Idempotent."""
        if self._closed:
            return
        self._closed = True
        self._awake.set()  # a replacement waiting for the wake-up gives up now
        errors: list[BaseException] = []
        for member in self.members:
            if member.restart is not None:
                try:  # a replacement still starting is stopped once it has started
                    replacement = member.restart.result(timeout=RESTART_WAIT_S)
                except Exception:
                    replacement = None
                if replacement is not None:
                    _stop(replacement, errors)
            _stop(member.engine, errors)
        self._pool.shutdown(wait=False, cancel_futures=True)
        if errors:
            raise errors[0]

    def __enter__(self) -> Fleet:
        return self

    def __exit__(self, *exc: object) -> None:
        self.shutdown()

    # ------------------------------------------------------------------ members -------------------------

    def _serving(self) -> list[_Member]:
        """The engines that may get work now: alive and on the newest weights (replacements that have
        started are brought to them first, on the owner's thread). A rollout on another thread (the
        next batch, generated during the update: trainer.off_policy_steps) leaves them for the next
        call on the owner's: their weights would come from ranks that are busy updating, and would be
        newer than the fleet's."""
        if threading.get_ident() == self._owner:
            self._adopt_replacements()
        live = [m for m in self.members if m.alive]
        if not live:
            raise FleetError(f"every rollout engine failed: {self._failure_summary()}")
        for m in live:
            if m.synced != self.weight_version:
                raise StaleWeights(
                    f"rollout engine {m.index} holds weights {m.synced}, the fleet's newest are "
                    f"{self.weight_version}"
                )
        return live

    def _record_push(self, member: _Member, version: int) -> None:
        reported = int(member.engine.weight_version)
        if reported != member.label + 1:
            raise StaleWeights(
                f"rollout engine {member.index} reports weight version {reported} after a push from "
                f"{member.label}: the push did not take"
            )
        member.synced, member.label = version, reported

    def _fleet_versions(self, member: _Member, groups: Sequence[RolloutGroup]) -> list[RolloutGroup]:
        """The groups with every response labelled by the fleet's weight version instead of the engine's
        own count (a restarted engine counts from 0), after checking that each token came from the
        weights of the newest push."""
        seen = {v for g in groups for r in g.responses if not r.offline for _, v in r.weight_versions}
        if seen - {member.label}:
            raise StaleWeights(
                f"rollout engine {member.index} generated with weight version(s) {sorted(seen)}, expected "
                f"{member.label} (fleet version {self.weight_version})"
            )
        version = self.weight_version
        return [
            g.model_copy(update={"responses": [_relabel(r, version) for r in g.responses]}) for g in groups
        ]

    def _fail(self, member: _Member, reason: str) -> None:
        log.warning("rollout engine %d failed (%s): its groups go to the other engines", member.index, reason)
        member.alive = False
        member.failures.append(reason)
        with self._lock:
            self._failures += 1
        if not self.independent:
            raise FleetError(
                f"rollout engine {member.index} failed ({reason}); colocated engines share the actor ranks' "
                "collectives, so the step fails (a train job's retry resumes from its checkpoint)"
            )
        member.restart_tries = 0
        member.restart = self._pool.submit(self._replacement, member.index, member.engine)

    def _replacement(self, index: int, broken: Any = None) -> Any:
        """A new engine for engine ``index`` (None: no restart factory, or the fleet shut down), after
        stopping the ``broken`` one."""
        if broken is not None:
            _stop(broken, [])  # frees its processes and placement group (a hung actor is killed)
        self._awake.wait()  # not while the others sleep: it would take the update's memory
        if self._restart is None or self._closed:
            return None
        engine = self._restart(index)
        if self._closed:  # shut down while it started (a shutdown waits RESTART_WAIT_S at most)
            _stop(engine, [])
            return None
        return engine

    def _replacement_failed(self, member: _Member, why: str) -> None:
        member.failures.append(why)
        member.restart_tries += 1
        if member.restart_tries < RESTART_TRIES and not self._closed:
            log.warning("rollout engine %d: %s; starting another (%d of %d)", member.index, why,
                        member.restart_tries + 1, RESTART_TRIES)  # fmt: skip
            member.restart = self._pool.submit(self._replacement, member.index)
        else:
            log.warning(
                "rollout engine %d: %s; it stays out after %d tries", member.index, why, RESTART_TRIES
            )

    def _adopt_replacements(self) -> None:
        for member in self.members:
            future = member.restart
            if member.alive or future is None or not future.done():
                continue
            member.restart = None
            try:
                engine = future.result()
            except Exception as exc:
                self._replacement_failed(member, f"restart: {exc}")
                continue
            if engine is None:
                continue
            try:
                label = int(engine.weight_version)
                if self.weight_version:
                    current = self._current_weights() if self._current_weights is not None else self._weights
                    if isinstance(current, BucketRefs | BucketBroadcast):
                        # on this thread: the pass drives the actor ranks, and must be over (or closed)
                        # before anything else asks them for a collective
                        candidate = _Member(member.index, engine, label=label)
                        lost: list[str] = []

                        def note(_: _Member, why: str, lost: list[str] = lost) -> None:
                            lost.append(why)

                        if not self._push_pass([candidate], current, note):
                            raise RuntimeError(lost[-1] if lost else "the push did not finish")
                    else:
                        # under the same limit as every push: a replacement that hangs must not hang the call
                        self._pool.submit(engine.push_weights, current).result(timeout=self.timeout_s)
                    if int(engine.weight_version) != label + 1:
                        raise StaleWeights(f"the restarted engine {member.index} did not take the weights")
                    label += 1
            except Exception as exc:
                _stop(engine, [])
                self._replacement_failed(member, f"restart push: {exc}")
                continue
            member.engine, member.label, member.synced = engine, label, self.weight_version
            member.alive = True
            log.info("rollout engine %d restarted at weight version %d", member.index, self.weight_version)

    def _failure_summary(self) -> str:
        parts = [f"engine {m.index}: {m.failures[-1]}" for m in self.members if m.failures]
        return "; ".join(parts) or "no engine"


def _relabel(response: RolloutResponse, version: int) -> RolloutResponse:
    if response.offline:
        return response
    return response.model_copy(update={"weight_version": version, "weight_versions": ((0, version),)})


def _timeout_reason(future: Future, exc: BaseException, what: str, timeout_s: float | None) -> str:
    """Why a call counts as failed on a TimeoutError: the fleet's own limit when the call is still
    running, else a TimeoutError the engine itself raised (builtin ``TimeoutError`` is the futures' one)."""
    if not future.done() and timeout_s is not None:
        return f"{what} {timeout_s:g} s"
    return f"{type(exc).__name__}: {exc}"


def _left(deadline: float | None) -> float | None:
    return None if deadline is None else max(0.0, deadline - time.monotonic())


def _stop(engine: Any, errors: list[BaseException]) -> None:
    try:
        engine.shutdown()
    except Exception as exc:
        log.warning("rollout engine shutdown: %s", exc)
        errors.append(exc)
