"""The environment an engine is constructed in: its private temp folder, and what must outlive it."""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
import threading
from pathlib import Path

import pytest

from services.rollout.environment import (
    compile_cache_dir_name,
    engine_environment,
    remove_private_folder,
    restored_environ,
)


def _fresh_temp(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TMPDIR", str(tmp_path))
    monkeypatch.setattr(tempfile, "tempdir", None)
    monkeypatch.delenv("VLLM_RPC_BASE_PATH", raising=False)


def _default_cache_dir_of_a_child() -> Path:
    """Where a process the engine spawns now (inheriting this environment) puts its headers."""
    code = "from torch._inductor.runtime.cache_dir_utils import default_cache_dir; print(default_cache_dir())"
    return Path(
        subprocess.run(
            [sys.executable, "-c", code], capture_output=True, text=True, check=True
        ).stdout.strip()
    )


def test_compiled_headers_outlive_the_engine_s_private_folder(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    _fresh_temp(tmp_path, monkeypatch)
    monkeypatch.delenv("TORCHINDUCTOR_CACHE_DIR", raising=False)
    with engine_environment() as folder:
        # the engine's processes see the private folder as their temp dir, and torch's default compile
        # cache there (where its precompiled headers go, whatever is exported) leads out of it
        assert os.environ["TMPDIR"] == str(folder) and folder.parent == tmp_path
        inside = _default_cache_dir_of_a_child()
        assert inside.parent == folder and inside.name == compile_cache_dir_name()
        (inside / "precompiled_headers").mkdir()
        (inside / "precompiled_headers" / "h.gch").write_text("compiled")
    remove_private_folder(folder)
    assert os.environ["TMPDIR"] == str(tmp_path) and not folder.exists()
    kept = tmp_path / compile_cache_dir_name() / "precompiled_headers" / "h.gch"
    assert kept.read_text() == "compiled"
    with engine_environment() as again:  # the next engine finds them
        assert (_default_cache_dir_of_a_child() / "precompiled_headers" / "h.gch").read_text() == "compiled"
    remove_private_folder(again)


def test_an_exported_compile_cache_is_the_one_linked(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    _fresh_temp(tmp_path, monkeypatch)
    monkeypatch.setenv("TORCHINDUCTOR_CACHE_DIR", str(tmp_path / "mine"))
    with engine_environment() as folder:
        assert (folder / compile_cache_dir_name()).resolve() == (tmp_path / "mine").resolve()
        assert os.environ["TORCHINDUCTOR_CACHE_DIR"] == str(tmp_path / "mine")
    remove_private_folder(folder)
    assert (tmp_path / "mine").is_dir()


def test_an_engine_s_cores_bind_its_threads_only_while_it_starts(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    _fresh_temp(tmp_path, monkeypatch)
    monkeypatch.delenv("VLLM_CPU_OMP_THREADS_BIND", raising=False)
    with engine_environment([1]) as folder:
        assert os.environ["VLLM_CPU_OMP_THREADS_BIND"] == "1"
    remove_private_folder(folder)
    assert os.environ["VLLM_CPU_OMP_THREADS_BIND"] == "auto"  # the next engine chooses again
    with engine_environment(None) as folder:
        assert os.environ["VLLM_CPU_OMP_THREADS_BIND"] == "auto"
    remove_private_folder(folder)
    # an operator's binding wins over the fleet's split
    monkeypatch.setenv("VLLM_CPU_OMP_THREADS_BIND", "0-1")
    with engine_environment([1]) as folder:
        assert os.environ["VLLM_CPU_OMP_THREADS_BIND"] == "0-1"
    remove_private_folder(folder)
    assert os.environ["VLLM_CPU_OMP_THREADS_BIND"] == "0-1"


def test_two_engines_started_at_once_each_see_their_own_cores_and_leave_auto(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # a fleet restarts failed engines on threads of its own: two constructions at once must not save
    # each other's values (the second would take the first's "0" for an operator's choice, keep it, and
    # restore it for every later engine)
    _fresh_temp(tmp_path, monkeypatch)
    monkeypatch.delenv("VLLM_CPU_OMP_THREADS_BIND", raising=False)
    seen: dict[int, str] = {}
    first_inside, release = threading.Event(), threading.Event()

    def construct(cores: list[int], hold: bool) -> None:
        with engine_environment(cores) as folder:
            seen[cores[0]] = os.environ["VLLM_CPU_OMP_THREADS_BIND"]
            if hold:
                first_inside.set()
                release.wait(10)
        remove_private_folder(folder)

    a = threading.Thread(target=construct, args=([0], True))
    a.start()
    assert first_inside.wait(10)
    b = threading.Thread(target=construct, args=([1], False))
    b.start()
    b.join(0.5)
    assert b.is_alive(), "the second construction did not wait for the first"
    release.set()
    a.join(10)
    b.join(10)
    assert seen == {0: "0", 1: "1"}
    assert os.environ["VLLM_CPU_OMP_THREADS_BIND"] == "auto"


def test_restored_environ_puts_back_set_and_unset_names_even_after_an_error(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("REELRL_TEST_KEPT", "before")
    monkeypatch.delenv("REELRL_TEST_UNSET", raising=False)
    with (
        pytest.raises(RuntimeError, match="inside"),
        restored_environ(["REELRL_TEST_KEPT", "REELRL_TEST_UNSET"]),
    ):
        os.environ.update(REELRL_TEST_KEPT="changed", REELRL_TEST_UNSET="set", REELRL_TEST_OTHER="left")
        raise RuntimeError("inside")
    assert os.environ["REELRL_TEST_KEPT"] == "before" and "REELRL_TEST_UNSET" not in os.environ
    assert os.environ.pop("REELRL_TEST_OTHER") == "left"  # a name not asked for is not touched
