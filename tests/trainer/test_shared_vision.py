"""The vision tower once per distinct clip of a micro-batch (services/trainer/shared_vision.py): the same
log-probs and the same gradients as encoding every sequence's clip, in every family, with images too,
and the tower sees only the distinct items."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest
import torch

from services.common.frames import FrameStore, VideoParams, clip_key, decode_clip
from services.common.frames.hashing import content_hash
from services.common.frames.synthetic import make_video
from services.common.tiny_models import build_tiny_model
from services.rollout.checkpoint import Checkpoint
from services.rollout.config import RolloutConfig
from services.rollout.samples import RolloutSample
from services.trainer.actor import PolicyModel
from services.trainer.batch import PromptInputs, TokenSequence, distinct_items
from services.trainer.config import ActorConfig
from services.trainer.sequences import prompt_inputs
from services.trainer.shared_vision import ItemPlan, shared_vision

pytestmark = pytest.mark.integration


def test_distinct_items_number_each_prompts_items_once() -> None:
    one = PromptInputs("a", [1], {"video_grid_thw": torch.tensor([[1, 2, 2]])})
    two = PromptInputs("b", [1], {"video_grid_thw": torch.tensor([[1, 2, 2], [2, 2, 2]])})
    text = PromptInputs("t", [1])
    distinct, source = distinct_items([one, one, text, two, one, two], "video_grid_thw")
    assert distinct == [one, two] and source == [0, 0, 1, 2, 0, 1, 2]
    # equal content but another object: not the same prompt (nothing is compared by value)
    copy = dataclasses.replace(one)
    assert distinct_items([one, copy], "video_grid_thw") == ([one, copy], [0, 1])
    assert distinct_items([text], "video_grid_thw") == ([], [])


def test_an_item_plan_expands_patch_and_merged_rows() -> None:
    # items 0 and 1 distinct (grids 1x2x2 and 1x2x4: 4 and 8 patches, 1 and 2 merged tokens)
    plan = ItemPlan(torch.tensor([[1, 2, 2], [1, 2, 4], [1, 2, 2]]), [0, 1, 0], merge=2)
    assert plan.distinct_grid.tolist() == [[1, 2, 2], [1, 2, 4]]
    merged = torch.tensor([[10.0], [20.0], [21.0]])
    assert plan.expand(merged).flatten().tolist() == [10.0, 20.0, 21.0, 10.0]
    patches = torch.arange(12.0)
    assert plan.expand(patches).tolist() == [0, 1, 2, 3, *range(4, 12), 0, 1, 2, 3]
    # lists (Qwen3-VL's deepstack features) expand element-wise
    assert [t.flatten().tolist() for t in plan.expand([merged, merged * 2])][1] == [20.0, 40.0, 42.0, 20.0]
    with pytest.raises(RuntimeError, match="matches neither"):
        plan.expand(torch.zeros(5))
    with pytest.raises(ValueError, match="do not number"):
        ItemPlan(torch.tensor([[1, 2, 2], [1, 2, 2]]), [1, 1], merge=2)


def _prompts(family: str, root: Path, video_dir: Path) -> tuple[Path, list[PromptInputs]]:
    """Two video prompts on two different clips and one image prompt, as the actor builds them."""
    model = build_tiny_model(family, root / "model", seed=0)
    store = FrameStore(root / "frames")
    side = 28 if family.startswith("qwen2") else 32  # one merged patch
    params = VideoParams(family=family, fps=None, nframes=4, min_pixels=4 * side**2, max_pixels=6 * side**2)
    samples = []
    for i, clip in enumerate([video_dir / "short.mp4", make_video(root / "other.mp4", seconds=1.0, fps=8)]):
        key = clip_key(content_hash(clip), params)
        frames, meta = decode_clip(clip, params)
        # the synthetic clips draw the same square: the second one's colours inverted, so the two
        # clips' features differ (a clip handed to the other's sequences must show)
        store.put(key, 255 - frames if i else frames, meta)
        samples.append(
            RolloutSample(
                id=f"v{i}", prompt=f"Clip {i}: what moves?", videos=(key,), clip_params=(params.canonical(),)
            )
        )
    pixels = torch.randint(
        0, 256, (1, 2 * side, 3 * side, 3), dtype=torch.uint8, generator=torch.Generator().manual_seed(0)
    )
    store.put("still", pixels, {"source": "synthetic", "params": {}})
    samples.append(RolloutSample(id="img", prompt="What is in the picture?", images=("still",)))
    checkpoint = Checkpoint.load(model)
    config = RolloutConfig(n=2, video_max_pixels=6 * side**2)
    return model, [prompt_inputs(s, checkpoint, store, config) for s in samples]


@pytest.mark.parametrize("family", ["qwen2_vl", "qwen2_5_vl", "qwen3_vl", "qwen3_5"])
def test_sharing_the_tower_changes_neither_log_probs_nor_gradients(
    family: str, tmp_path: Path, video_dir: Path
) -> None:
    model_path, (v0, v1, img) = _prompts(family, tmp_path, video_dir)
    policy = PolicyModel(ActorConfig(model_path=str(model_path)), trainable=True, device="cpu")
    # responses of each prompt side by side, as a step orders them: v0 x3, v1 x2, img x2
    responses = [[11, 12, 13], [14, 15], [16], [17, 18], [19, 20, 21], [22], [23, 24]]
    owners = [v0, v0, v0, v1, v1, img, img]
    weights = torch.linspace(-1.0, 1.0, len(owners))

    def run(prompts: list[PromptInputs]) -> tuple[list[torch.Tensor], dict[str, torch.Tensor], list[int]]:
        sequences = [TokenSequence(p, r) for p, r in zip(prompts, responses, strict=True)]
        (mb,) = policy.micro_batches(sequences, policy.positions(sequences))
        rows: list[int] = []  # pixel rows entering the tower's patch embedding, per call
        hook = policy.model.model.visual.patch_embed.register_forward_pre_hook(
            lambda _m, args: rows.append(args[0].shape[0])
        )
        policy.model.zero_grad(set_to_none=True)
        try:
            logp, _ = policy.forward(mb)
        finally:
            hook.remove()
        (logp.sum(dim=1) * weights).sum().backward()
        grads = {n: p.grad.clone() for n, p in policy.model.named_parameters() if p.grad is not None}
        return [logp[i, : len(r)].detach() for i, r in enumerate(responses)], grads, rows

    shared_logp, shared_grads, shared_items = run(owners)
    # the same prompts as distinct objects: nothing is shared, every clip and image encoded per sequence
    alone_logp, alone_grads, alone_items = run([dataclasses.replace(p) for p in owners])

    size = {
        id(p): len(p.vision.get("pixel_values_videos", p.vision.get("pixel_values"))) for p in (v0, v1, img)
    }
    assert sorted(shared_items) == sorted([size[id(img)], size[id(v0)] + size[id(v1)]])
    assert sorted(alone_items) == sorted([2 * size[id(img)], 3 * size[id(v0)] + 2 * size[id(v1)]])
    for shared, alone in zip(shared_logp, alone_logp, strict=True):
        torch.testing.assert_close(shared, alone, rtol=0, atol=1e-5)
    assert set(shared_grads) == set(alone_grads)
    visual = [n for n in shared_grads if ".visual." in f".{n}"]
    assert visual and all(shared_grads[n].abs().sum() > 0 for n in visual[:3])  # the tower does learn
    # fp32 sums in another order: ~1e-7 of a tensor's largest gradient apart (seen up to 7e-7 at 2.0);
    # a clip's features handed to the wrong sequence would be apart by the gradients' own size
    for name, grad in shared_grads.items():
        scale = alone_grads[name].abs().max().item()
        torch.testing.assert_close(grad, alone_grads[name], rtol=1e-4, atol=1e-5 * max(scale, 1e-3))


def test_a_planned_modality_the_tower_never_sees_fails_loudly(tmp_path: Path, video_dir: Path) -> None:
    model_path, (v0, _v1, _img) = _prompts("qwen2_5_vl", tmp_path, video_dir)
    policy = PolicyModel(ActorConfig(model_path=str(model_path)), trainable=False, device="cpu")
    grid = v0.vision["video_grid_thw"]
    inputs = {"video_grid_thw": torch.cat([grid, grid])}
    with (
        pytest.raises(RuntimeError, match="never encoded"),
        shared_vision(policy.model, inputs, {"video_grid_thw": [0, 0]}),
    ):
        pass  # a forward that never called the tower


def test_a_copied_grid_or_mismatched_items_fail_by_name(tmp_path: Path, video_dir: Path) -> None:
    model_path, (v0, _v1, _img) = _prompts("qwen2_5_vl", tmp_path, video_dir)
    policy = PolicyModel(ActorConfig(model_path=str(model_path)), trainable=False, device="cpu")
    (mb,) = policy.micro_batches([TokenSequence(v0, [11]), TokenSequence(v0, [12])], [None, None])
    assert mb.repeats == {"video_grid_thw": [0, 0]}
    # a transformers that hands its tower a copy of the grid: named, not an index error deep inside
    inputs = mb.inputs
    with (
        pytest.raises(RuntimeError, match="copy of a shared grid"),
        shared_vision(policy.model, inputs, mb.repeats),
    ):
        policy.model.model.visual(inputs["pixel_values_videos"], grid_thw=inputs["video_grid_thw"].clone())
    grid = v0.vision["video_grid_thw"]
    other = grid.clone()
    other[0, 0] += 1
    with pytest.raises(ValueError, match="different grids"):
        ItemPlan(torch.cat([grid, other]), [0, 0], merge=2)
