"""docker-compose.yml and its GPU override, checked against the Compose Specification's schema and the code."""

from __future__ import annotations

import hashlib
import json
import re
import shlex
from pathlib import Path

import jsonschema
import pytest
import yaml

ROOT = Path(__file__).resolve().parents[2]
BASE, GPU = ROOT / "docker-compose.yml", ROOT / "docker-compose.gpu.yml"
SCHEMA = Path(__file__).with_name("fixtures") / "compose-spec.json"
SCHEMA_SHA256 = "d549057ebc2925f39f62799eab0db7b9e2c18b35b6c00595199116da3ed10e64"  # fixtures/README.md

_VARIABLE = re.compile(
    r"\$(?:\{(?P<braced>[A-Za-z_][A-Za-z0-9_]*)(?P<op>:?[-?])?(?P<arg>[^}]*)\}|(?P<plain>[A-Za-z_][A-Za-z0-9_]*)|(?P<escaped>\$))"
)


def read_env_file(path: Path) -> dict[str, str]:
    """KEY=value lines (comments and blanks skipped), as Compose reads an env file."""
    values = {}
    for line in path.read_text().splitlines():
        line = line.strip()
        if line and not line.startswith("#"):
            key, sep, value = line.partition("=")
            assert sep, f"{path.name}: {line!r} is not KEY=value"
            values[key] = value
    return values


def interpolate(node: object, env: dict[str, str]) -> object:
    """Compose's variable substitution: ${VAR}, ${VAR:-default}, ${VAR-default}, ${VAR:?error}, $$."""

    def substitute(match: re.Match) -> str:
        if match["escaped"]:
            return "$"
        name = match["braced"] or match["plain"]
        value, op = env.get(name), match["op"]
        unset_or_empty = value is None or (op is not None and op.startswith(":") and value == "")
        if op in (":-", "-") and unset_or_empty:
            return match["arg"]
        if op in (":?", "?") and unset_or_empty:
            raise AssertionError(f"${{{name}}} is required: {match['arg']}")
        return value if value is not None else ""

    if isinstance(node, str):
        return _VARIABLE.sub(substitute, node)
    if isinstance(node, list):
        return [interpolate(item, env) for item in node]
    if isinstance(node, dict):
        return {key: interpolate(value, env) for key, value in node.items()}
    return node


def variables(node: object) -> set[str]:
    if isinstance(node, str):
        return {m["braced"] or m["plain"] for m in _VARIABLE.finditer(node) if not m["escaped"]}
    if isinstance(node, list):
        return set().union(*(variables(item) for item in node)) if node else set()
    if isinstance(node, dict):
        return set().union(*(variables(value) for value in node.values())) if node else set()
    return set()


@pytest.fixture(scope="module")
def env_example() -> dict[str, str]:
    return read_env_file(ROOT / ".env.example")


@pytest.fixture(scope="module")
def raw() -> dict[Path, dict]:
    return {path: yaml.safe_load(path.read_text()) for path in (BASE, GPU)}


@pytest.fixture(scope="module")
def compose(raw, env_example) -> dict[Path, dict]:
    """Both files as `docker compose config` sees them with .env.example as .env."""
    return {path: interpolate(document, env_example) for path, document in raw.items()}


def service_environment(service: dict) -> dict[str, str]:
    environment = service.get("environment") or {}
    if isinstance(environment, list):
        environment = dict(item.partition("=")[::2] for item in environment)
    return {key: str(value) for key, value in environment.items()}


def command_lines(service: dict) -> list[list[str]]:
    """The argument vectors a service runs: its command and its health check."""
    found = []
    command = service.get("command")
    if command is not None:
        found.append(shlex.split(command) if isinstance(command, str) else list(command))
    test = (service.get("healthcheck") or {}).get("test")
    if test:
        if isinstance(test, str):
            found.append(["sh", "-c", test])
        elif test[0] == "CMD-SHELL":
            found.append(["sh", "-c", test[1]])
        elif test[0] == "CMD":
            found.append(list(test[1:]))
    return found


def merged(base: dict, override: dict) -> dict:
    """Compose's merge of an override file for the keys these files use (mappings merge, the rest is replaced)."""
    result = dict(base)
    for key, value in override.items():
        if isinstance(value, dict) and isinstance(result.get(key), dict):
            result[key] = merged(result[key], value)
        else:
            result[key] = value
    return result


def test_schema_fixture_is_the_documented_file():
    assert hashlib.sha256(SCHEMA.read_bytes()).hexdigest() == SCHEMA_SHA256


@pytest.mark.parametrize("which", ["raw", "compose"])
@pytest.mark.parametrize("path", [BASE, GPU], ids=lambda p: p.name)
def test_files_follow_the_compose_specification(which, path, request):
    document = request.getfixturevalue(which)[path]
    validator = jsonschema.Draft202012Validator(json.loads(SCHEMA.read_text()))
    errors = [f"{'/'.join(map(str, e.absolute_path))}: {e.message}" for e in validator.iter_errors(document)]
    assert errors == []


def test_schema_rejects_what_compose_rejects(compose):
    """The validation can fail: a misspelt key and a wrong type are refused."""
    validator = jsonschema.Draft202012Validator(json.loads(SCHEMA.read_text()))
    broken = json.loads(json.dumps(compose[BASE]))
    broken["services"]["api"]["helthcheck"] = broken["services"]["api"].pop("healthcheck")
    broken["services"]["reward"]["deploy"]["replicas"] = [2]
    messages = [e.message for e in validator.iter_errors(broken)]
    assert len(messages) == 2 and any("helthcheck" in m for m in messages)


def test_every_variable_the_files_read_is_in_env_example(raw, env_example):
    used = variables(raw[BASE]) | variables(raw[GPU])
    assert used and used <= set(env_example), f"missing from .env.example: {sorted(used - set(env_example))}"


def test_every_reelrl_variable_is_a_setting_and_its_value_is_valid(
    compose, env_example, settings_fields, reelrl_home, monkeypatch
):
    from_env_file = {k: v for k, v in env_example.items() if k.startswith("REELRL_")}
    commented = re.findall(r"^# (REELRL_[A-Z0-9_]+)=", (ROOT / ".env.example").read_text(), re.M)
    assert commented
    for key in [*from_env_file, *commented]:
        assert key in settings_fields, f".env.example: {key} is not a setting"
    for path, document in compose.items():
        for name, service in document["services"].items():
            # What the container sees: .env, then the service's own environment on top.
            environment = {**from_env_file, **service_environment(service)}
            with monkeypatch.context() as patch:
                for key, value in environment.items():
                    if key.startswith("REELRL_"):
                        assert key in settings_fields, f"{path.name}: {name}: {key} is not a setting"
                        patch.setenv(key, value)
                for cls in {settings_fields[key][0] for key in environment if key.startswith("REELRL_")}:
                    cls()  # a value the service cannot start with fails here, naming the variable


def test_env_example_states_the_defaults_of_the_settings_it_lists(settings_fields, reelrl_home, monkeypatch):
    listed = re.findall(r"^# (REELRL_[A-Z0-9_]+)=(.*)$", (ROOT / ".env.example").read_text(), re.M)
    assert listed
    for key, value in listed:
        if key == "REELRL_DATA_ROOTS":  # an example, not the default
            continue
        cls, field = settings_fields[key]
        with monkeypatch.context() as patch:
            patch.setenv(key, value)
            assert getattr(cls(), field) == cls.model_fields[field].get_default(call_default_factory=True), (
                f".env.example says {key}={value} is the default"
            )


def test_every_command_exists_in_the_cli(compose, split_shell, check_command):
    checked = set()
    for path, document in compose.items():
        for name, service in document["services"].items():
            for argv in command_lines(service):
                lines = [shlex.join(argv)] if argv[:2] != ["sh", "-c"] else [argv[2]]
                for line in lines:
                    for command in split_shell(line):
                        assert check_command(command) == [], f"{path.name}: {name}"
                        if command[0] in ("reelrl", "ray"):
                            checked.add(" ".join(command[:3]))
    for role in ("reelrl serve api", "reelrl serve reward", "reelrl worker preprocess", "reelrl worker eval",
                 "reelrl worker train", "reelrl db upgrade", "ray start --head", "ray job submit"):  # fmt: skip
        assert role in checked


def test_services_have_health_checks_and_wait_for_migrations(compose):
    services = compose[BASE]["services"]
    assert services["migrate"]["command"] == ["reelrl", "db", "upgrade"]
    for name, service in services.items():
        if service.get("restart") == "no":  # one-shot: it exits
            continue
        assert "test" in service.get("healthcheck", {}), f"{name} has no health check"
        if "REELRL_DATABASE_URL" in service_environment(service):
            assert service["depends_on"]["migrate"]["condition"] == "service_completed_successfully", name
    # The API, the workers and the Ray head (drivers record runs) use the database.
    uses_database = {n for n, s in services.items() if "REELRL_DATABASE_URL" in service_environment(s)}
    assert {"api", "preprocess", "preprocess-jobs", "eval", "train-worker", "ray-head"} <= uses_database


def test_workers_share_the_frame_store_volume(compose):
    services = compose[BASE]["services"]
    assert "frames" in compose[BASE]["volumes"]
    sharing = set()
    for name, service in services.items():
        command = " ".join(command_lines(service)[0]) if "command" in service else ""
        if "reelrl worker" in command or "ray start" in command:
            root = service_environment(service)["REELRL_FRAME_ROOT"]
            assert f"frames:{root}" in service["volumes"], f"{name} does not mount the frame store at {root}"
            sharing.add(name)
    assert {"preprocess", "eval", "train-worker", "ray-head"} <= sharing


def test_reward_scales_by_replicas_and_gpu_override_reserves_gpus(compose):
    base, gpu = compose[BASE]["services"], compose[GPU]["services"]
    assert int(base["reward"]["deploy"]["replicas"]) >= 2
    assert set(gpu) <= set(base)
    for name, service in gpu.items():
        assert merged(base[name], service)["build"]["dockerfile"] == "deploy/docker/Dockerfile.cuda", name
    reserving = set()
    for name, service in gpu.items():
        for device in (
            service.get("deploy", {}).get("resources", {}).get("reservations", {}).get("devices", [])
        ):
            assert device["driver"] == "nvidia" and "gpu" in device["capabilities"]
            reserving.add(name)
    assert reserving == {"eval", "train-worker"}
    assert "devices" not in json.dumps(base)  # the CPU file asks for no GPU
