"""MVBench (OpenGVLab/MVBench): 20 temporal tasks × 200 questions; the score is the mean over tasks.

Files: ``json/<task>.json``, each a list of {video, question, candidates [texts], answer (the right
candidate's text), start?, end?}. Videos under ``video/<task folder>/`` (below). The official runner
(VideoChat2) also opens the assistant turn with "Best option:("; a chat-template engine cannot, so the
instruction alone asks for the option.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

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


@register
class MVBench(Benchmark):
    name = "mvbench"
    title = "MVBench"
    annotations = ("json/*.json",)
    video = fixed({"fps": None, "nframes": 16})  # VideoChat2 / VLMEvalKit protocol: 16 frames
    system = (
        "Carefully watch the video and pay attention to the cause and sequence of events, the detail and "
        "movement of objects, and the action and pose of persons. Based on your observations, select the "
        "best option that accurately addresses the question."
    )
    templates = fixed({"prompt": "Question: {question}\nOptions:\n{options}\nOnly give the best option."})
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
            for index, (where, row) in enumerate(read_rows(path)):
                candidates = require(row, "candidates", where)
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
                            "start": row.get("start"),
                            "end": row.get("end"),
                        },
                        where=where,
                    )
                )
        return samples
