"""The weight-broadcast group's pure layout, and a real gloo group of three members (threads of this
process, each its own rank): every bucket arrives whole, a sender that cannot make a bucket tells the
receivers at once, a receiver out of step refuses, and a member that leaves breaks the group for the
others within its timeout (no hang)."""

from __future__ import annotations

import socket
import time
from concurrent.futures import ThreadPoolExecutor

import pytest
import torch

from services.rollout import weight_group as wg


def test_layout_aligns_every_tensor_hand_computed() -> None:
    slots = [("a", (3,), "bfloat16"), ("b", (2, 2), "float32"), ("c", (), "int64"), ("d", (64,), "uint8")]
    # a: 6 bytes at 0; b: 16 bytes at 64; c: 8 bytes at 128; d: 64 bytes at 192
    assert wg.layout(slots) == ([0, 64, 128, 192], 256)
    assert wg.layout([]) == ([], 0)


def test_pack_then_unpack_gives_the_tensors_back_as_views() -> None:
    bucket = {
        "w": torch.randn(3, 5).to(torch.bfloat16),
        "b": torch.arange(7, dtype=torch.float32),
        "n": torch.tensor(11, dtype=torch.int64),
    }
    slots = wg.slots_of(bucket)
    assert slots == [("w", (3, 5), "bfloat16"), ("b", (7,), "float32"), ("n", (), "int64")]
    flat = wg.pack(bucket, slots, "cpu")
    assert flat.dtype == torch.uint8 and flat.numel() == wg.layout(slots)[1]
    back = wg.unpack(flat, slots)
    assert list(back) == list(bucket)
    for name, tensor in bucket.items():
        assert back[name].dtype == tensor.dtype and torch.equal(back[name], tensor)
    assert back["b"].untyped_storage().data_ptr() == flat.untyped_storage().data_ptr()  # no copy


def test_pack_refuses_a_bucket_unlike_the_plan() -> None:
    bucket = {"w": torch.zeros(2, 2)}
    with pytest.raises(ValueError, match="not the planned"):
        wg.pack(bucket, [("w", (4,), "float32")], "cpu")
    with pytest.raises(ValueError, match="not the planned"):
        wg.pack(bucket, [("v", (2, 2), "float32")], "cpu")
    with pytest.raises(ValueError, match="bytes where the plan has"):
        wg.unpack(torch.zeros(3, dtype=torch.uint8), [("w", (2, 2), "float32")])


def free_address() -> str:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return f"127.0.0.1:{sock.getsockname()[1]}"


def group(world: int, timeout_s: float = 20.0) -> list[wg.Member]:
    address = free_address()
    with ThreadPoolExecutor(world) as pool:
        return list(pool.map(lambda rank: wg.join(address, rank, world, timeout_s, "gloo"), range(world)))


def test_every_bucket_reaches_every_receiver_and_an_abort_fails_them_at_once() -> None:
    members = group(3)
    buckets = [{"x": torch.randn(4, 3), "y": torch.arange(5, dtype=torch.int64)}, {"z": torch.randn(1000)}]
    with ThreadPoolExecutor(3) as pool:
        for index, bucket in enumerate(buckets):
            slots = wg.slots_of(bucket)
            got = [pool.submit(wg.receive, m, index, slots, "cpu") for m in members[1:]]
            sent = wg.send_bucket(members[0], index, lambda b=bucket: b, slots, "cpu")
            assert sent == wg.layout(slots)[1]
            for future in got:
                received = future.result(30)
                assert all(torch.equal(received[k], v) for k, v in bucket.items())

        # rank 0 fails making bucket 2: the receivers learn it from the header, long before the timeout
        def broken() -> dict:
            raise OSError("rank 1 went away")

        slots = wg.slots_of(buckets[1])
        started = time.monotonic()
        got = [pool.submit(wg.receive, m, 2, slots, "cpu") for m in members[1:]]
        with pytest.raises(OSError, match="went away"):
            wg.send_bucket(members[0], 2, broken, slots, "cpu")
        for future in got:
            with pytest.raises(wg.SenderFailed, match="bucket 2"):
                future.result(30)
        assert time.monotonic() - started < 10


def test_receivers_out_of_step_refuse_and_leave_so_the_sender_fails_at_once() -> None:
    members = group(3, timeout_s=20.0)
    bucket = {"z": torch.randn(1000)}
    slots = wg.slots_of(bucket)
    with ThreadPoolExecutor(3) as pool:
        started = time.monotonic()
        got = [pool.submit(wg.receive, m, 4, slots, "cpu") for m in members[1:]]
        sending = pool.submit(wg.send_bucket, members[0], 3, lambda: bucket, slots, "cpu")
        for future in got:
            with pytest.raises(wg.WeightGroupError, match="out of step"):
                future.result(30)
        with pytest.raises(wg.WeightGroupError, match="rank 0 of 3"):
            sending.result(30)  # the payload nobody takes: the receivers left, their connections closed
        assert time.monotonic() - started < 10, "the sender waited for the group's timeout"
    assert not any(m.open for m in members)
    with pytest.raises(wg.WeightGroupError, match="left it"):
        members[0].broadcast(torch.zeros(1))


def test_a_member_that_leaves_breaks_the_broadcast_for_every_other_member_at_once() -> None:
    members = group(3, timeout_s=20.0)
    bucket = {"x": torch.randn(256, 256)}
    slots = wg.slots_of(bucket)
    members[2].close()  # rank 2 leaves: its connections close
    with ThreadPoolExecutor(2) as pool:
        started = time.monotonic()
        got = pool.submit(wg.receive, members[1], 0, slots, "cpu")
        with pytest.raises(wg.WeightGroupError):
            wg.send_bucket(members[0], 0, lambda: bucket, slots, "cpu")
        # rank 0 left the broken group in turn: rank 1 does not wait for the 20 s timeout either
        with pytest.raises(wg.WeightGroupError):
            got.result(30)
        assert time.monotonic() - started < 10, "a member waited for the group's timeout"


def test_any_dtype_torch_has_travels() -> None:
    bucket = {"f8": torch.randn(5).to(torch.float8_e4m3fn), "c64": torch.randn(3, dtype=torch.complex64)}
    slots = wg.slots_of(bucket)
    back = wg.unpack(wg.pack(bucket, slots, "cpu"), slots)
    assert back["f8"].dtype == torch.float8_e4m3fn and torch.equal(
        back["f8"].view(torch.uint8), bucket["f8"].view(torch.uint8)
    )
    assert torch.equal(back["c64"], bucket["c64"])
    with pytest.raises(ValueError, match="not a torch dtype"):
        wg.to_dtype("Tensor")


def test_a_member_that_never_comes_fails_the_join_as_the_group_s_failure() -> None:
    address = free_address()
    with ThreadPoolExecutor(2) as pool:  # ranks 0 and 1 of 3; rank 2 never joins
        joins = [pool.submit(wg.join, address, rank, 3, 2.0, "gloo") for rank in range(2)]
        for future in joins:
            with pytest.raises(wg.WeightGroupError, match=r"at 127\.0\.0\.1"):
                future.result(60)


def test_an_unknown_backend_is_refused() -> None:
    with pytest.raises(ValueError, match="unknown weight group backend"):
        wg.join(free_address(), 0, 1, 5.0, "mpi")
