"""YAML config files as every command reads them (``reelrl train``, ``submit``, ``eval run --config``):
a mapping, or an error naming the file, the line and the reason (never a traceback).

Non-finite numbers (``.inf``, ``.nan``) are refused here too, with their line: the jobs API refuses
them in JSON bodies (``services.api.json_body``), and a config must mean the same from either door.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import yaml
from pydantic import BaseModel, ValidationError
from pydantic_core import InitErrorDetails

_FLOAT_TAG = "tag:yaml.org,2002:float"


class ConfigFileError(ValueError):
    """A config file that cannot be read as a mapping; the message is ``FILE:LINE: reason``."""


def _non_finite(node: yaml.Node, key: str, path: Path) -> None:
    if isinstance(node, yaml.ScalarNode) and node.tag == _FLOAT_TAG:
        value = yaml.safe_load(node.value)
        if isinstance(value, float) and not math.isfinite(value):
            raise ConfigFileError(
                f"{path}:{node.start_mark.line + 1}: {key}: {node.value} is not a finite number"
            )
    elif isinstance(node, yaml.MappingNode):
        for k, v in node.value:
            _non_finite(v, f"{key}.{k.value}" if key else str(k.value), path)
    elif isinstance(node, yaml.SequenceNode):
        for i, item in enumerate(node.value):
            _non_finite(item, f"{key}[{i}]", path)


def refuse_non_finite(value: Any, source: str, key: str = "") -> None:
    """:class:`ConfigFileError` naming the first non-finite number in ``value`` (a merged config:
    dotted overrides such as ``actor.optim.lr=.inf`` arrive here, not through a file)."""
    if isinstance(value, float) and not math.isfinite(value):
        raise ConfigFileError(f"{source}: {key}: {value} is not a finite number")
    if isinstance(value, dict):
        for k, item in value.items():
            refuse_non_finite(item, source, f"{key}.{k}" if key else str(k))
    elif isinstance(value, list):
        for i, item in enumerate(value):
            refuse_non_finite(item, source, f"{key}[{i}]")


def check_finite_fields(model: BaseModel) -> None:
    """A ``ValidationError`` (type ``finite_number``, located at each field) when a validated config
    holds a non-finite float. The number checks above see only numbers; pydantic also reads the
    strings "inf", "Infinity", "nan" and "1e400" as floats, and YAML writes ``1e400`` (no dot) as such
    a string, so a config could still reach infinity, or be stored as null. Every door (the API's
    kinds, ``reelrl train``, ``reelrl eval run``) runs this on the model it validated."""
    errors: list[InitErrorDetails] = []

    def walk(value: Any, loc: tuple[str | int, ...]) -> None:
        if isinstance(value, float) and not math.isfinite(value):
            errors.append(InitErrorDetails(type="finite_number", loc=loc, input=str(value)))
        elif isinstance(value, dict):
            for key, item in value.items():
                walk(item, (*loc, str(key)))
        elif isinstance(value, list | tuple):
            for i, item in enumerate(value):
                walk(item, (*loc, i))

    walk(model.model_dump(mode="python"), ())
    if errors:
        raise ValidationError.from_exception_data(type(model).__name__, errors)


def read_yaml_mapping(path: str | Path) -> dict[str, Any]:
    """The mapping at ``path`` (empty file: ``{}``); :class:`ConfigFileError` otherwise."""
    path = Path(path)
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise ConfigFileError(f"{path}: cannot read: {exc}") from None
    try:
        node = yaml.compose(text, Loader=yaml.SafeLoader)
        data = yaml.safe_load(text)
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark or exc.context_mark
        where = f"{path}:{mark.line + 1}:{mark.column + 1}" if mark else str(path)
        reason = " ".join(p for p in (exc.context, exc.problem) if p)
        raise ConfigFileError(f"{where}: malformed YAML: {reason}") from None
    except yaml.YAMLError as exc:
        raise ConfigFileError(f"{path}: malformed YAML: {exc}") from None
    if node is None:
        return {}
    if not isinstance(node, yaml.MappingNode) or not isinstance(data, dict):
        kind = "list" if isinstance(node, yaml.SequenceNode) else "single value"
        raise ConfigFileError(
            f"{path}:{node.start_mark.line + 1}: the top level is a {kind}; a config is a mapping of "
            "keys (key: value)"
        )
    _non_finite(node, "", path)
    return data


def merge_overrides(
    base: dict[str, Any], overrides: list[str] | tuple[str, ...], example: str
) -> dict[str, Any]:
    """``base`` with dotted ``key=value`` overrides on top (``a.b=1``; values are YAML), as a plain
    container. Raises :class:`ConfigFileError` naming the override for one that is not ``key=value``,
    has no key, or whose value is no YAML, and for a result holding non-finite numbers.
    ``example`` shows a valid override in the messages (e.g. ``trainer.total_steps=10``)."""
    from omegaconf import OmegaConf
    from omegaconf.errors import OmegaConfBaseException

    from services.common.json_lines import RecordError, check_text

    for item in overrides:
        key, sep, _ = item.partition("=")
        try:
            check_text(item)  # bytes of another encoding on the command line arrive as lone surrogates
        except RecordError:
            raise ConfigFileError(f"override {item!r} is not UTF-8 text") from None
        if not sep:
            raise ConfigFileError(f"override {item!r} is not key=value (e.g. {example})")
        if not key.strip() or any(not part for part in key.split(".")):
            raise ConfigFileError(f"override {item!r} names no key (e.g. {example})")
    try:
        merged = OmegaConf.merge(OmegaConf.create(base), OmegaConf.from_dotlist(list(overrides)))
        data = OmegaConf.to_container(merged, resolve=True)
    except (OmegaConfBaseException, yaml.YAMLError) as exc:
        raise ConfigFileError(f"overrides {list(overrides)}: {' '.join(str(exc).split())}") from None
    refuse_non_finite(data, f"config with overrides {list(overrides)}" if overrides else "config")
    return data
