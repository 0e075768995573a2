"""What the deployment tests check the artefacts against: the CLIs, the settings, the metrics, Kustomize.

No container runtime or cluster runs here, so the artefacts are checked against what they name: every
command they run must parse with the real command line (``reelrl``'s Typer app, Ray's click app), every
``REELRL_*`` variable must be a field of a settings class, every metric a dashboard queries must be
registered by the code, and the Kubernetes overlays are rendered by Kustomize's rules (below) and then
validated against the Kubernetes schemas.
"""

from __future__ import annotations

import ast
import copy
import functools
import importlib
import re
import shlex
from collections.abc import Iterator
from pathlib import Path, PurePath
from typing import Any

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[2]
SERVICES = ROOT / "services"
# The Kubernetes version the manifests are validated against (and documented for, docs/deploy.md).
KUBERNETES_VERSION = "1.33"


# --- commands --------------------------------------------------------------------------------------------

_SHELL_OPERATORS = {"&&", "||", ";", "|", "&"}
_REDIRECTIONS = {">", ">>", "<", ">&", "<&"}


def shell_commands(text: str) -> list[list[str]]:
    """The simple commands of a shell line (``a && b | c``), without ``exec``, ``VAR=value`` or redirections."""
    lexer = shlex.shlex(text, posix=True, punctuation_chars=True)
    lexer.whitespace_split = True
    commands: list[list[str]] = [[]]
    redirect_target = False
    for token in lexer:
        if redirect_target:
            redirect_target = False
        elif token in _SHELL_OPERATORS:
            commands.append([])
        elif token in _REDIRECTIONS:
            if commands[-1] and commands[-1][-1].isdigit():  # `2>`: the descriptor is no argument
                commands[-1].pop()
            redirect_target = True
        else:
            commands[-1].append(token)
    result = []
    for argv in commands:
        while argv and (argv[0] == "exec" or re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*=.*", argv[0])):
            argv = argv[1:]
        if argv:
            result.append(argv)
    return result


@functools.cache
def _cli(program: str) -> Any:
    if program == "reelrl":
        import typer

        from services.cli import app

        return typer.main.get_command(app)
    if program == "ray":
        from ray.scripts.scripts import cli

        return cli
    return None


def _names_a_file(param: Any) -> bool:
    descriptor = getattr(param, "type_descriptor", None)  # Typer's parameters
    if descriptor is not None:
        return isinstance(descriptor.annotation, type) and issubclass(descriptor.annotation, PurePath)
    return param.type.name == "path"


def _usage_errors() -> tuple[type[Exception], ...]:
    import click
    import typer.exceptions

    # Typer ships its own copy of click: its errors are not click's.
    return (click.ClickException, typer.exceptions.TyperException)


def cli_problems(argv: list[str]) -> list[str]:
    """Why ``argv`` would not start: unknown sub-command or option, bad value, missing argument.

    Only ``reelrl`` and ``ray`` command lines are ours to check (empty list for anything else). Values
    that name files are not checked for existence: they live in the image or a mounted volume.
    """
    cli = _cli(argv[0])
    if cli is None:
        return []
    line = shlex.join(argv)
    command, ctx, path, args = cli, cli.make_context(argv[0], [], resilient_parsing=True), [argv[0]], argv[1:]
    while hasattr(command, "get_command"):  # a group: the next word names a sub-command
        if args == ["--help"]:
            return []
        if not args or args[0].startswith("-"):
            return [f"{line}: `{' '.join(path)}` needs a sub-command"]
        sub = command.get_command(ctx, args[0])
        if sub is None:
            return [f"{line}: `{' '.join(path)}` has no sub-command {args[0]!r}"]
        path.append(args[0])
        command, args = sub, args[1:]
        ctx = command.make_context(path[-1], [], parent=ctx, resilient_parsing=True)
    ctx.resilient_parsing = False  # the parser swallows its errors in a resilient context
    try:
        opts, extra, _ = command.make_parser(ctx).parse_args(args=list(args))
    except _usage_errors() as exc:
        return [f"{line}: {exc}"]
    problems = []
    if extra and not ctx.allow_extra_args:  # the context carries the command's context_settings
        problems.append(f"{line}: unexpected arguments {extra}")
    for param in command.params:
        if param.name not in opts or param.value_is_missing(opts[param.name]):  # e.g. click's UNSET
            if param.required:
                problems.append(f"{line}: missing {param.name}")
            continue
        if _names_a_file(param):
            continue
        try:
            param.process_value(ctx, opts[param.name])
        except _usage_errors() as exc:
            problems.append(f"{line}: {param.name}: {exc}")
    if path[:3] == ["ray", "job", "submit"] and not problems:
        # The entrypoint is a shell command line run on the head: check the commands inside it too.
        for inner in shell_commands(" ".join(opts["entrypoint"])):
            problems += cli_problems(inner)
    return problems


# --- settings --------------------------------------------------------------------------------------------


def _settings_classes() -> Iterator[type]:
    """Every pydantic-settings class of the project whose environment prefix is ``REELRL_``."""
    for path in sorted(SERVICES.rglob("*.py")):
        source = path.read_text()
        if 'env_prefix="REELRL_' not in source:
            continue
        module = importlib.import_module(".".join(path.relative_to(ROOT).with_suffix("").parts))
        for node in ast.walk(ast.parse(source)):
            if isinstance(node, ast.ClassDef) and 'env_prefix="REELRL_' in ast.get_source_segment(
                source, node
            ):
                yield getattr(module, node.name)


@pytest.fixture(scope="session")
def settings_fields() -> dict[str, tuple[type, str]]:
    """``REELRL_*`` variable → (settings class, field name), over every settings class of the project."""
    fields: dict[str, tuple[type, str]] = {}
    for cls in _settings_classes():
        prefix = cls.model_config["env_prefix"]
        for name, info in cls.model_fields.items():
            assert info.validation_alias is None, f"{cls.__name__}.{name}: aliases are not looked up here"
            variable = f"{prefix}{name}".upper()
            assert variable not in fields, f"{variable} is a field of two settings classes"
            fields[variable] = (cls, name)
    return fields


# --- metrics ---------------------------------------------------------------------------------------------

# What a metric of each kind exposes, as prometheus_client names its samples.
_EXPOSED = {
    "Counter": ("_total", "_created"),
    "Gauge": ("",),
    "Histogram": ("_bucket", "_sum", "_count", "_created"),
    "Summary": ("_sum", "_count", "_created"),
    "Info": ("_info",),
    "Enum": ("",),
    "CounterMetricFamily": ("_total", "_created"),
    "GaugeMetricFamily": ("",),
    "HistogramMetricFamily": ("_bucket", "_sum", "_count"),
    "SummaryMetricFamily": ("_sum", "_count"),
    "InfoMetricFamily": ("_info",),
}


@pytest.fixture(scope="session")
def registered_metrics() -> set[str]:
    """Every sample name the project's Prometheus metrics expose, from the constructors in its code."""
    names: set[str] = set()
    for path in sorted(SERVICES.rglob("*.py")):
        source = path.read_text()
        if "prometheus_client" not in source:
            continue
        for node in ast.walk(ast.parse(source)):
            if not isinstance(node, ast.Call):
                continue
            kind = node.func.id if isinstance(node.func, ast.Name) else getattr(node.func, "attr", None)
            if kind not in _EXPOSED:
                continue
            first = node.args[0] if node.args else None
            assert isinstance(first, ast.Constant) and isinstance(first.value, str), (
                f"{path}:{node.lineno}: a {kind} whose name is not a literal cannot be checked"
            )
            base = first.value.removesuffix("_total") if kind.startswith("Counter") else first.value
            names.update(base + suffix for suffix in _EXPOSED[kind])
    return names


# --- Kustomize -------------------------------------------------------------------------------------------

# The Kustomization fields these manifests use; a kustomization using any other fails to render here
# rather than render differently from `kubectl kustomize`.
_KUSTOMIZATION_FIELDS = {"apiVersion", "kind", "resources", "namespace", "images", "patches"}
_CLUSTER_SCOPED = {"Namespace", "PersistentVolume", "StorageClass", "ClusterRole", "ClusterRoleBinding",
                   "CustomResourceDefinition", "PriorityClass", "IngressClass"}  # fmt: skip


def kustomize_build(folder: Path) -> list[dict]:
    """``kubectl kustomize FOLDER`` for the fields in ``_KUSTOMIZATION_FIELDS``, by Kustomize's rules:
    resources (files or kustomization folders, recursively), then JSON 6902 patches on their targets,
    then images, then the namespace of every namespaced object."""
    spec = yaml.safe_load((folder / "kustomization.yaml").read_text())
    unknown = set(spec) - _KUSTOMIZATION_FIELDS
    assert not unknown, f"{folder}: kustomization fields {sorted(unknown)} are not rendered by this test"
    assert (spec["apiVersion"], spec["kind"]) == ("kustomize.config.k8s.io/v1beta1", "Kustomization")
    objects: list[dict] = []
    for entry in spec.get("resources", []):
        target = folder / entry
        if target.is_dir():
            objects += kustomize_build(target)
        else:
            objects += [doc for doc in yaml.safe_load_all(target.read_text()) if doc is not None]
    for patch in spec.get("patches", []):
        assert set(patch) == {"target", "patch"}, f"{folder}: only inline JSON 6902 patches with a target"
        operations = yaml.safe_load(patch["patch"])
        assert isinstance(operations, list), f"{folder}: {patch['target']}: not a JSON 6902 patch"
        matched = [o for o in objects if _matches(o, patch["target"])]
        assert matched, f"{folder}: patch target {patch['target']} matches no object"
        for obj in matched:
            for operation in operations:
                apply_json_patch(obj, operation)
    for image in spec.get("images", []):
        for obj in objects:
            _set_image(obj, image)
    if "namespace" in spec:
        for obj in objects:
            if obj["kind"] not in _CLUSTER_SCOPED:
                obj["metadata"]["namespace"] = spec["namespace"]
    return objects


def _matches(obj: dict, target: dict) -> bool:
    assert set(target) <= {"kind", "name"}, (
        f"patch target selects by {sorted(target)}; only kind and name here"
    )
    return (
        target.get("kind", obj["kind"]) == obj["kind"]
        and target.get("name", obj["metadata"]["name"]) == (obj["metadata"]["name"])
    )


def _pointer(path: str) -> list[str]:
    assert path.startswith("/"), f"JSON pointer {path!r} must start with /"
    return [part.replace("~1", "/").replace("~0", "~") for part in path[1:].split("/")]


def apply_json_patch(document: dict, operation: dict) -> None:
    """One RFC 6902 ``add`` / ``replace`` / ``remove``, in place (an error for anything else)."""
    op, parts = operation["op"], _pointer(operation["path"])
    assert op in ("add", "replace", "remove"), f"JSON patch op {op!r} is not rendered by this test"
    parent = document
    for part in parts[:-1]:
        parent = parent[int(part)] if isinstance(parent, list) else parent[part]
    last = parts[-1]
    if isinstance(parent, list):
        if op == "add":
            parent.insert(len(parent) if last == "-" else int(last), copy.deepcopy(operation["value"]))
            return
        index = int(last)
        assert 0 <= index < len(parent), f"{operation['path']}: no such element"
        if op == "replace":
            parent[index] = copy.deepcopy(operation["value"])
        else:
            del parent[index]
        return
    if op != "add":
        assert last in parent, f"{operation['path']}: nothing to {op}"
    if op == "remove":
        del parent[last]
    else:
        parent[last] = copy.deepcopy(operation["value"])


def _set_image(node: Any, image: dict) -> None:
    """Kustomize's image transformer: every container of ``containers``/``initContainers`` lists,
    wherever they are in the object (custom resources included)."""
    assert set(image) <= {"name", "newName", "newTag"}, f"image fields {sorted(image)} are not rendered here"
    if isinstance(node, list):
        for item in node:
            _set_image(item, image)
        return
    if not isinstance(node, dict):
        return
    for key, value in node.items():
        if key in ("containers", "initContainers") and isinstance(value, list):
            for container in value:
                name, tag = _split_image(container["image"])
                if name == image["name"]:
                    new_tag = image.get("newTag", tag)
                    container["image"] = image.get("newName", name) + (f":{new_tag}" if new_tag else "")
        else:
            _set_image(value, image)


def _split_image(reference: str) -> tuple[str, str | None]:
    assert "@" not in reference, f"image {reference!r}: digests are not rendered here"
    name, _, tag = reference.rpartition(":")
    if not name or "/" in tag:  # no tag, or the colon belonged to a registry's port
        return reference, None
    return name, tag


# --- fixtures: the helpers above, for the test modules (conftest is not importable under importlib) ---


@pytest.fixture(scope="session")
def check_command():
    return cli_problems


@pytest.fixture(scope="session")
def split_shell():
    return shell_commands


@pytest.fixture(scope="session")
def kustomize():
    return kustomize_build


@pytest.fixture(scope="session")
def json_patch():
    return apply_json_patch


@pytest.fixture(scope="session")
def kubernetes_version() -> str:
    return KUBERNETES_VERSION
