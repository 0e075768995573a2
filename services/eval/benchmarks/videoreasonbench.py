"""VideoReasonBench (llyx97/video_reason_bench): vision-centric reasoning over state changes.

Files: ``questions/{card,chip,cup,file_sys,grid,hrd}.json`` (id → {video, question (asks for a summary
after "Final Answer:"), answer, dim, num_state, num_operation, visible_time}). Videos at ``video``
(``videos/<type>/….mp4``). Officially graded by an LLM judge ("Correct"/"Incorrect"); without a
configured judge the reward library's open-ended score stands in, and the summary says so.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path

from services.common.samples import Sample
from services.eval.benchmarks.aggregate import accuracy_summary
from services.eval.benchmarks.base import Benchmark, fixed, make_sample
from services.eval.benchmarks.errors import BenchmarkError
from services.eval.benchmarks.files import read_json, require
from services.eval.benchmarks.registry import register
from services.eval.benchmarks.results import ItemResult, Summary

# the official summary folds the two state-inference dimensions into one
_DIM_GROUPS = {"order_state": "infer_state", "counting_state": "infer_state"}


@register
class VideoReasonBench(Benchmark):
    name = "videoreasonbench"
    title = "VideoReasonBench"
    annotations = ("questions/*.json",)
    video = fixed({"fps": None, "nframes": 32, "max_pixels": 448 * 448})  # the official Qwen2.5-VL settings
    templates = fixed({"prompt": "{question}"})
    judged_types = frozenset({"open-ended"})
    official_source = (
        "llyx97/video_reason_bench · utils/eval_utils.py · get_judge_prompt + llm_judge_api (an LLM judge: "
        "the configured judge with the official question; no rule reader exists)"
    )

    def load(self, files: Sequence[Path]) -> list[Sample]:
        samples = []
        for path in files:
            data = read_json(path)
            if not isinstance(data, dict):
                raise BenchmarkError(f"{path}: expected {{id: question}}")
            for key, item in data.items():
                where = f"{path}[{key}]"
                if not isinstance(item, dict):
                    raise BenchmarkError(f"{where}: a question must be an object")
                dim = item.get("dim")
                samples.append(
                    make_sample(
                        {
                            "id": f"{path.stem}/{key}",
                            "problem": require(item, "question", where),
                            "problem_type": "open-ended",
                            "data_type": "video",
                            "videos": [require(item, "video", where)],
                            "answer": require(item, "answer", where),
                            "video_type": path.stem,
                            "dim": _DIM_GROUPS.get(dim, dim),
                            "num_state": item.get("num_state"),
                            "num_operation": item.get("num_operation"),
                        },
                        where=where,
                    )
                )
        return samples

    def aggregate(self, samples: Sequence[Sample], results: Mapping[str, ItemResult]) -> Summary:
        result = accuracy_summary(
            self.name,
            samples,
            results,
            {
                "dim": "dim",
                "video_type": "video_type",
                "num_state": "num_state",
                "num_operation": "num_operation",
            },
        )
        if result.judged < result.count:
            result.notes.append(
                f"{result.count - result.judged} of {result.count} answers were scored without the LLM judge "
                "(open-ended ROUGE / exact match): not comparable with the official judged accuracy"
            )
        return result
