"""Sharded initialisation (services/trainer/sharded_load.py): two FSDP ranks that each read only their
slices of the checkpoint hold exactly the weights, buffers and outputs that ``from_pretrained`` gives
one process, for every family (and a tied LM head), both as the trained policy (fp32) and as the
frozen reference (bf16), and train with gradient checkpointing and a frozen vision tower; the
checkpoint they write tensor by tensor is the one ``save_pretrained`` writes; and on a checkpoint
past 1B parameters no rank's memory grows, while it sets up, past its share of the model plus the
largest tensor plus a fixed allowance (which today's load, every rank holding the whole model, fails)."""

from __future__ import annotations

import json
from datetime import timedelta
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch
import torch.distributed as dist
from safetensors import safe_open
from transformers import AutoConfig, AutoModelForImageTextToText, AutoProcessor

from bench.bench_sharded_load import GIB, checkpoint_size, measure_setup
from services.common.tiny_models import build_tiny_model
from services.trainer.actor import PolicyModel
from services.trainer.config import ActorConfig
from services.trainer.sharded_load import parameters_on_meta
from services.trainer.weight_files import SINGLE_FILE
from tests.trainer.actor_steps import spawn_ranks

#: a Qwen2.5-VL whose LM head is tied to its embeddings, and one whose config says so over files that
#: hold both tensors with different values (``from_pretrained`` leaves that one untied)
TIED = "qwen2_5_vl_tied"
TIE_CLAIMED = "qwen2_5_vl_tie_claimed"
#: every family, and the two ties
FAMILIES = ("qwen2_vl", "qwen2_5_vl", "qwen3_vl", "qwen3_5", TIED, TIE_CLAIMED)
#: (trainable, compute dtype): the trained policy (fp32 master, fp32 forwards: outputs compared
#: exactly) and the frozen reference (stored in its compute dtype, bf16)
KINDS = {"policy": (True, "float32"), "reference": (False, "bfloat16")}
#: the family that also trains with gradient checkpointing and a frozen vision tower
CHECKPOINTED = "qwen2_5_vl"
RANKS = 2
RANKS_TIMEOUT_S = 300.0


def actor_config(model: Path, compute: str) -> ActorConfig:
    return ActorConfig(model_path=str(model), compute_dtype=compute, param_dtype="float32")


def probe(model: Path) -> dict[str, torch.Tensor]:
    """Inputs that reach every part of the model: text, and one image through the vision tower (its
    rotary buffers included)."""
    processor = AutoProcessor.from_pretrained(model)
    image = np.random.default_rng(0).integers(0, 256, (56, 56, 3), dtype=np.uint8)
    text = "<|vision_start|><|image_pad|><|vision_end|>What is in the picture? A red square."
    return dict(processor(text=[text], images=[image], return_tensors="pt", return_mm_token_type_ids=True))


def logits(model: Any, inputs: dict[str, torch.Tensor]) -> torch.Tensor:
    with torch.no_grad():
        return model(**inputs, use_cache=False).logits.float()


def _rank(rank: int, models: dict[str, Path], out: Path) -> None:
    """A spawned rank: every family as the policy and the reference, each saved (tensor by tensor) and
    loaded back; rank 0 keeps what it gathered."""
    torch.set_num_threads(1)
    dist.init_process_group(
        "gloo",
        init_method=f"file://{out / 'store'}",
        rank=rank,
        world_size=RANKS,
        timeout=timedelta(seconds=120),
    )
    try:
        for family, path in models.items():
            for kind, (trainable, compute) in KINDS.items():
                policy = PolicyModel(actor_config(path, compute), trainable=trainable, device="cpu")
                found = {
                    "state": policy.full_state_dict(),
                    "buffers": {k: v.clone() for k, v in policy.model.named_buffers()},
                    "logits": logits(policy.model, probe(path)),
                    "dtypes": {p.dtype for p in policy.model.parameters()},
                    "trainable": {k for k, p in policy.model.named_parameters() if p.requires_grad},
                    "tied": policy.model.get_output_embeddings().weight
                    is policy.model.get_input_embeddings().weight,
                }
                saved = out / f"{family}-{kind}-saved"
                policy.save_pretrained(saved)
                del policy
                dist.barrier()  # rank 0 writes the folder after the last tensor's gather
                # a resume loads the saved master weights the same way
                resumed = PolicyModel(actor_config(saved, compute), trainable=trainable, device="cpu")
                found["resumed"] = resumed.full_state_dict()
                del resumed
                if rank == 0:
                    torch.save(found, out / f"{family}-{kind}.pt")
        # the trained policy's other settings, applied to the meta model before sharding
        path = models[CHECKPOINTED]
        config = actor_config(path, "float32").model_copy(
            update={"gradient_checkpointing": True, "freeze_vision": True}
        )
        policy = PolicyModel(config, trainable=True, device="cpu")
        policy.model(**probe(path), use_cache=False).logits.float().sum().backward()
        found = {
            "checkpointing": policy.model.is_gradient_checkpointing,
            "trainable": {k for k, p in policy.model.named_parameters() if p.requires_grad},
            "gradients": {k for k, p in policy.model.named_parameters() if p.grad is not None},
        }
        if rank == 0:
            torch.save(found, out / "checkpointed.pt")
    finally:
        dist.destroy_process_group()


def tie_claimed(model: Path, folder: Path) -> Path:
    """``model`` with a config that ties its LM head to the input embeddings, its files unchanged: both
    tensors present, with different values (``from_pretrained`` then leaves them untied)."""
    config = AutoConfig.from_pretrained(model)
    config.tie_word_embeddings = config.get_text_config().tie_word_embeddings = True
    AutoModelForImageTextToText.from_pretrained(model, config=config).save_pretrained(folder)
    AutoProcessor.from_pretrained(model).save_pretrained(folder)
    return folder


def tied_variant(model: Path, folder: Path) -> Path:
    """``model`` with its LM head tied to the input embeddings, as small Qwen-VL checkpoints are: the
    config says so and the files hold no head of their own."""
    loaded = AutoModelForImageTextToText.from_pretrained(model)
    loaded.config.tie_word_embeddings = loaded.config.get_text_config().tie_word_embeddings = True
    loaded.tie_weights(recompute_mapping=True)
    loaded.save_pretrained(folder)
    AutoProcessor.from_pretrained(model).save_pretrained(folder)
    return folder


@pytest.fixture(scope="module")
def models(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("families")
    made = {family: build_tiny_model(family, root / family) for family in FAMILIES[:4]}
    made[TIED] = tied_variant(made["qwen2_5_vl"], root / TIED)
    made[TIE_CLAIMED] = tie_claimed(made["qwen2_5_vl"], root / TIE_CLAIMED)
    return made


@pytest.fixture(scope="module")
def sharded(models: dict[str, Path], tmp_path_factory: pytest.TempPathFactory) -> Path:
    """What two ranks loaded and saved, per family and kind (``out/<family>-<kind>.pt``, ``…-saved``)."""
    out = tmp_path_factory.mktemp("ranks")
    spawn_ranks(_rank, (models, out), RANKS, RANKS_TIMEOUT_S)
    return out


def todays(path: Path, dtype: torch.dtype) -> Any:
    return AutoModelForImageTextToText.from_pretrained(path, dtype=dtype).eval()


@pytest.mark.slow
@pytest.mark.integration
@pytest.mark.parametrize("kind", sorted(KINDS))
@pytest.mark.parametrize("family", FAMILIES)
def test_two_ranks_load_exactly_todays_weights_buffers_and_outputs(
    models: dict[str, Path], sharded: Path, family: str, kind: str
) -> None:
    trainable, compute = KINDS[kind]
    dtype = torch.float32 if trainable else torch.bfloat16
    found = torch.load(sharded / f"{family}-{kind}.pt")
    model = todays(models[family], dtype)
    expected = model.state_dict()
    assert found["state"].keys() == expected.keys()
    different = [k for k, v in expected.items() if not torch.equal(found["state"][k], v)]
    assert not different, f"{len(different)} tensors differ, e.g. {different[:3]}"
    assert found["dtypes"] == {dtype}
    assert found["resumed"].keys() == expected.keys()
    assert all(torch.equal(found["resumed"][k], v) for k, v in expected.items())
    # the buffers, non-persistent ones included (rotary inv_freq: garbage after to_empty unless restored)
    buffers = dict(model.named_buffers())
    assert found["buffers"].keys() == buffers.keys() and buffers
    assert all(torch.equal(found["buffers"][k], v) for k, v in buffers.items())
    # and what they compute: the sharded forward (all-gathered in the compute dtype) against one process
    expected_logits = logits(model, probe(models[family]))
    tolerance = 1e-5 if compute == "float32" else 2e-2
    torch.testing.assert_close(found["logits"], expected_logits, rtol=0, atol=tolerance)
    assert found["tied"] == (family == TIED) == (model.lm_head.weight is model.get_input_embeddings().weight)
    if trainable:
        assert found["trainable"] == {k for k, _ in model.named_parameters()}
    else:
        assert found["trainable"] == set()


@pytest.mark.slow
@pytest.mark.integration
def test_gradient_checkpointing_and_a_frozen_vision_tower_survive_the_meta_build(sharded: Path) -> None:
    found = torch.load(sharded / "checkpointed.pt")
    assert found["checkpointing"]
    assert found["trainable"] and not any(k.startswith("model.visual.") for k in found["trainable"])
    assert found["gradients"] == found["trainable"]  # a backward through the checkpointed layers


def file_tensors(folder: Path) -> dict[str, torch.Tensor]:
    with safe_open(str(folder / SINGLE_FILE), framework="pt") as fh:
        return {k: fh.get_tensor(k) for k in fh.keys()}  # noqa: SIM118 - a safetensors handle


@pytest.mark.slow
@pytest.mark.integration
@pytest.mark.parametrize("kind", sorted(KINDS))
@pytest.mark.parametrize("family", FAMILIES)
def test_a_checkpoint_streamed_by_two_ranks_is_what_save_pretrained_writes(
    models: dict[str, Path], sharded: Path, family: str, kind: str, tmp_path: Path
) -> None:
    trainable, _ = KINDS[kind]
    dtype = torch.float32 if trainable else torch.bfloat16
    saved = sharded / f"{family}-{kind}-saved"
    # today's writer: transformers' save_pretrained of the same weights, and the processor beside them
    model = todays(models[family], dtype)
    model.save_pretrained(tmp_path)
    AutoProcessor.from_pretrained(models[family]).save_pretrained(tmp_path)
    assert sorted(p.name for p in saved.iterdir()) == sorted(p.name for p in tmp_path.iterdir())
    for name in ("config.json", "generation_config.json"):
        assert json.loads((saved / name).read_text()) == json.loads((tmp_path / name).read_text()), name
    streamed, written = file_tensors(saved), file_tensors(tmp_path)
    assert list(streamed) == list(written)  # the same names (the checkpoint's own), in the same order
    assert all(torch.equal(streamed[k], v) for k, v in written.items())
    # and it loads back into the same model
    again = todays(saved, dtype).state_dict()
    assert all(torch.equal(again[k], v) for k, v in model.state_dict().items())


@pytest.mark.integration
@pytest.mark.parametrize("family", ["qwen2_vl", "qwen3_5", TIED])
def test_one_rank_loads_directly_and_streams_its_checkpoint(
    models: dict[str, Path], family: str, tmp_path: Path
) -> None:
    policy = PolicyModel(actor_config(models[family], "float32"), trainable=True, device="cpu")
    assert not any(p.is_meta for p in policy.model.parameters())
    assert policy.save_pretrained(tmp_path / "saved") == tmp_path / "saved"
    source = file_tensors(models[family])
    streamed = file_tensors(tmp_path / "saved")
    assert streamed.keys() == source.keys()
    assert all(torch.equal(streamed[k], v) for k, v in source.items())


def test_parameters_on_meta_keeps_buffers_and_ties() -> None:
    class Tied(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.embed = torch.nn.Embedding(10, 4)
            self.head = torch.nn.Linear(4, 10, bias=False)
            self.head.weight = self.embed.weight
            self.register_buffer("inv_freq", torch.arange(3.0), persistent=False)

    with parameters_on_meta():
        module = Tied()
    assert module.embed.weight.is_meta and module.head.weight is module.embed.weight
    assert torch.equal(module.inv_freq, torch.arange(3.0))
    assert torch.nn.Linear(2, 2).weight.device.type == "cpu"  # put back on leaving


# -- memory at scale -----------------------------------------------------------------------------------

#: what a rank may grow by beside its share of the weights and one whole tensor: the processor and
#: tokenizer, the model's skeleton and buffers, allocator slack (measured: see docs/training.md)
ALLOWANCE_GIB = 0.5


@pytest.fixture(scope="session")
def billion(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A random-weight Qwen2-VL of 1.22B parameters (bf16 on disk, 2.4 GB; ~35 s to build)."""
    return build_tiny_model("qwen2_vl", tmp_path_factory.mktemp("billion") / "model", size="1b")


@pytest.mark.slow
@pytest.mark.integration
@pytest.mark.timeout(600)
def test_no_rank_holds_more_than_its_share_while_it_sets_up(billion: Path) -> None:
    size = checkpoint_size(billion)  # the policy's weights in fp32, as the ranks hold them
    assert size.parameters >= 1_000_000_000
    limit = size.model_bytes / RANKS + size.largest_bytes + ALLOWANCE_GIB * GIB
    ranks = measure_setup(billion, RANKS)
    report = ", ".join(f"rank {r.rank} +{r.growth / GIB:.2f} GiB (peak {r.peak / GIB:.2f})" for r in ranks)
    assert all(r.growth <= limit for r in ranks), f"{report}; limit +{limit / GIB:.2f} GiB"
