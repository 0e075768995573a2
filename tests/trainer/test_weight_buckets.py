"""Bucketed weights: packing against hand-computed cases, the peak bound, the FSDP2 walk (DTensor
parameters gathered per tensor) against the plain state dict, and a tied LM head left out (tiny, and
Qwen2.5-VL-3B at its real size through the manifest, the plan and the engine's name check)."""

from __future__ import annotations

import json
import struct
from pathlib import Path

import pytest
import torch
from transformers import AutoModelForImageTextToText

from services.common.tiny_models import build_tiny_model
from services.common.tiny_models.architectures import TokenIds
from services.common.tiny_models.builder import checkpoint_config
from services.trainer.lora import push_state
from services.trainer.weight_buckets import Entry, MiB, buckets, manifest, pack, plan, push_dtype


@pytest.mark.parametrize(
    ("sizes", "limit", "expected"),
    [
        ([3, 3, 3], 6, [[0, 1], [2]]),  # 3+3 fits exactly, the third starts a bucket
        ([3, 4, 1], 6, [[0], [1, 2]]),  # 3+4 > 6
        ([10, 1, 1], 4, [[0], [1, 2]]),  # a tensor over the limit travels alone
        ([1, 10, 1], 4, [[0], [1], [2]]),
        ([0, 0, 5], 5, [[0, 1, 2]]),
        ([], 5, []),
    ],
)
def test_pack_keeps_order_and_the_limit(sizes, limit, expected):
    assert pack(sizes, limit) == expected


def test_no_bucket_exceeds_the_limit_or_its_largest_tensor():
    generator = torch.Generator().manual_seed(0)
    sizes = torch.randint(0, 1000, (500,), generator=generator).tolist()
    for limit in (1, 50, 999, 5000):
        groups = pack(sizes, limit)
        assert [i for g in groups for i in g] == list(range(len(sizes)))  # every tensor once, in order
        for group in groups:
            assert sum(sizes[i] for i in group) <= max(limit, max(sizes[i] for i in group))


def test_pack_refuses_a_non_positive_limit():
    with pytest.raises(ValueError, match="positive"):
        pack([1], 0)


def test_entry_bytes_follow_the_push_dtype():
    assert Entry("w", (3, 4), torch.bfloat16).nbytes == 24
    assert Entry("w", (3, 4), torch.float32).nbytes == 48
    assert plan([Entry("a", (MiB // 4,), torch.float32)] * 3, bucket_mb=2.0) == [
        [Entry("a", (MiB // 4,), torch.float32)] * 2,
        [Entry("a", (MiB // 4,), torch.float32)],
    ]


def test_push_dtype():
    assert push_dtype("bfloat16", torch.float32) is torch.bfloat16
    assert push_dtype("auto", torch.float16) is torch.float16
    with pytest.raises(ValueError, match="unknown engine dtype"):
        push_dtype("int8", torch.float32)


class Tied(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.embed = torch.nn.Embedding(10, 4)
        self.body = torch.nn.Linear(4, 4)
        self.head = torch.nn.Linear(4, 10, bias=False)
        self.head.weight = self.embed.weight


def test_buckets_are_the_state_dict_cast_and_split():
    model = Tied()
    got = list(buckets(model, torch.bfloat16, bucket_mb=100 / MiB))  # 100 bytes: 80-byte tensors alone
    state = model.state_dict()
    assert [list(b) for b in got] == [["embed.weight"], ["body.weight", "body.bias"], ["head.weight"]]
    for bucket in got:
        for name, value in bucket.items():
            assert value.dtype is torch.bfloat16 and value.is_contiguous()
            torch.testing.assert_close(value, state[name].to(torch.bfloat16))
    assert manifest(model.state_dict(), torch.bfloat16)[0] == Entry("embed.weight", (10, 4), torch.bfloat16)


def test_tied_tensors_in_one_bucket_do_not_share_storage():
    model = Tied()
    (bucket,) = list(buckets(model, torch.float32, bucket_mb=1.0))
    assert bucket["embed.weight"].data_ptr() != bucket["head.weight"].data_ptr()
    torch.testing.assert_close(bucket["embed.weight"], bucket["head.weight"])


def test_packed_buckets_are_the_buckets_bytes_laid_out_for_the_weight_group():
    from services.rollout import weight_group
    from services.trainer.weight_buckets import bucket_slots, packed_buckets

    model = Tied()
    limit = 100 / MiB
    slots = bucket_slots(manifest(model.state_dict(), torch.bfloat16), limit)
    packed = list(packed_buckets(model, torch.bfloat16, limit, "cpu", keep=True))
    assert len(packed) == len(slots) == 3
    for flat, bucket, bucket_slots_ in zip(packed, buckets(model, torch.bfloat16, limit), slots, strict=True):
        assert flat.numel() == weight_group.layout(bucket_slots_)[1]
        unpacked = weight_group.unpack(flat, bucket_slots_)
        assert list(unpacked) == list(bucket) and all(torch.equal(unpacked[k], bucket[k]) for k in bucket)
    # a rank that does not send walks the same tensors and keeps nothing
    assert list(packed_buckets(model, torch.bfloat16, limit, "cpu", keep=False)) == [None] * 3


def test_packed_buckets_hold_one_buffer_when_the_sender_drops_each_sent_one(monkeypatch):
    """The next buffer is made only after the last one is gone (a sender holds one bucket, not two)."""
    import weakref

    from services.rollout import weight_group
    from services.trainer.weight_buckets import packed_buckets

    made: list[weakref.ref] = []
    alive_at_allocation: list[bool] = []
    real = weight_group.empty_bucket

    def recording(slots, device):
        alive_at_allocation.append(any(ref() is not None for ref in made))
        flat, offsets = real(slots, device)
        made.append(weakref.ref(flat))
        return flat, offsets

    monkeypatch.setattr(weight_group, "empty_bucket", recording)
    for flat in packed_buckets(Tied(), torch.bfloat16, 100 / MiB, "cpu", keep=True):
        del flat  # sent
    assert alive_at_allocation == [False, False, False]


def tracking_gather():
    """A stand-in for ``full()`` that returns a fresh copy, as gathering a DTensor does, and notes at each
    gather which earlier copies are still alive."""
    import weakref

    made: list[weakref.ref] = []
    alive_at_gather: list[list[int]] = []

    def gather(tensor: torch.Tensor) -> torch.Tensor:
        alive_at_gather.append([i for i, ref in enumerate(made) if ref() is not None])
        fresh = tensor.detach().clone()
        made.append(weakref.ref(fresh))
        return fresh

    return gather, alive_at_gather


def test_a_bucket_stream_holds_no_gathered_tensor_while_gathering_the_next():
    """Cast to bf16 as it is bucketed, each gathered fp32 tensor is gone before the next is gathered: the
    extra memory is the bucket and one gathered tensor, not two."""
    from services.trainer.weight_buckets import group_stream

    state = {name: torch.ones(8, 8) for name in "abcd"}
    gather, alive_at_gather = tracking_gather()
    stream = ((name, gather(t)) for name, t in state.items())
    out = list(group_stream(stream, manifest(state, torch.bfloat16), bucket_mb=256 / MiB))  # 2 a bucket
    assert [list(bucket) for bucket in out] == [["a", "b"], ["c", "d"]]
    assert alive_at_gather == [[], [], [], []]


def test_packed_buckets_hold_no_gathered_tensor_while_gathering_the_next(monkeypatch):
    from services.trainer import weight_buckets

    gather, alive_at_gather = tracking_gather()
    monkeypatch.setattr(weight_buckets, "full", gather)
    drained = list(weight_buckets.packed_buckets(Tied(), torch.bfloat16, 100 / MiB, "cpu", keep=True))
    assert len(drained) == 3
    assert alive_at_gather == [[]] * len(Tied().state_dict())


def test_fsdp2_parameters_are_gathered_per_tensor(tmp_path):
    """One gloo rank holding FSDP2-sharded (DTensor) parameters: the buckets are the full tensors."""
    import torch.distributed as dist
    from torch.distributed.fsdp import fully_shard
    from torch.distributed.tensor import DTensor

    store = dist.FileStore(str(tmp_path / "store"), 1)
    dist.init_process_group("gloo", store=store, rank=0, world_size=1)
    try:
        reference = torch.nn.Sequential(torch.nn.Linear(6, 5), torch.nn.Linear(5, 3))
        expected = {k: v.clone() for k, v in reference.state_dict().items()}
        model = fully_shard(reference)
        assert all(isinstance(t, DTensor) for t in model.state_dict().values())
        got = {k: v for b in buckets(model, torch.float32, bucket_mb=64 / MiB) for k, v in b.items()}
        assert list(got) == list(expected)
        for name, value in got.items():
            assert not isinstance(value, DTensor)
            torch.testing.assert_close(value, expected[name])
    finally:
        dist.destroy_process_group()


# -- a tied LM head (``tie_word_embeddings``: Qwen2.5-VL-3B, Qwen3-VL-2B/4B) ---------------------------


@pytest.fixture(scope="module", params=["qwen2_5_vl", "qwen3_vl"])
def tied_qwen(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A tiny checkpoint whose LM head is its embeddings' weight (``make-tiny-model --tied``)."""
    return build_tiny_model(request.param, tmp_path_factory.mktemp("tied") / "model", tied=True)


def gathers(monkeypatch: pytest.MonkeyPatch) -> list[torch.Tensor]:
    """Every tensor the stream gathers (``full``), in order, from now on."""
    from services.trainer import weight_buckets

    seen: list[torch.Tensor] = []
    real = weight_buckets.full

    def recording(tensor: torch.Tensor) -> torch.Tensor:
        seen.append(tensor)
        return real(tensor)

    monkeypatch.setattr(weight_buckets, "full", recording)
    return seen


def test_a_tied_head_is_neither_gathered_nor_sent(tied_qwen, monkeypatch):
    """The engine ties its head to the embeddings itself and the checkpoint holds none, so the stream
    carries the shared weight once, under the embeddings' name: one gather of the model's largest
    tensor, not two, and the engine's name check accepts the push as announced."""
    from services.rollout.checkpoint import Checkpoint
    from services.rollout.weight_sync import check_announced, checkpoint_shapes
    from services.trainer.weight_buckets import bucket_slots, packed_buckets, weight_buckets

    model = AutoModelForImageTextToText.from_pretrained(tied_qwen)
    embed = model.get_input_embeddings().weight
    assert model.lm_head.weight is embed
    push = weight_buckets(model, torch.bfloat16, bucket_mb=0.25)
    names = [name for name, _ in push.announced]
    assert names == [k for k in model.state_dict() if k != "lm_head.weight"]
    assert push.nbytes == 2 * sum(p.numel() for p in model.parameters())  # bf16, the tied weight once

    seen = gathers(monkeypatch)
    carried = [name for bucket in push.open() for name in bucket]
    assert carried == names and len(seen) == len(names)
    assert sum(t.data_ptr() == embed.data_ptr() for t in seen) == 1  # the tied weight, gathered once
    # the weight group's layout (what a sender plans from the actor's push_state) carries the same
    slots = bucket_slots(manifest(push_state(model), torch.bfloat16), 0.25)
    assert [name for bucket in slots for name, _, _ in bucket] == names
    assert len(list(packed_buckets(model, torch.bfloat16, 0.25, "cpu", keep=False))) == len(slots)

    checkpoint = Checkpoint.load(tied_qwen)
    check_announced(push.announced, checkpoint.parameter_names, checkpoint_shapes(checkpoint))


def test_a_head_loaded_untied_is_still_carried(tied_qwen):
    """Declared tied but holding a head of its own (as loading leaves one whose checkpoint held two
    different tensors): the engine then keeps the head apart too, so the push must carry it."""
    from services.trainer.weight_buckets import weight_buckets

    model = AutoModelForImageTextToText.from_pretrained(tied_qwen)
    model.lm_head.weight = torch.nn.Parameter(model.lm_head.weight.detach().clone())
    assert "lm_head.weight" in model.all_tied_weights_keys
    assert "lm_head.weight" in [name for name, _ in weight_buckets(model, None, 1.0).announced]


# Qwen's own ids for the special tokens (the real tokenizer's, checked in tests/common/test_tiny_models.py);
# names and shapes depend on none of them, and the size sets the vocabulary (151,936 rows)
REAL_IDS = TokenIds(
    vocab_size=151680, bos=151643, eos=151645, pad=151643, image=151655, video=151656,
    vision_start=151652, vision_end=151653,
)  # fmt: skip
QWEN2_5_VL_3B = 3_754_622_976  # parameters of Qwen2.5-VL-3B-Instruct, its tied weight counted once
SAFETENSORS_DTYPES = {torch.bfloat16: "BF16", torch.float32: "F32"}


def header_only_checkpoint(folder: Path, config, model) -> Path:
    """``config.json`` and a ``model.safetensors`` whose header lists what ``save_pretrained`` writes
    (``save_plan``: names, order, a tied head left out) over data that is a hole in a sparse file: the
    name check reads headers only, so a real-size checkpoint costs no memory and no disk."""
    from services.trainer.weight_files import SINGLE_FILE, save_plan

    config.save_pretrained(folder)
    state, header, position = model.state_dict(), {"__metadata__": {"format": "pt"}}, 0
    for key, saved in save_plan(model):
        tensor = state[key]
        size = tensor.numel() * tensor.element_size()
        header[saved] = {
            "dtype": SAFETENSORS_DTYPES[tensor.dtype],
            "shape": list(tensor.shape),
            "data_offsets": [position, position + size],
        }
        position += size
    encoded = json.dumps(header).encode()
    encoded += b" " * (-len(encoded) % 8)
    with open(folder / SINGLE_FILE, "wb") as fh:
        fh.write(struct.pack("<Q", len(encoded)) + encoded)
        fh.truncate(8 + len(encoded) + position)
    return folder


def test_qwen2_5_vl_3b_at_real_size_pushes_its_tied_weight_once(tmp_path):
    """``make-tiny-model --family qwen2_5_vl --size 3b``'s config (tied, as published), built on the meta
    device: the push's manifest leaves the head out (its bytes are the published count in bf16), the
    plan bounds every bucket, and the engine's name check accepts it against that checkpoint."""
    from safetensors import safe_open
    from transformers import AutoConfig

    from services.common.families import get_family
    from services.rollout.checkpoint import Checkpoint
    from services.rollout.weight_sync import check_announced, checkpoint_shapes
    from services.trainer.weight_buckets import checkpoint_dtype, weight_buckets

    config = checkpoint_config("qwen2_5_vl", REAL_IDS, "3b")
    assert config.tie_word_embeddings is True
    with torch.device("meta"):
        model = AutoModelForImageTextToText.from_config(config, dtype=torch.bfloat16)
    embed = model.get_input_embeddings().weight
    assert model.lm_head.weight is embed and sum(p.numel() for p in model.parameters()) == QWEN2_5_VL_3B
    folder = header_only_checkpoint(tmp_path / "qwen2_5_vl_3b", config, model)
    with safe_open(str(folder / "model.safetensors"), framework="pt") as handle:
        assert "lm_head.weight" not in handle.keys()  # noqa: SIM118 (a safetensors handle)

    dtype = push_dtype("auto", checkpoint_dtype(config))  # the engine's "auto": bf16, as the config says
    push = weight_buckets(model, dtype, bucket_mb=512)  # the GPU script's bucket size
    assert dtype is torch.bfloat16
    assert "lm_head.weight" not in dict(push.announced)
    # 2 bytes a parameter; carrying the head too would add 151,936 × 2,048 × 2 B = 0.58 GiB
    assert push.nbytes == 2 * QWEN2_5_VL_3B
    entries = manifest(push_state(model), dtype)
    groups = plan(entries, 512)
    assert [e for group in groups for e in group] == entries
    largest = max(e.nbytes for e in entries)
    assert largest == embed.numel() * 2 == 151936 * 2048 * 2  # the shared weight: 0.58 GiB > 512 MiB
    (alone,) = [group for group in groups if any(e.nbytes == largest for e in group)]
    assert len(alone) == 1  # so it travels in a bucket of its own
    assert all(sum(e.nbytes for e in group) <= max(512 * MiB, largest) for group in groups)

    # the check RolloutEngine.begin_weight_buckets runs against the checkpoint it serves
    checkpoint = Checkpoint(
        path=str(folder), family=get_family("qwen2_5_vl"), processor=None, video_token_id=REAL_IDS.video,
        image_token_id=REAL_IDS.image, end_token_id=REAL_IDS.eos, hf_config=AutoConfig.from_pretrained(folder),
    )  # fmt: skip
    assert len(checkpoint.parameter_names.layouts) == 2  # its state dict's names and its file's
    check_announced(push.announced, checkpoint.parameter_names, checkpoint_shapes(checkpoint))
