"""How weights travel to disaggregated engines: Ray object-store references that every engine pulls (what
``BucketRefs`` does) against a broadcast group from rank 0 to every engine (gloo here; NCCL on GPUs),
bucket by bucket, side by side in one run on a local two-node Ray cluster.

    $VENV/bin/python -m bench.bench_weight_transport [--payload-mb 1024] [--bucket-mb 128] [--repeats 3]

The transport alone: a sender actor (rank 0's part) on the head node and ``E`` receiver actors (the
engines' part) on the second node, each node with an object store of its own, so every bucket crosses
between nodes as it would between hosts (here over loopback). Each bucket reaches every receiver before
the next is sent, as a push does:

- object store: the sender puts the bucket (``ray.put``) and returns its reference; each receiver is
  handed the reference and resolves it (Ray pulls the bytes into its node's store; the receiver reads
  them there without a copy);
- broadcast: sender and receivers form one gloo process group (``torch.distributed``, TCP); the sender
  broadcasts the bucket's bytes into a buffer each receiver holds.

Either way the bucket then sits in the receiver's memory; loading it into the engine is the same after
both and is left out. Keys (seconds per push of ``--payload-mb``, medians; E = receivers):

  weight_transport_s_object_store_1e / _2e   object-store references, 1 and 2 engines
  weight_transport_s_broadcast_1e / _2e      gloo broadcast group, 1 and 2 engines
"""

from __future__ import annotations

import argparse
import os
import socket
import statistics
import time
from typing import Any

from bench.results import LoadWatch, add_load_argument, record

MiB = 1 << 20


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Sender:
    """Rank 0's part: makes each bucket's bytes once, then sends bucket ``i`` either way."""

    def __init__(self, bucket_bytes: int) -> None:
        import torch

        self.bucket = torch.randint(0, 255, (bucket_bytes,), dtype=torch.uint8)

    def put(self, i: int) -> list[Any]:
        import ray

        self.bucket[0] = i % 251  # each bucket is a new object, as each of a push's buckets is
        return [ray.put(self.bucket)]  # a reference inside a list: the caller gets it unresolved

    def join(self, address: str, world: int) -> None:
        import torch.distributed as dist

        dist.init_process_group("gloo", init_method=address, rank=0, world_size=world)

    def broadcast(self, i: int) -> None:
        import torch.distributed as dist

        self.bucket[0] = i % 251
        dist.broadcast(self.bucket, src=0)

    def leave(self) -> None:
        import torch.distributed as dist

        dist.destroy_process_group()


class Receiver:
    """An engine's part: takes bucket ``i`` either way and checks it is that bucket."""

    def __init__(self, bucket_bytes: int) -> None:
        import torch

        self.buffer = torch.empty(bucket_bytes, dtype=torch.uint8)

    def take(self, bucket: Any, i: int) -> int:
        if int(bucket[0]) != i % 251:
            raise AssertionError(f"bucket {i} arrived as {int(bucket[0])}")
        return int(bucket.numel())

    def join(self, address: str, rank: int, world: int) -> None:
        import torch.distributed as dist

        dist.init_process_group("gloo", init_method=address, rank=rank, world_size=world)

    def receive(self, i: int) -> int:
        import torch.distributed as dist

        dist.broadcast(self.buffer, src=0)
        return self.take(self.buffer, i)

    def leave(self) -> None:
        import torch.distributed as dist

        dist.destroy_process_group()


def push_by_reference(sender: Any, receivers: list[Any], buckets: int) -> float:
    import ray

    started = time.perf_counter()
    for i in range(buckets):
        (ref,) = ray.get(sender.put.remote(i))
        ray.get([r.take.remote(ref, i) for r in receivers])
        del ref  # the bucket leaves the object store once every receiver has it
    return time.perf_counter() - started


def push_by_broadcast(sender: Any, receivers: list[Any], buckets: int) -> float:
    import ray

    started = time.perf_counter()
    for i in range(buckets):
        ray.get([sender.broadcast.remote(i), *[r.receive.remote(i) for r in receivers]])
    return time.perf_counter() - started


def measure(engines: int, args: argparse.Namespace, nodes: dict[str, str]) -> dict[str, float]:
    import ray
    from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

    bucket_bytes = int(args.bucket_mb * MiB)
    buckets = max(1, int(args.payload_mb // args.bucket_mb))

    def on(node: str) -> dict[str, Any]:
        return {"num_cpus": 0, "scheduling_strategy": NodeAffinitySchedulingStrategy(nodes[node], soft=False)}

    sender = ray.remote(Sender).options(**on("head")).remote(bucket_bytes)
    receivers = [ray.remote(Receiver).options(**on("other")).remote(bucket_bytes) for _ in range(engines)]
    address = f"tcp://127.0.0.1:{free_port()}"
    ray.get([sender.join.remote(address, engines + 1)] + [
        r.join.remote(address, rank, engines + 1) for rank, r in enumerate(receivers, start=1)
    ])  # fmt: skip
    try:
        push_by_reference(sender, receivers, 1)  # warm-up: connections, first allocations
        push_by_broadcast(sender, receivers, 1)
        by_ref, by_broadcast = [], []
        for _ in range(args.repeats):
            by_ref.append(push_by_reference(sender, receivers, buckets))
            by_broadcast.append(push_by_broadcast(sender, receivers, buckets))
    finally:
        ray.get([a.leave.remote() for a in (sender, *receivers)])
        for actor in (sender, *receivers):
            ray.kill(actor)
    print(f"{engines} engine(s), {buckets} buckets of {args.bucket_mb:g} MiB:", flush=True)
    print(f"  object store: {', '.join(f'{s:.2f}' for s in by_ref)} s", flush=True)
    print(f"  broadcast:    {', '.join(f'{s:.2f}' for s in by_broadcast)} s", flush=True)
    return {
        f"weight_transport_s_object_store_{engines}e": round(statistics.median(by_ref), 3),
        f"weight_transport_s_broadcast_{engines}e": round(statistics.median(by_broadcast), 3),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--payload-mb", type=float, default=1024)
    parser.add_argument("--bucket-mb", type=float, default=128)
    parser.add_argument("--repeats", type=int, default=3)
    add_load_argument(parser)
    args = parser.parse_args()
    watch = LoadWatch.begin("bench_weight_transport", args.allow_load)

    import ray
    from ray.cluster_utils import Cluster

    store = int(max(4 * args.bucket_mb * MiB, 512 * MiB))  # a few buckets in flight per node
    cluster = Cluster(
        initialize_head=True,
        head_node_args={"num_cpus": 1, "object_store_memory": store, "include_dashboard": False},
    )
    try:
        cluster.add_node(num_cpus=1, object_store_memory=store)
        cluster.wait_for_nodes()
        ray.init(address=cluster.address, log_to_driver=False)
        head = ray.get_runtime_context().get_node_id()
        other = next(n["NodeID"] for n in ray.nodes() if n["Alive"] and n["NodeID"] != head)
        nodes = {"head": head, "other": other}
        figures = {**measure(1, args, nodes), **measure(2, args, nodes)}
    finally:
        ray.shutdown()
        cluster.shutdown()
    payload = args.payload_mb / 1024
    for engines in (1, 2):
        ref, cast = (
            figures[f"weight_transport_s_object_store_{engines}e"],
            figures[f"weight_transport_s_broadcast_{engines}e"],
        )
        print(f"{engines} engine(s): {payload:g} GiB by reference {ref:.2f} s ({payload / ref:.2f} GiB/s), by "
              f"broadcast {cast:.2f} s ({payload / cast:.2f} GiB/s): reference ÷ broadcast {ref / cast:.2f}")  # fmt: skip
    print(f"(pid {os.getpid()}; a local two-node cluster: both nodes share this machine's cores and memory)")
    record(figures, watch)


if __name__ == "__main__":
    main()
