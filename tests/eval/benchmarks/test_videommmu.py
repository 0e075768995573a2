"""Video-MMMU: the official per-track nested JSON, ten-option questions, an open numeric answer."""

from __future__ import annotations

import pytest

from services.eval.benchmarks import get_benchmark
from tests.eval.conftest import write_json

TEN = [f"choice {i}" for i in range(10)]


def test_tracks(tmp_path, evaluate):
    write_json(tmp_path / "data" / "perception_video.json", {"Perception": {
        "0": {"id": "dev_Biology_3", "link_selected": "", "question": "What organelle is shown?", "options": TEN,
              "answer": "G"}}})  # fmt: skip
    write_json(tmp_path / "data" / "adaptation_video.json", {"Adaptation": {
        "0": {"id": "test_Math_1", "question": "<image 1> Which graph fits?", "options": TEN, "answer": "B",
              "question_type": "multiple-choice"},
        "1": {"id": "validation_Physics_5", "question": "<image 1> What is the speed in m/s?", "options": [],
              "answer": "12.5", "question_type": "open"}}})  # fmt: skip
    responses = {
        "Perception/dev_Biology_3": "G",  # right
        "Adaptation/test_Math_1": "C",  # wrong
        "Adaptation/validation_Physics_5": "The answer is 12.50",  # right (numerical, 2 decimals)
    }
    out = evaluate("videommmu", tmp_path, responses)
    assert out.by_id["Adaptation/validation_Physics_5"].problem_type == "numerical"
    assert out.summary.overall == pytest.approx(100 * 2 / 3)
    assert out.cell("track", "Perception") == pytest.approx(100.0)
    assert out.cell("track", "Adaptation") == pytest.approx(50.0)
    assert out.cell("subject", "Math") == pytest.approx(0.0)
    prompt = get_benchmark("videommmu").prompt(out.by_id["Adaptation/validation_Physics_5"], "qwen3_vl")
    assert prompt.startswith(
        "You should watch and learn the video content. Then apply what you learned to answer"
    )
    assert "open-ended question" in prompt


@pytest.mark.parametrize(
    "sampling", [{"fps": None, "nframes": 4}, {"fps": 2.0}, {"fps": 1.0, "max_frames": 4}]
)
def test_the_last_frame_the_adaptation_image_is_always_sampled(tmp_path, sampling):
    """Video-MMMU's released videos end with the question's frame (the Adaptation image; a quiz frame
    in the other tracks), and the official reader adds the last frame to its sample. The frame store's
    rule, round(linspace(0, total - 1, n)), ends on the last frame by construction: a 2.5 s clip at 10
    fps has frames 0..24, and every sampling keeps frame 24."""
    from services.common.frames import VideoParams, decode_clip
    from services.common.frames.synthetic import make_video

    video = make_video(tmp_path / "lecture.mp4", seconds=2.5, fps=10, width=112, height=84)
    params = VideoParams(family="qwen2_5_vl", min_pixels=3136, max_pixels=6272, **sampling)
    frames, meta = decode_clip(video, params)
    assert meta["frames_indices"][-1] == 24
    assert len(meta["frames_indices"]) == frames.shape[0]


def _five_perception_items(tmp_path):
    write_json(tmp_path / "data" / "perception_video.json", {"Perception": {
        str(i): {"id": f"dev_Art_{i}", "link_selected": "", "question": "Which colour?", "options": TEN,
                 "answer": "B"} for i in range(5)}})  # fmt: skip
    return {
        "Perception/dev_Art_0": "B",  # right
        "Perception/dev_Art_1": "B",  # right
        "Perception/dev_Art_2": "B",  # right
        "Perception/dev_Art_3": "C",  # read, wrong
        "Perception/dev_Art_4": "<think>Let me look at the colours on screen.</think>",  # unreadable
    }


def test_headline_divides_by_every_item_and_the_readable_figure_stands_beside_it(tmp_path, evaluate):
    # EvolvingLMMs-Lab/lmms-eval lmms_eval/tasks/videommmu/utils.py: videommmu_process_results parses the
    # unreadable trace to "No Answer Found." (the authors' parse_multi_choice_response: "No Answere
    # Found"), which videommmu_aggregate_results keeps (only "API Error" is dropped) and
    # evaluate_videommmu scores wrong. By hand: 3 right of 5 = 60 (headline, official); over the 4
    # answers the official reader read, 3 of 4 = 75 (`accuracy_over_readable`). The robust reader reads
    # nothing from the trace either and keeps every item: 3 of 5 = 60.
    out = evaluate("videommmu", tmp_path, _five_perception_items(tmp_path))
    assert out.summary.unreadable == 1 and out.summary.details["official_left_out"] == 0
    assert out.summary.overall == pytest.approx(60.0)
    assert out.summary.metrics["accuracy_over_readable"] == pytest.approx(75.0)
    assert out.summary.robust_overall == pytest.approx(60.0)
    assert out.cell("track", "Perception") == pytest.approx(60.0)


def test_readable_figure_leaves_out_missing_failed_and_empty_answers(tmp_path, evaluate):
    # Same five items, item 3 without a prediction and item 2 an empty reply ("No Answer Found." in
    # lmms-eval, counted wrong): headline 2 right of 5 = 40; read by the official reader: items 0, 1
    # (the trace, the empty reply and the missing item are not) → 2 of 2 = 100.
    responses = _five_perception_items(tmp_path)
    del responses["Perception/dev_Art_3"]
    responses["Perception/dev_Art_2"] = ""
    out = evaluate("videommmu", tmp_path, responses)
    assert out.summary.overall == pytest.approx(40.0)
    assert out.summary.metrics["accuracy_over_readable"] == pytest.approx(100.0)
    # `eval score --reader robust`: the robust protocol has no official readable set; the key is absent
    robust = evaluate("videommmu", tmp_path, responses, reader="robust")
    assert "accuracy_over_readable" not in robust.summary.metrics
