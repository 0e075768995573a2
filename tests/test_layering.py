"""The import rules of the layout (brief; issue 35 §10), read from the source, function-level imports
included: ``services/rollout`` never imports ``services/trainer`` (an engine takes an iterator of weight
buckets, not the trainer's model), and the trainer's modules import each other without a circle."""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def imports(path: Path) -> set[str]:
    """Every ``services.*`` module ``path`` imports at run time, at any depth of its code (what only
    type checkers read, under ``if TYPE_CHECKING:``, is no circle)."""
    found: set[str] = set()
    tree = ast.parse(path.read_text(), filename=str(path))
    for node in ast.walk(tree):
        if isinstance(node, ast.If) and ast.unparse(node.test) in ("TYPE_CHECKING", "typing.TYPE_CHECKING"):
            node.body = []
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("services."):
            found.add(node.module)
        elif isinstance(node, ast.Import):
            found.update(a.name for a in node.names if a.name.startswith("services."))
    return found


def module_of(path: Path) -> str:
    return ".".join(path.relative_to(ROOT).with_suffix("").parts)


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The import circles of ``graph`` (one path per circle found by a depth-first walk)."""
    found, state = [], dict.fromkeys(graph, 0)  # 0 unseen, 1 on the path, 2 done

    def walk(node: str, path: list[str]) -> None:
        state[node] = 1
        for dep in sorted(graph[node]):
            if state.get(dep) == 1:
                found.append([*path[path.index(dep) :], dep])
            elif state.get(dep) == 0:
                walk(dep, [*path, dep])
        state[node] = 2

    for node in sorted(graph):
        if state[node] == 0:
            walk(node, [node])
    return found


def test_cycles_finds_a_circle_and_nothing_else() -> None:
    assert cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c", "a"]]
    assert cycles({"a": {"b"}, "b": set(), "c": {"a", "b"}}) == []


def test_rollout_never_imports_the_trainer() -> None:
    offenders = {
        module_of(path): sorted(m for m in imports(path) if m.startswith("services.trainer"))
        for path in (ROOT / "services" / "rollout").rglob("*.py")
    }
    assert {k: v for k, v in offenders.items() if v} == {}


def test_the_trainer_s_modules_import_each_other_without_a_circle() -> None:
    paths = list((ROOT / "services" / "trainer").rglob("*.py"))
    modules = {module_of(p) for p in paths}
    graph = {module_of(p): {m for m in imports(p) if m in modules} for p in paths}
    assert cycles(graph) == []
