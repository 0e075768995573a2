"""Video-MMMU (videommmu/VideoMMMU): knowledge acquisition from lecture videos in three tracks.

Files: the official ``data/{perception,comprehension,adaptation}_video.json`` ({"Perception": {"0":
{id, question, options [10 texts], answer, question_type?}}}) or HF lmms-lab/VideoMMMU
``<Track>/test-*.parquet`` rows. Videos ``videos/<id>.mp4``. The released videos end with the question's
frame: the Adaptation image ("The image for this question is at the end of the video"), a quiz frame in
the other tracks. The official reader adds the last frame to its sample; the frame store's sampling
(``round(linspace(0, total - 1, n))``) always ends on it, so the image is seen as in the protocol. Open
Adaptation answers are numbers (numerical) or text (open-ended).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from services.common.samples import Sample
from services.eval.benchmarks.base import Benchmark, fixed, make_sample, reader_view
from services.eval.benchmarks.errors import BenchmarkError
from services.eval.benchmarks.files import read_json, read_rows, require
from services.eval.benchmarks.options import lettered
from services.eval.benchmarks.registry import register
from services.eval.benchmarks.results import ItemResult, Summary
from services.reward.extract.numbers import single_reading

TRACKS = ("Perception", "Comprehension", "Adaptation")
_ADAPT = (
    "You should watch and learn the video content. Then apply what you learned to answer the following "
    "{kind} question. The image for this question is at the end of the video.\n{question}"
)


def _track_of(path: Path) -> str:
    for part in (path.stem, path.parent.name):
        for track in TRACKS:
            if part.lower().startswith(track.lower()):
                return track
    raise BenchmarkError(f"{path}: cannot tell the Video-MMMU track (Perception, Comprehension, Adaptation)")


def _subject(item_id: str) -> str | None:
    """``dev_Biology_3`` → ``Biology``."""
    parts = item_id.split("_")
    return "_".join(parts[1:-1]) if len(parts) >= 3 else None


@register
class VideoMMMU(Benchmark):
    name = "videommmu"
    title = "Video-MMMU"
    annotations = ("data/*_video.json", "*/test-*.parquet")
    # multiple choice only: open answers keep the robust reader (MMMU's parse_open_response is a
    # number/phrase matcher the robust numeric and text types already cover)
    official_readers = fixed({"multiple choice": "videommmu"})
    # The reader is the authors' parse_multi_choice_response (their repository's copy of the task). The
    # denominator is the aggregation of lmms-eval, where the README runs the benchmark: there every
    # multiple-choice reply, the empty one included, parses to a letter or "No Answer Found." (wrong),
    # so the "API Error" filter drops only an empty open-ended reply (parse_open_response). A missing
    # or failed item counts wrong: the official run answers every question.
    official_source = (
        "EvolvingLMMs-Lab/VideoMMMU · lmms_eval/tasks/videommmu/utils.py · parse_multi_choice_response; "
        "EvolvingLMMs-Lab/lmms-eval · lmms_eval/tasks/videommmu/utils.py · videommmu_process_results + "
        "videommmu_aggregate_results (accuracy per track over every item; only an empty open-ended reply, "
        "an 'API Error', is left out)"
    )
    official_denominator = "all_but_empty_open"
    templates = fixed(
        {
            "plain": "{question}\n{options}\nPlease ignore the Quiz question in last frame of the video.",
            "adaptation mc": _ADAPT.replace("{kind}", "multi-choice") + "\n{options}",
            "adaptation open": _ADAPT.replace("{kind}", "open-ended"),
        }
    )
    breakdowns = fixed({"track": "track", "subject": "subject"})

    def load(self, files: Sequence[Path]) -> list[Sample]:
        samples = []
        for path in files:
            track = _track_of(path)
            for where, row in _records(path, track):
                item_id = str(require(row, "id", where))
                answer = str(require(row, "answer", where)).strip()
                fields: dict[str, Any] = {
                    "id": f"{track}/{item_id}",
                    "problem": require(row, "question", where),
                    "data_type": "video",
                    "videos": [f"videos/{item_id}.mp4"],
                    "answer": answer,
                    "track": track,
                    "subject": _subject(item_id),
                }
                if row.get("question_type") == "open" or not row.get("options"):
                    kind = "numerical" if single_reading(answer) is not None else "open-ended"
                    fields["problem_type"] = kind
                else:
                    fields.update(problem_type="multiple choice", options=lettered(row["options"]))
                samples.append(make_sample(fields, where=where))
        return samples

    def summarise(
        self, samples: Sequence[Sample], results: Mapping[str, ItemResult], reader: str = "official"
    ) -> Summary:
        """The official summary, plus ``metrics["accuracy_over_readable"]``: the official reader's
        accuracy over only the answers it read, beside the headline over every item as lmms-eval
        counts them (EvolvingLMMs-Lab/lmms-eval lmms_eval/tasks/videommmu/utils.py:
        videommmu_process_results turns an unreadable reply into "No Answer Found.", which
        videommmu_aggregate_results keeps and evaluate_videommmu scores wrong). Left out of it: missing,
        failed and empty replies and those the official reader read nothing from. Only under the
        official reader (the robust protocol has no official readable set)."""
        out = super().summarise(samples, results, reader)
        if reader != "official":
            return out
        read = [results[s.id] for s in samples if _officially_read(results[s.id])]
        if not read:
            return out
        right = sum(reader_view(r, "official").accuracy for r in read)
        metrics = {**out.metrics, "accuracy_over_readable": 100.0 * right / len(read)}
        return out.model_copy(update={"metrics": metrics})

    def template_for(self, sample: Sample) -> str:
        if sample.extra("track") != "Adaptation":
            return self.templates["plain"]
        return self.templates[
            "adaptation mc" if sample.problem_type == "multiple choice" else "adaptation open"
        ]


def _officially_read(result: ItemResult) -> bool:
    """Whether the official reader read an answer from ``result`` (an open answer without an official
    rule reader: whether there is a reply, as parse_open_response reads every non-empty one)."""
    if result.missing or result.error or not result.response:
        return False
    return (result.details.get("official") or {}).get("readable", True) is not False


def _records(path: Path, track: str) -> list[tuple[str, dict[str, Any]]]:
    if path.suffix.lower() != ".json":
        return read_rows(path)
    data = read_json(path)
    if isinstance(data, dict):
        inner = data.get(track, data)
        items = inner.items() if isinstance(inner, dict) else enumerate(inner)
        return [(f"{path}[{track}][{k}]", v) for k, v in items]
    return read_rows(path)
