"""Bucketed weights: packing against hand-computed cases, the peak bound, and the FSDP2 walk (DTensor
parameters gathered per tensor) against the plain state dict."""

from __future__ import annotations

import pytest
import torch

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
