"""MVBench (OpenGVLab/MVBench): 20 temporal tasks × 200 questions; the score is the mean over tasks.

Files: ``json/<task>.json``, each a list of {video, question, candidates [texts], answer (the right
candidate's text), start?, end?}. Videos under ``video/<task folder>/`` (below). The official runner
(VideoChat2) opens the assistant turn with "Best option:(", and so does this adapter: the model
continues with the letter, and answers are read from prefix + response.

A record's [start, end] window (seconds) becomes its clip's window, so only that span is sampled, as
VideoChat2 does (option ``windows: false`` when the video root holds clips already cut to it).
episodic_reasoning's videos are folders of TVQA frames (``00001.jpg`` …) extracted at 3 fps
(VideoChat2's ``read_frame(..., fps=3)``): they are read as frame folders at that rate.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from pydantic import BaseModel, ConfigDict, Field

from services.common.frames.params import window_overrides
from services.common.samples import Sample
from services.eval.benchmarks.base import Benchmark, fixed, make_sample
from services.eval.benchmarks.errors import BenchmarkError
from services.eval.benchmarks.files import read_rows, require
from services.eval.benchmarks.options import letter_of_text, lettered
from services.eval.benchmarks.registry import register

# Where each task's videos live in the HF release (VideoChat2's data list).
TASK_FOLDERS = {
    "action_sequence": "star/Charades_v1_480",
    "action_prediction": "star/Charades_v1_480",
    "action_antonym": "ssv2_video",
    "fine_grained_action": "Moments_in_Time_Raw/videos",
    "unexpected_action": "FunQA_test/test",
    "object_existence": "clevrer/video_validation",
    "object_interaction": "star/Charades_v1_480",
    "object_shuffle": "perception/videos",
    "moving_direction": "clevrer/video_validation",
    "action_localization": "sta/sta_video",
    "scene_transition": "scene_qa/video",
    "action_count": "perception/videos",
    "moving_count": "clevrer/video_validation",
    "moving_attribute": "clevrer/video_validation",
    "state_change": "perception/videos",
    "fine_grained_pose": "nturgbd",
    "character_order": "perception/videos",
    "egocentric_navigation": "vlnqa",
    "episodic_reasoning": "tvqa/frames_fps3_hq",
    "counterfactual_inference": "clevrer/video_validation",
}
_SYSTEM = (
    "Carefully watch the video and pay attention to the cause and sequence of events, the detail and "
    "movement of objects, and the action and pose of persons. Based on your observations, select the "
    "best option that accurately addresses the question."
)
# Tasks whose "videos" are folders of frames, and the rate the frames were extracted at.
FRAME_FOLDER_FPS = {"episodic_reasoning": 3.0}


class WindowOptions(BaseModel):
    """Options of adapters whose records carry a time window of their video (MVBench, ODV-Bench,
    LiveSports-3K)."""

    model_config = ConfigDict(extra="forbid")

    windows: bool = Field(
        True,
        description="sample only each record's time window of its video; false when the video root "
        "holds clips already cut to the windows",
    )


def clip_overrides(start: object, end: object, options: WindowOptions, **fields: object) -> dict | None:
    """A sample's ``video_params``: its window (unless switched off) plus ``fields``; None if empty."""
    overrides = dict(fields)
    if options.windows:
        overrides.update(window_overrides(start, end) or {})
    return overrides or None


@register
class MVBench(Benchmark):
    name = "mvbench"
    title = "MVBench"
    annotations = ("json/*.json",)
    video = fixed({"fps": None, "nframes": 16})  # VideoChat2 / VLMEvalKit protocol: 16 frames
    Options = WindowOptions
    system = _SYSTEM
    # video_chat2/mvbench.ipynb calls infer_mvbench(..., system_llm=True) in every revision: the
    # instruction is the conversation's system text and, ending in a newline, also opens the user message
    # before the question (VLMEvalKit's port keeps it in the system message only; that is not this code)
    templates = fixed(
        {"prompt": _SYSTEM + "\nQuestion: {question}\nOptions:\n{options}\nOnly give the best option."}
    )
    official_readers = fixed({"multiple choice": "mvbench"})
    official_source = (
        "OpenGVLab/Ask-Anything · video_chat2/mvbench.ipynb · infer_mvbench + check_ans "
        "(accuracy per task; the mean over the 20 tasks)"
    )
    # VideoChat2's assistant turn opens the answer; the model continues with the letter and ")"
    answer_prefix = "Best option:("
    option_style = "({letter}) {text}"
    breakdowns = fixed({"task": "task"})
    macro_over = "task"

    def load(self, files: Sequence[Path]) -> list[Sample]:
        samples = []
        for path in files:
            task = path.stem
            if task not in TASK_FOLDERS:
                raise BenchmarkError(
                    f"{path}: unknown MVBench task {task!r}; known: {', '.join(TASK_FOLDERS)}"
                )
            folder_fps = {"folder_fps": FRAME_FOLDER_FPS[task]} if task in FRAME_FOLDER_FPS else {}
            for index, (where, row) in enumerate(read_rows(path)):
                candidates = require(row, "candidates", where)
                start, end = row.get("start"), row.get("end")
                samples.append(
                    make_sample(
                        {
                            "id": f"{task}/{index}",
                            "problem": require(row, "question", where),
                            "problem_type": "multiple choice",
                            "data_type": "video",
                            "videos": [f"video/{TASK_FOLDERS[task]}/{require(row, 'video', where)}"],
                            "options": lettered(candidates),
                            "answer": letter_of_text(candidates, require(row, "answer", where), where),
                            "task": task,
                            "start": start,
                            "end": end,
                            "video_params": clip_overrides(start, end, self.options, **folder_fps),
                        },
                        where=where,
                    )
                )
        return samples
