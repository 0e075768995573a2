"""Weight transport: checkpoint tensors, the RPC chosen per input, the temporary folder, and bucketed
pushes (checks before and during, then a real engine loading buckets)."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from safetensors.torch import load, load_file, save_file

from services.rollout.param_names import ParameterNames
from services.rollout.weight_sync import (
    HEADER_MARGIN,
    BucketLoad,
    ReloadCall,
    check_announced,
    check_bucket,
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


def test_a_folder_is_loaded_from_its_path(tmp_path):
    # not vLLM's reload_weights(weights_path=...): it points the engine's model config at the folder for
    # good, and an in-process engine core then read its processor from there (tests/rollout/test_in_process.py)
    save_file(checkpoint_tensors(tied_state_dict()), tmp_path / "model.safetensors")
    with reload_call(tmp_path) as (method, args, kwargs, tensors):
        assert (method, args, kwargs, tensors) == ("reelrl_reload_from_folder", (str(tmp_path),), {}, 3)


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
    with reload_call(tied_state_dict(), "file") as (method, args, _, _):
        folder = Path(args[0])
        assert method == "reelrl_reload_from_folder"
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
        ([None], None),  # a method that reports nothing (vLLM's own reload_weights)
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


def test_a_bucket_must_be_the_announced_names_and_shapes():
    announced = [("a", (2,)), ("b", (3,))]
    check_bucket({"a": torch.zeros(2), "b": torch.zeros(3)}, announced)
    with pytest.raises(ValueError, match=r"\('b', \(4,\)\) != \('b', \(3,\)\)"):
        check_bucket({"a": torch.zeros(2), "b": torch.zeros(4)}, announced)
    with pytest.raises(ValueError, match="does not match"):
        check_bucket({"b": torch.zeros(3)}, announced)


def test_announced_names_and_shapes_are_checked_before_anything_is_sent():
    expected = ParameterNames((frozenset({"a", "b"}),))
    shapes = {"a": (2,), "b": (3,)}
    check_announced([("a", (2,)), ("b", (3,))], expected, shapes)
    with pytest.raises(ValueError, match="1 missing"):
        check_announced([("a", (2,))], expected, shapes)
    with pytest.raises(ValueError, match="wrong shape"):
        check_announced([("a", (2,)), ("b", (5,))], expected, shapes)


class RecordingWorkers:
    """``collective_rpc`` of two workers that record what they are asked (the pure part of a bucketed
    push: the real engine's is tested below)."""

    def __init__(self, missing: list[str] = ()) -> None:
        self.calls: list[tuple[str, int]] = []
        self.missing = list(missing)

    def __call__(self, method: str, args: tuple = ()) -> list:
        if method == "reelrl_load_bucket":
            tensors = len(load(args[0]))
            self.calls.append((method, tensors))
            return [tensors, tensors]
        self.calls.append((method, 0))
        return [self.missing, self.missing] if method == "reelrl_end_buckets" else [None, None]


def load_all(workers: RecordingWorkers, announced: list, buckets: list) -> int:
    """A bucketed push as the engine runs it (``RolloutEngine.push_weight_buckets``)."""
    load = BucketLoad(workers, announced)
    load.begin()
    try:
        for bucket in buckets:
            load.load(bucket)
    except BaseException:
        load.abort()
        raise
    return load.end()


def test_buckets_load_one_rpc_each_between_begin_and_end():
    workers = RecordingWorkers()
    bucket_list = [{"a": torch.zeros(2)}, {"b": torch.zeros(3), "c": torch.zeros(1)}]
    assert load_all(workers, [("a", (2,)), ("b", (3,)), ("c", (1,))], bucket_list) == 2
    assert workers.calls == [
        ("reelrl_begin_buckets", 0),
        ("reelrl_load_bucket", 1),
        ("reelrl_load_bucket", 2),
        ("reelrl_end_buckets", 0),
    ]


def test_a_short_or_incomplete_push_fails_by_name():
    with pytest.raises(RuntimeError, match="1 of the 2 announced"):
        load_all(RecordingWorkers(), [("a", (2,)), ("b", (3,))], [{"a": torch.zeros(2)}])
    with pytest.raises(RuntimeError, match="not loaded by any bucket"):
        load_all(RecordingWorkers(["x.qkv_proj.weight"]), [("a", (2,))], [{"a": torch.zeros(2)}])
    # a bucket that is not the announced one still ends the reload (the engine stays usable)
    workers = RecordingWorkers()
    with pytest.raises(ValueError, match="does not match"):
        load_all(workers, [("a", (2,))], [{"z": torch.zeros(2)}])
    assert workers.calls[-1] == ("reelrl_end_buckets", 0)


def test_a_bucket_outside_a_push_is_refused_and_a_push_ends_once():
    load = BucketLoad(RecordingWorkers(), [("a", (2,))])
    with pytest.raises(RuntimeError, match="outside a bucketed push"):
        load.load({"a": torch.zeros(2)})
    load.begin()
    load.load({"a": torch.zeros(2)})
    assert load.end() == 1
    with pytest.raises(RuntimeError, match="no bucketed push is open"):
        load.end()
    load.abort()  # after the end: nothing left to finish, no RPC
    assert load.rpc.calls[-1] == ("reelrl_end_buckets", 0) and len(load.rpc.calls) == 3


@pytest.mark.integration
@pytest.mark.slow
@pytest.mark.parametrize("family", ["qwen2_5_vl", "qwen3_vl"])
def test_bucketed_push_into_a_running_engine_matches_the_new_weights(
    rollout_engine, video_sample, tiny_models, hf_model, hf_logprobs, family
):
    """Buckets of ~16 KiB split layers (q, k and v of one attention) across RPCs; the engine's logprobs
    are still the new weights' afterwards, and a push of wrong shapes is refused before it starts."""
    from services.trainer.weight_buckets import buckets, manifest
    from tests.rollout.test_weight_push import gap, perturbed

    engine = rollout_engine(family)
    old = hf_model(tiny_models[family])
    new = perturbed(old, seed=2)
    sample = video_sample(family, "tall_in_time", f"bucket-push-{family}")
    announced = [(e.name, e.shape) for e in manifest(new.state_dict(), torch.float32)]
    start = engine.weight_version
    wrong = [(n, (s[0] + 1, *s[1:]) if i == 0 else s) for i, (n, s) in enumerate(announced)]
    with pytest.raises(ValueError, match="wrong shape"):
        engine.push_weight_buckets(wrong, buckets(new, torch.float32, bucket_mb=1 / 64))
    assert engine.weight_version == start  # refused before anything was sent
    try:
        engine.push_weight_buckets(announced, buckets(new, torch.float32, bucket_mb=1 / 64))
        assert engine.weight_version == start + 1
        for response in engine.rollout([sample])[0].responses:
            assert gap(hf_logprobs(engine, new, sample, response.token_ids), response.logprobs) < 1e-5
            assert gap(hf_logprobs(engine, old, sample, response.token_ids), response.logprobs) > 1e-3
            assert response.weight_versions == ((0, start + 1),)
    finally:
        engine.push_weight_buckets(announced, buckets(old, torch.float32, bucket_mb=1.0))
    for response in engine.rollout([sample], n=1)[0].responses:
        assert gap(hf_logprobs(engine, old, sample, response.token_ids), response.logprobs) < 1e-5


@pytest.mark.integration
@pytest.mark.slow
def test_a_push_without_the_tied_head_moves_the_head_too(
    engine_registry, clips, tmp_path_factory, video_sample, hf_logprobs
):
    """A checkpoint whose LM head is tied to its embeddings: the trainer's stream leaves the head out,
    yet the engine's logits follow the new weights, by buckets and by a state-dict file alike. The
    engine reported the head as never loaded when it named its parameters after the reload had split
    the tie, and on the CPU backend kept multiplying by a packed copy of the old head."""
    from transformers import AutoModelForImageTextToText

    from services.common.tiny_models import build_tiny_model
    from services.rollout.engine import RolloutEngine
    from services.trainer.weight_buckets import weight_buckets
    from tests.rollout.conftest import small_config
    from tests.rollout.test_weight_push import gap, perturbed

    path = build_tiny_model("qwen2_5_vl", tmp_path_factory.mktemp("tied") / "model", tied=True)
    engine = engine_registry.get(
        "llm-qwen2_5_vl-tied", lambda: RolloutEngine(path, small_config(), source=clips.store)
    )
    old = AutoModelForImageTextToText.from_pretrained(path, dtype=torch.float32).eval()
    new = perturbed(old, seed=3)
    assert new.lm_head.weight is new.get_input_embeddings().weight  # the copy stays tied
    sample = video_sample("qwen2_5_vl", "tall_in_time", "tied-head-push")

    def gaps(pushed, other) -> None:
        for response in engine.rollout([sample], n=2)[0].responses:
            assert gap(hf_logprobs(engine, pushed, sample, response.token_ids), response.logprobs) < 1e-5
            assert gap(hf_logprobs(engine, other, sample, response.token_ids), response.logprobs) > 1e-3

    push = weight_buckets(new, torch.float32, bucket_mb=1 / 64)  # the embeddings in a bucket of their own
    assert "lm_head.weight" not in dict(push.announced)
    engine.push_weight_buckets(push.announced, push.open())
    gaps(new, old)
    engine.push_weights({k: v for k, v in old.state_dict().items() if k != "lm_head.weight"})
    gaps(old, new)
