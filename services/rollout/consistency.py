"""The HF side of train/infer consistency: inputs and teacher-forced logprobs that match vLLM's.

For the same cached clip, the HF processor given the store's frames and metadata (no re-sampling, no
resize) produces the prompt token ids vLLM produced, and the HF model given vLLM's M-RoPE rule
(:mod:`services.rollout.mrope`) assigns the sampled tokens the logprobs vLLM reported (fp32: ~1e-6).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import torch

from services.rollout.config import RolloutConfig
from services.rollout.media import SampleMedia
from services.rollout.mrope import OVERRIDDEN, vision_items, vllm_positions
from services.rollout.prompts import processor_kwargs


def processor_inputs(processor: Any, prompt: str, media: SampleMedia, config: RolloutConfig) -> Any:
    """What the HF processor makes of a rendered prompt and its media, exactly as vLLM asks for it."""
    kwargs: dict[str, Any] = {"text": [prompt], "return_tensors": "pt"}
    if media.images:
        kwargs["images"] = media.images
    if media.videos:
        kwargs["videos"] = [frames for frames, _ in media.videos]
        kwargs["video_metadata"] = [
            {k: v for k, v in meta.items() if k != "do_sample_frames"} for _, meta in media.videos
        ]
    if media.images or media.videos:
        kwargs.update(processor_kwargs(config))
    return processor(**kwargs)


def position_ids(
    model_config: Any, input_ids: Sequence[int], inputs: Mapping[str, Any], sample_id: str | None = None
) -> torch.Tensor | None:
    """(3, 1, L) M-RoPE ids by vLLM's rule for families whose HF rule differs, else None (HF's own)."""
    if model_config.model_type not in OVERRIDDEN:
        return None
    vision = model_config.vision_config
    items = vision_items(
        input_ids,
        image_token_id=model_config.image_token_id,
        video_token_id=model_config.video_token_id,
        merge_size=vision.spatial_merge_size,
        image_grid_thw=inputs.get("image_grid_thw"),
        video_grid_thw=inputs.get("video_grid_thw"),
        second_per_grid_ts=inputs.get("second_per_grid_ts"),
        tokens_per_second=float(getattr(vision, "tokens_per_second", 1.0)),
        sample_id=sample_id,
    )
    return vllm_positions(len(input_ids), items, sample_id).unsqueeze(1)


def response_logprobs(
    model: Any,
    processor: Any,
    inputs: Mapping[str, Any],
    response_ids: Sequence[int],
    *,
    vllm_rule: bool = True,
    sample_id: str | None = None,
) -> torch.Tensor:
    """Teacher-forced log π(response token | prefix) of each response token, shape (R,), float32.

    ``inputs`` is :func:`processor_inputs` of the prompt; the response is appended to its ids. With
    ``vllm_rule`` (the default) M-RoPE positions follow vLLM's rule (:func:`position_ids`); without,
    the HF model's own rule (only to show the two differ). Only the last R + 1 positions' logits are
    computed (``logits_to_keep``): the prompt's full-vocabulary logits are never needed.
    """
    prompt_ids = inputs["input_ids"][0].tolist()
    ids = prompt_ids + list(response_ids)
    device = model.device
    input_ids = torch.tensor([ids], device=device)
    forward: dict[str, Any] = {
        k: v.to(device) if isinstance(v, torch.Tensor) else v
        for k, v in inputs.items()
        if k not in ("input_ids", "attention_mask", "mm_token_type_ids")
    }
    forward["input_ids"] = input_ids
    forward["attention_mask"] = torch.ones_like(input_ids)
    forward["mm_token_type_ids"] = torch.tensor(processor.create_mm_token_type_ids([ids]), device=device)
    positions = position_ids(model.config, ids, inputs, sample_id) if vllm_rule else None
    if positions is not None:
        forward["position_ids"] = positions.to(device)
    keep = len(response_ids) + 1
    with torch.no_grad():
        logits = model(**forward, logits_to_keep=keep).logits[0].float()
    # logits (R + 1, V): row j predicts token len(ids) - R - 1 + j + 1; the first R rows score the response
    logp = torch.log_softmax(logits[:-1], dim=-1)
    targets = torch.tensor(list(response_ids), device=logp.device).unsqueeze(1)
    return logp.gather(1, targets).squeeze(1).cpu()
