"""Weight transport: checkpoint tensors, the RPC chosen per input, the temporary folder."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from safetensors.torch import load, load_file

from services.rollout.weight_sync import (
    HEADER_MARGIN,
    ReloadCall,
    check_reload_results,
    checkpoint_tensors,
    reload_call,
    safetensors_bytes,
    weights_dir,
)


def tied_state_dict() -> dict[str, torch.Tensor]:
    embed = torch.arange(6, dtype=torch.float32).reshape(3, 2)
    return {"embed.weight": embed, "lm_head.weight": embed, "norm.weight": torch.ones(2).t()}


def test_tied_tensors_are_copied_so_safetensors_accepts_them():
    state = tied_state_dict()
    tensors = checkpoint_tensors(state)
    assert tensors["lm_head.weight"].data_ptr() != tensors["embed.weight"].data_ptr()
    assert torch.equal(tensors["lm_head.weight"], state["embed.weight"])
    restored = load(safetensors_bytes(state))
    assert set(restored) == set(state)
    assert all(torch.equal(restored[k], state[k]) for k in state)


def test_a_folder_is_loaded_from_its_path():
    with reload_call("/models/step-3") as (method, args, kwargs, _):
        assert (method, args, kwargs) == ("reload_weights", (), {"weights_path": "/models/step-3"})


def test_bytes_travel_inside_the_rpc():
    data = safetensors_bytes(tied_state_dict())
    with reload_call(data) as (method, args, kwargs, tensors):
        assert method == "reelrl_reload_from_bytes" and args == (data,) and kwargs == {}
        assert tensors == 3


def test_a_state_dict_by_bytes_transport():
    with reload_call(tied_state_dict(), "bytes") as (method, args, _, _):
        assert method == "reelrl_reload_from_bytes"
        assert set(load(args[0])) == {"embed.weight", "lm_head.weight", "norm.weight"}


def test_a_state_dict_by_file_lives_in_a_folder_removed_afterwards():
    with reload_call(tied_state_dict(), "file") as (method, _, kwargs, _):
        folder = Path(kwargs["weights_path"])
        assert method == "reload_weights"
        assert folder.parent == weights_dir(4 * (6 + 6 + 2))  # 14 float32 values
        assert set(load_file(folder / "model.safetensors")) == {
            "embed.weight",
            "lm_head.weight",
            "norm.weight",
        }
    assert not folder.exists()


def test_unknown_transports_are_rejected():
    with pytest.raises(ValueError, match="unknown weight transport 'nccl'"), reload_call({}, "nccl"):
        pass


GiB = 1 << 30


@pytest.mark.parametrize(
    ("env", "shm_exists", "shm_free", "size", "expected"),
    [
        ({}, True, 2 * GiB, GiB, "shm"),  # room for 1 GiB + header margin
        ({}, True, GiB, GiB, "tmp"),  # exactly the tensors' size: no room for the header margin
        ({}, True, GiB + HEADER_MARGIN, GiB, "shm"),  # just enough
        ({}, False, 2 * GiB, GiB, "tmp"),  # no /dev/shm at all
        ({"REELRL_WEIGHTS_DIR": "/scratch/w"}, True, 2 * GiB, GiB, "/scratch/w"),  # operator's choice
        ({"REELRL_WEIGHTS_DIR": ""}, True, 2 * GiB, GiB, "shm"),  # empty: unset
    ],
)
def test_weights_dir_prefers_shm_with_room(tmp_path, env, shm_exists, shm_free, size, expected):
    import tempfile

    shm = tmp_path / "shm"
    if shm_exists:
        shm.mkdir()
    chosen = weights_dir(size, environ=env, shm=shm, free=lambda path: shm_free)
    wanted = {"shm": shm, "tmp": Path(tempfile.gettempdir())}.get(expected, Path(expected))
    assert chosen == wanted


@pytest.mark.parametrize(
    ("results", "message"),
    [
        ([3, 3], None),  # every worker loaded the 3 tensors sent
        ([None], None),  # vLLM's reload_weights reports nothing
        ([3, 2], "worker 1 loaded 2 tensors of the 3 pushed"),
    ],
)
def test_worker_counts_must_match_what_was_sent(results, message):
    call = ReloadCall("reelrl_reload_from_bytes", (b"",), {}, tensors=3)
    if message is None:
        check_reload_results(call, results)
    else:
        with pytest.raises(RuntimeError, match=message):
            check_reload_results(call, results)
