"""MVBench: per-task JSON files with text answers, the task folder of each video, the mean over tasks."""

from __future__ import annotations

import pytest

from services.eval.benchmarks import BenchmarkError, get_benchmark
from tests.eval.conftest import write_json

SEQUENCE = [
    {"video": "3MSZA.mp4", "question": "What happened after the person took the food?",
     "candidates": ["Ate the medicine.", "Tidied up the blanket.", "Put down the cup/glass/bottle."],
     "answer": "Ate the medicine.", "start": 11.1, "end": 19.2},
    {"video": "4XYZB.mp4", "question": "What did the person do first?",
     "candidates": ["Opened the door.", "Sat on the bed."], "answer": "Sat on the bed.", "start": 0.0, "end": 8.5},
]  # fmt: skip
SHUFFLE = [
    {"video": "video_10009.mp4", "question": f"Where is the ball {i}?",
     "candidates": ["Under the first object.", "Under the second object.", "Under the third object."],
     "answer": ["Under the first object.", "Under the second object.", "Under the third object."][i]}
    for i in range(3)
]  # fmt: skip
RESPONSES = {
    "action_sequence/0": "(A) Ate the medicine.",  # right
    "action_sequence/1": "A",  # wrong (B)
    "object_shuffle/0": "A",  # right
    "object_shuffle/1": "Best option: (B)",  # robust: right; check_ans: "(best" names no option
    "object_shuffle/2": "Under the third object.",  # robust: right by option text; check_ans: no option
}


def test_mean_over_tasks(tmp_path, evaluate):
    write_json(tmp_path / "json" / "action_sequence.json", SEQUENCE)
    write_json(tmp_path / "json" / "object_shuffle.json", SHUFFLE)
    out = evaluate("mvbench", tmp_path, RESPONSES)
    sample = out.by_id["action_sequence/1"]
    assert sample.videos == ("video/star/Charades_v1_480/4XYZB.mp4",)
    assert sample.options == ["A. Opened the door.", "B. Sat on the bed."] and sample.answer == "B"
    # official: action_sequence 1/2 = 50, object_shuffle 1/3 → mean of tasks 41.67; micro 2/5 = 40
    assert out.cell("task", "action_sequence") == pytest.approx(50.0)
    assert out.cell("task", "object_shuffle") == pytest.approx(100 / 3)
    assert out.summary.overall == pytest.approx((50.0 + 100 / 3) / 2)
    assert out.summary.metrics["accuracy"] == pytest.approx(40.0)
    # robust: object_shuffle 3/3 → mean of tasks 75
    assert out.summary.robust_overall == pytest.approx(75.0)
    assert out.summary.unreadable == 2


# VideoChat2's MVBench instruction (OpenGVLab/Ask-Anything video_chat2/mvbench.ipynb)
INSTRUCTION = (
    "Carefully watch the video and pay attention to the cause and sequence of events, the detail and "
    "movement of objects, and the action and pose of persons. Based on your observations, select the "
    "best option that accurately addresses the question."
)


def test_prompt_and_system_follow_videochat2(tmp_path):
    write_json(tmp_path / "json" / "action_sequence.json", SEQUENCE[1:])
    bench = get_benchmark("mvbench")
    (sample,) = bench.load(bench.find_annotations(tmp_path))
    # OpenGVLab/Ask-Anything video_chat2/mvbench.ipynb: every revision calls infer_mvbench with
    # system_llm=True, which puts the instruction in the conversation's system text AND in front of the
    # question in the user turn (prompt = system + question + question_prompt). Both are kept here.
    assert bench.system_prompt(sample) == INSTRUCTION
    assert bench.prompt(sample, "qwen2_5_vl") == (
        INSTRUCTION + "\nQuestion: What did the person do first?\nOptions:\n(A) Opened the door.\n"
        "(B) Sat on the bed.\nOnly give the best option."
    )
    assert bench.assistant_prefix(sample) == "Best option:("
    assert bench.system_prompt(sample, thinking=True) is None


def test_the_notebooks_llm_input_is_rebuilt_from_the_adapters_turns(tmp_path):
    """OpenGVLab/Ask-Anything video_chat2/mvbench.ipynb, the evaluation loop: infer_mvbench(example,
    system=<instruction> + "\n", question_prompt="\nOnly give the best option.", answer_prompt=
    "Best option:(", system_llm=True). The conversation (sep "###", roles Human/Assistant) then holds the
    video turn, ask(system + question + question_prompt) (which adds "\n"), and the answer prompt, and
    get_prompt2 joins them. The text below is that join written out by hand for one question; laying
    the adapter's system, user and assistant-prefix turns into the same conversation gives it exactly,
    so the instruction is sent twice, as the notebook sends it (not in the system message only)."""
    write_json(tmp_path / "json" / "action_sequence.json", SEQUENCE[1:])
    bench = get_benchmark("mvbench")
    (sample,) = bench.load(bench.find_annotations(tmp_path))
    notebook = (
        INSTRUCTION + "\n###"
        "Human: <Video><VideoHere></Video>\n###"
        "Human: " + INSTRUCTION + "\nQuestion: What did the person do first?\nOptions:\n"
        "(A) Opened the door.\n(B) Sat on the bed.\nOnly give the best option.\n###"
        "Assistant: Best option:("
    )
    rebuilt = (
        bench.system_prompt(sample) + "\n###"
        "Human: <Video><VideoHere></Video>\n###"
        "Human: " + bench.prompt(sample, "qwen2_5_vl") + "\n###"
        "Assistant: " + bench.assistant_prefix(sample)
    )
    assert rebuilt == notebook


def test_unknown_task_and_unknown_answer_are_errors(tmp_path):
    bench = get_benchmark("mvbench")
    write_json(tmp_path / "a" / "json" / "made_up_task.json", SEQUENCE)
    with pytest.raises(BenchmarkError, match="unknown MVBench task 'made_up_task'"):
        bench.load(bench.find_annotations(tmp_path / "a"))
    bad = [{**SEQUENCE[0], "answer": "Flew away."}]
    write_json(tmp_path / "b" / "json" / "action_sequence.json", bad)
    with pytest.raises(BenchmarkError, match=r"action_sequence.json#0: answer 'Flew away.'"):
        bench.load(bench.find_annotations(tmp_path / "b"))


EPISODE = [
    {"video": "castle_s01e01_seg02_clip_00", "question": "Why does Castle leave?",
     "candidates": ["He is late.", "He is called away."], "answer": "He is called away.", "start": 2.0, "end": 5.0},
]  # fmt: skip


def _mvbench_fixture(root):
    """The annotations plus their videos: stand-in mp4 bytes (planning only hashes them) and one TVQA
    frame folder of 12 flat JPEGs at 3 fps, red for frames 0-5 and blue from 2 s on."""
    from PIL import Image

    write_json(root / "json" / "action_sequence.json", SEQUENCE)
    write_json(root / "json" / "object_shuffle.json", SHUFFLE[:1])
    write_json(root / "json" / "episodic_reasoning.json", EPISODE)
    for name in (
        "star/Charades_v1_480/3MSZA.mp4",
        "star/Charades_v1_480/4XYZB.mp4",
        "perception/videos/video_10009.mp4",
    ):
        (root / "video" / name).parent.mkdir(parents=True, exist_ok=True)
        (root / "video" / name).write_bytes(name.encode())
    folder = root / "video" / "tvqa" / "frames_fps3_hq" / EPISODE[0]["video"]
    folder.mkdir(parents=True)
    for i in range(1, 13):
        Image.new("RGB", (40, 30), (255, 0, 0) if i <= 6 else (0, 0, 255)).save(folder / f"{i:05d}.jpg")
    return folder


def _plan(root, **options):
    from services.common.frames import FrameStore
    from services.eval.clips import ClipPlanner, clip_params

    bench = get_benchmark("mvbench", **options)
    samples = bench.load(bench.find_annotations(root))
    params = clip_params("qwen2_5_vl", bench.video)
    planned = ClipPlanner(FrameStore(root / "frames")).plan(samples, root, params)
    assert [p.error for p in planned] == [None] * 4
    return {p.sample.id: p for p in planned}, params


def test_windows_and_frame_folders_reach_the_planned_clip_params(tmp_path):
    from services.common.frames.params import ClipWindow

    folder = _mvbench_fixture(tmp_path)
    planned, protocol = _plan(tmp_path)
    first, second = planned["action_sequence/0"], planned["action_sequence/1"]
    assert first.params.window == ClipWindow(start=11.1, end=19.2) and first.params.nframes == 16
    assert second.params.window == ClipWindow(start=0.0, end=8.5)
    assert first.params.canonical()["window"] == {"start": 11.1, "end": 19.2}
    # no window in the record: the protocol's whole-file clip, key and all
    assert planned["object_shuffle/0"].params.canonical() == protocol.canonical()
    episode = planned["episodic_reasoning/0"]
    assert episode.sample.videos == ("video/tvqa/frames_fps3_hq/castle_s01e01_seg02_clip_00",)
    assert episode.files == [folder] and episode.keys[0] != planned["object_shuffle/0"].keys[0]
    assert (episode.params.folder_fps, episode.params.window) == (3.0, ClipWindow(start=2.0, end=5.0))

    # `windows: false` for a video root of pre-cut clips: whole files, other keys; folders keep their rate
    uncut, _ = _plan(tmp_path, windows=False)
    assert uncut["action_sequence/0"].params.window is None
    assert uncut["action_sequence/0"].keys != first.keys
    assert uncut["episodic_reasoning/0"].params.folder_fps == 3.0


@pytest.mark.integration
@pytest.mark.slow
def test_episodic_reasoning_frames_are_preprocessed_into_the_store(reelrl_home, tmp_path):
    from services.common.frames import FrameStore
    from services.eval.clips import ClipPlanner, clip_params, preprocess_missing

    _mvbench_fixture(tmp_path)
    bench = get_benchmark("mvbench")
    samples = [s for s in bench.load(bench.find_annotations(tmp_path)) if s.id == "episodic_reasoning/0"]
    store = FrameStore.from_settings()
    params = clip_params("qwen2_5_vl", bench.video, {"nframes": 4})
    (item,) = ClipPlanner(store).plan(samples, tmp_path, params)
    assert (
        preprocess_missing([item], store, params, workers=1, timeout_s=240, work_dir=tmp_path / "work") == 1
    )
    assert item.error is None
    frames, meta = store.load(item.keys[0], expect=item.params)
    # window [2, 5] s at 3 fps: frames ceil(6)=6 .. min(floor(4.0·3), 11)=11 → linspace(6, 11, 4) =
    # 6, 7.67, 9.33, 11 → 6, 8, 9, 11: all blue; the prompt's times count from the window's start
    assert meta["source_frames_indices"] == [6, 8, 9, 11] and meta["frames_indices"] == [0, 2, 3, 5]
    assert meta["backend"] == "folder"
    means = frames.float().mean(dim=(1, 2))
    assert bool((means[:, 2] > 240).all() and (means[:, 0] < 8).all()), means


def test_answers_are_read_after_videochat2s_assistant_prefix(tmp_path, evaluate):
    """VideoChat2 ends the assistant turn with "Best option:(" and the model writes the letter next.
    "B) Sat on the bed. A) Opened the door." names two letters (a hedge, no answer) on its own; after
    the prefix, "Best option:(B)" reads B."""
    from services.eval.benchmarks.mvbench import MVBench

    write_json(tmp_path / "json" / "action_sequence.json", SEQUENCE)
    bench = get_benchmark("mvbench")
    first, second = bench.load(bench.find_annotations(tmp_path))
    assert bench.assistant_prefix(second) == "Best option:("
    assert bench.assistant_prefix(second, thinking=True) is None
    hedge = "B) Sat on the bed. A) Opened the door."
    out = evaluate(
        "mvbench",
        tmp_path,
        {},
        predictions=[
            {"id": "action_sequence/1", "response": hedge},  # no field: the protocol's prefix
            {"id": "action_sequence/0", "response": hedge, "assistant_prefix": ""},  # a run without one
        ],
    )
    assert (
        out.results["action_sequence/1"].extracted == "B" and out.results["action_sequence/1"].accuracy == 1.0
    )
    assert out.results["action_sequence/1"].response == hedge  # stored as generated
    assert (
        out.results["action_sequence/0"].extracted is None
        and out.results["action_sequence/0"].accuracy == 0.0
    )

    class NoPrefix(MVBench):
        answer_prefix = None

    assert bench.prompt_version(first) != NoPrefix().prompt_version(first)
