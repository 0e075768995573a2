"""A sample as the engine's input: the chat-formatted prompt, its media and the processor arguments."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from services.common.families import Family
from services.rollout.checkpoint import Checkpoint
from services.rollout.config import RolloutConfig
from services.rollout.groups import offline_responses
from services.rollout.media import FrameSource, SampleMedia, load_media, video_tokens
from services.rollout.samples import RolloutSample

IMAGE_PLACEHOLDER = "<|image_pad|>"
VIDEO_PLACEHOLDER = "<|video_pad|>"


class PlaceholderMismatch(ValueError):
    """A prompt's vision placeholders do not match its media (the message names the sample)."""


@dataclass
class EngineInput:
    sample: RolloutSample
    prompt: dict[str, Any]  # what vllm.LLM.generate takes for one prompt
    video_tokens: int  # placeholder tokens the videos must expand to


def chat_messages(sample: RolloutSample) -> list[dict[str, Any]]:
    """Qwen-VL chat turns: images, then videos, then the question text in one user turn."""
    content: list[dict[str, Any]] = [{"type": "image"} for _ in sample.images]
    content += [{"type": "video"} for _ in sample.videos]
    content.append({"type": "text", "text": sample.prompt})
    system = [{"role": "system", "content": sample.system}] if sample.system else []
    return [*system, {"role": "user", "content": content}]


def render_prompt(processor: Any, sample: RolloutSample) -> str:
    """The prompt text with one placeholder per image/video, ending with the assistant header and the
    sample's assistant prefix (which a chat message cannot express: the template would close the turn)."""
    text = processor.apply_chat_template(chat_messages(sample), tokenize=False, add_generation_prompt=True)
    text += sample.assistant_prefix or ""
    for placeholder, media, kind in (
        (IMAGE_PLACEHOLDER, sample.images, "image"),
        (VIDEO_PLACEHOLDER, sample.videos, "video"),
    ):
        found = text.count(placeholder)
        if found != len(media):
            raise PlaceholderMismatch(
                f"sample {sample.id!r}: the prompt holds {found} {kind} placeholder(s) {placeholder} "
                f"but the sample has {len(media)} {kind}(s); remove placeholders from the question text"
            )
    return text


def processor_kwargs(config: RolloutConfig) -> dict[str, Any]:
    """Per-modality processor arguments: stored videos are used as they are, images fit the budget."""
    return {
        "do_sample_frames": False,
        "videos_kwargs": {"do_resize": False},
        "images_kwargs": {
            "size": {"shortest_edge": config.image_min_pixels, "longest_edge": config.image_max_pixels}
        },
    }


def engine_input(
    processor: Any, sample: RolloutSample, media: SampleMedia, family: Family, config: RolloutConfig
) -> EngineInput:
    prompt: dict[str, Any] = {"prompt": render_prompt(processor, sample)}
    data = media.multi_modal_data()
    if data:
        prompt["multi_modal_data"] = data
        prompt["mm_processor_kwargs"] = processor_kwargs(config)
    expected = sum(video_tokens(frames, family) for frames, _ in media.videos)
    return EngineInput(sample=sample, prompt=prompt, video_tokens=expected)


def prepare_inputs(
    samples: Sequence[RolloutSample], checkpoint: Checkpoint, source: FrameSource, config: RolloutConfig
) -> list[EngineInput]:
    """Check every sample's offline output (when ``config`` mixes), load and check its media and
    render its prompt; errors name the sample and come before anything is generated."""
    for sample in samples:
        check_media_counts(sample, config.engine.limit_mm_per_prompt)
    offline_responses(samples, checkpoint, config)
    family = checkpoint.family
    return [
        engine_input(
            checkpoint.processor,
            sample,
            load_media(sample, source, family, config.video_max_pixels),
            family,
            config,
        )
        for sample in samples
    ]


def check_media_counts(sample: RolloutSample, limits: dict[str, int]) -> None:
    """A sample may carry at most ``engine.limit_mm_per_prompt`` items per modality (vLLM would refuse
    it later without naming the sample)."""
    for modality, items in (("video", sample.videos), ("image", sample.images)):
        limit = limits.get(modality, 0)
        if len(items) > limit:
            raise ValueError(
                f"sample {sample.id!r}: {len(items)} {modality}(s) but rollout.engine.limit_mm_per_prompt "
                f"allows {limit}; raise the limit"
            )


def check_feature_count(item: EngineInput, prompt_token_ids: list[int], video_token_id: int) -> None:
    """The engine's prompt must hold exactly as many video tokens as the clips have merged patches."""
    found = prompt_token_ids.count(video_token_id)
    if found != item.video_tokens:
        raise PlaceholderMismatch(
            f"sample {item.sample.id!r}: the prompt expanded to {found} video tokens but its clips "
            f"{list(item.sample.videos)} hold {item.video_tokens} merged patches"
        )
