"""The one way a shared :class:`~services.common.samples.Sample` becomes the rollout's input.

Training and evaluation both call :func:`rollout_sample`: they differ in the prompt they render, the id
they give the request and how they state the clips' decode parameters, never in how the fields map.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from services.common.frames.params import VideoParams
from services.common.samples import Sample
from services.rollout.samples import RolloutSample


def rollout_sample(
    sample: Sample,
    prompt: str,
    *,
    videos: Sequence[str] = (),
    images: Sequence[str] = (),
    video_params: VideoParams | Mapping[str, Any] | None = None,
    clip_params: Sequence[VideoParams | Mapping[str, Any]] | None = None,
    system: str | None = None,
    assistant_prefix: str | None = None,
    reward: Mapping[str, Any] | None = None,
    sample_id: str | None = None,
    offline_output: bool = True,
) -> RolloutSample:
    """``sample`` as a rollout request.

    ``videos`` / ``images`` are the frame-store keys of the sample's videos / images, aligned with
    ``sample.videos`` / ``sample.images``. Decode parameters: ``video_params`` (one set for every video)
    or ``clip_params`` (one per video, as preprocess rows carry them); a ``VideoParams`` is written in
    the form the rollout checks. ``prompt`` is the rendered user turn, ``system`` the system turn and
    ``assistant_prefix`` the text the assistant turn starts with. ``reward`` holds the scoring fields
    the mix gate reads (``services.common.samples.reward_fields``). ``sample_id`` (default
    ``sample.id``) names the request, e.g. ``"<benchmark>/<id>"`` where ids repeat across files.
    ``offline_output=False`` leaves out the sample's pre-collected response (evaluation never mixes).

    Raises ValueError naming the sample when the keys do not match its media.
    """
    for kind, keys, paths in (("video", videos, sample.videos), ("image", images, sample.images)):
        if len(keys) != len(paths):
            raise ValueError(
                f"sample {sample.id!r}: {len(keys)} {kind} key(s) for its {len(paths)} {kind}(s) "
                f"{list(paths)}; give one frame-store key per {kind}, in order"
            )
    if isinstance(video_params, VideoParams):
        video_params = video_params.model_dump(mode="json")
    per_clip = None
    if clip_params is not None:
        per_clip = tuple(p.canonical() if isinstance(p, VideoParams) else dict(p) for p in clip_params)
    return RolloutSample(
        id=sample.id if sample_id is None else sample_id,
        prompt=prompt,
        system=system,
        assistant_prefix=assistant_prefix,
        videos=tuple(videos),
        images=tuple(images),
        video_params=dict(video_params) if video_params is not None else None,
        clip_params=per_clip,
        offline_output=sample.offline_output if offline_output else None,
        reward=dict(reward or {}),
    )
