"""A registry that maps the members of a config Enum to pure functions.

Both the advantage estimators and the policy losses grow through one of these: adding a variant means one
Enum member and one decorated function, never an if-chain in the trainer. The trainer calls every variant
the same way, with everything it has as keyword arguments; each function receives only the arguments its
signature names, so a ReMax baseline never reaches GRPO and a missing input is reported by name. A name
that no registered function takes is a caller's typo (``behavior_log_probs``) and raises, instead of
vanishing and leaving the variant on its default.
"""

from __future__ import annotations

import difflib
import inspect
from collections.abc import Callable
from enum import Enum
from typing import Any, Generic, TypeVar

E = TypeVar("E", bound=Enum)
F = TypeVar("F", bound=Callable[..., Any])


class Registry(Generic[E]):
    """Functions keyed by the members of one Enum.

    Args:
        kind: what the functions compute, used in error messages ("advantage estimator").
        keys: the Enum whose members name the variants; strings are accepted wherever a member is.
    """

    def __init__(self, kind: str, keys: type[E]) -> None:
        self.kind = kind
        self.keys = keys
        self._fns: dict[E, Callable[..., Any]] = {}

    def register(self, key: E) -> Callable[[F], F]:
        """Decorator registering ``fn`` under ``key``; registering one key twice is a bug and raises."""

        def decorator(fn: F) -> F:
            member = self.keys(key)
            if member in self._fns:
                raise ValueError(
                    f"{self.kind} {member.value!r} is registered twice "
                    f"({self._fns[member].__qualname__} and {fn.__qualname__})"
                )
            self._fns[member] = fn
            return fn

        return decorator

    def get(self, key: E | str) -> Callable[..., Any]:
        """The function registered for ``key``; unknown names raise with the list of known ones."""
        try:
            member = self.keys(key)
        except ValueError as exc:
            known = ", ".join(m.value for m in self.keys)
            raise ValueError(f"unknown {self.kind} {key!r}; known: {known}") from exc
        if member not in self._fns:
            raise ValueError(f"{self.kind} {member.value!r} is declared but has no registered function")
        return self._fns[member]

    def call(self, key: E | str, **inputs: Any) -> Any:
        """Call the function for ``key`` with the subset of ``inputs`` its signature accepts.

        ``None`` values count as absent, so the trainer can pass optional inputs unconditionally. An input
        that only other variants take is dropped; one that no registered variant takes raises.

        Raises:
            ValueError: an input name that no registered function accepts (the message names it and lists
                the accepted names), or a parameter without a default is absent from ``inputs`` (the
                message names the variant and the parameter).
        """
        fn = self.get(key)
        member = self.keys(key)
        self._reject_unknown_inputs(inputs)
        params = inspect.signature(fn).parameters
        chosen: dict[str, Any] = {}
        for name, param in params.items():
            if param.kind in (inspect.Parameter.VAR_POSITIONAL, inspect.Parameter.VAR_KEYWORD):
                raise TypeError(f"{fn.__qualname__}: registered functions take named parameters only")
            value = inputs.get(name)
            if value is not None:
                chosen[name] = value
            elif param.default is inspect.Parameter.empty:
                raise ValueError(
                    f"{self.kind} {member.value!r} needs the input {name!r}, which was not given"
                )
        return fn(**chosen)

    def takes(self, key: E | str, name: str) -> bool:
        """Whether the function for ``key`` has a parameter called ``name``."""
        return name in inspect.signature(self.get(key)).parameters

    def accepted_inputs(self) -> set[str]:
        """Every parameter name that at least one registered function takes."""
        return {name for fn in self._fns.values() for name in inspect.signature(fn).parameters}

    def _reject_unknown_inputs(self, inputs: dict[str, Any]) -> None:
        accepted = self.accepted_inputs()
        unknown = sorted(set(inputs) - accepted)
        if not unknown:
            return
        hints = []
        for name in unknown:
            close = difflib.get_close_matches(name, accepted, n=1)
            hints.append(f"{name!r}" + (f" (did you mean {close[0]!r}?)" if close else ""))
        raise ValueError(
            f"input(s) {', '.join(hints)} given, but no {self.kind} takes them; "
            f"accepted: {', '.join(sorted(accepted))}"
        )

    def unregistered(self) -> list[E]:
        """Enum members that have no function (a test keeps this empty)."""
        return [m for m in self.keys if m not in self._fns]

    def __contains__(self, key: object) -> bool:
        try:
            return self.keys(key) in self._fns
        except ValueError:
            return False
