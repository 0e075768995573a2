"""Weight transport: checkpoint tensors, the RPC chosen per input, the temporary folder."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from safetensors.torch import load, load_file

from services.rollout.weight_sync import checkpoint_tensors, reload_call, safetensors_bytes


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
    with reload_call("/models/step-3") as (method, args, kwargs):
        assert (method, args, kwargs) == ("reload_weights", (), {"weights_path": "/models/step-3"})


def test_bytes_travel_inside_the_rpc():
    data = safetensors_bytes(tied_state_dict())
    with reload_call(data) as (method, args, kwargs):
        assert method == "reelrl_reload_from_bytes" and args == (data,) and kwargs == {}


def test_a_state_dict_by_bytes_transport():
    with reload_call(tied_state_dict(), "bytes") as (method, args, _):
        assert method == "reelrl_reload_from_bytes"
        assert set(load(args[0])) == {"embed.weight", "lm_head.weight", "norm.weight"}


def test_a_state_dict_by_file_lives_in_a_folder_removed_afterwards():
    with reload_call(tied_state_dict(), "file") as (method, _, kwargs):
        folder = Path(kwargs["weights_path"])
        assert method == "reload_weights"
        assert folder.parent == Path("/dev/shm") or not Path("/dev/shm").is_dir()
        assert set(load_file(folder / "model.safetensors")) == {
            "embed.weight",
            "lm_head.weight",
            "norm.weight",
        }
    assert not folder.exists()


def test_unknown_transports_are_rejected():
    with pytest.raises(ValueError, match="unknown weight transport 'nccl'"), reload_call({}, "nccl"):
        pass
