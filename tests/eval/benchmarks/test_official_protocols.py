"""Each benchmark's official protocol end to end: its official file format, 17 responses that tell the
rules apart, and headline figures computed by hand from the official reader and aggregation (the
per-response readings, with their citations, are in tests/reward/official/test_readers.py).

The responses (options A-D, truth B) and how many each official rule gets right:

    B · (B) · B. blue · The answer is B · blue · b · **B** · B or C · "" · <think>…</think>B ·
    Answer: B · B) blue · I think it is B. · C · Based on the video, B. · " B" · (b)
"""

from __future__ import annotations

import pytest

from tests.eval.conftest import write_json, write_jsonl, write_parquet
from tests.reward.official.test_readers import RESPONSES

N = len(RESPONSES)  # 17
TEXTS = ["red", "blue", "green", "gray"]
LETTERED = [f"{chr(65 + i)}. {t}" for i, t in enumerate(TEXTS)]


def by_index(prefix: str) -> dict[str, str]:
    return {f"{prefix}{i}": r for i, r in enumerate(RESPONSES)}


def official_right(out) -> int:
    return sum(int(r.accuracy == 1.0) for r in out.results.values())


def test_videomme(tmp_path, evaluate):
    # thanku-all/parse_answer eval_your_results.py (the script BradyFU/Video-MME's README links):
    # extract_characters_regex, accuracy over the questions with a readable answer. Right: B, (B),
    # B. blue, The answer is B, **B**, B or C, Answer: B ("Answer:" is removed), B) blue,
    # I think it is B., Based on… ("B" of "Based"), " B" = 11; unreadable: blue, b, "", (b) = 4
    rows = [
        {"video_id": f"{i:03d}", "duration": "short" if i < 9 else "long", "domain": "Knowledge",
         "sub_category": "Astronomy", "url": "", "videoID": f"vid{i:08d}", "question_id": f"{i:03d}-1",
         "task_type": "Counting Problem", "question": "Which colour?", "options": LETTERED, "answer": "B"}
        for i in range(N)
    ]  # fmt: skip
    write_parquet(tmp_path / "videomme" / "test-00000-of-00001.parquet", rows)
    responses = {f"{i:03d}-1": r for i, r in enumerate(RESPONSES)}
    out = evaluate("videomme", tmp_path, responses)
    assert official_right(out) == 11 and out.summary.unreadable == 4
    assert out.summary.overall == pytest.approx(100 * 11 / 13)
    # short = items 0-8: right 0,1,2,3,6,7 of answered 0,1,2,3,6,7 (4, 5, 8 unreadable) → 100
    assert out.cell("duration", "short") == pytest.approx(100.0)
    # robust: all but "B or C" (a hedge), "" and "C" → 14 of 17, over every question
    assert out.summary.robust_overall == pytest.approx(100 * 14 / 17)
    assert out.summary.details["official_left_out"] == 4


def test_videomme_subtitles_shares_the_protocol(tmp_path, evaluate):
    from services.eval.benchmarks import get_benchmark

    assert get_benchmark("videomme_subtitles").official_readers == get_benchmark("videomme").official_readers
    assert get_benchmark("videomme_subtitles").official_denominator == "readable"


def test_mvbench(tmp_path, evaluate):
    # OpenGVLab/Ask-Anything video_chat2/mvbench.ipynb: "(" + the first line, check_ans on its first
    # word. Right: B, (B), B. blue, b, B or C, B) blue, " B", (b) = 8 of 17; unreadable: The answer…,
    # blue, **B**, "", <think>…, Answer: B, Based… = 7. One task: the mean of tasks is its accuracy.
    rows = [
        {"video": f"v{i}.mp4", "question": "Which colour?", "candidates": TEXTS, "answer": "blue"}
        for i in range(N)
    ]
    write_json(tmp_path / "json" / "action_antonym.json", rows)
    out = evaluate("mvbench", tmp_path, by_index("action_antonym/"))
    assert official_right(out) == 8 and out.summary.unreadable == 7
    assert out.summary.overall == pytest.approx(100 * 8 / 17)
    assert out.summary.robust_overall > out.summary.overall


def test_mlvu(tmp_path, evaluate):
    # JUNJIE99/MLVU evaluation/multiple_choice_evaluation/choice_bench.py check_ans: the character
    # before the first ")" (else the whole answer) equal to "B". Right: B, (B), B) blue = 3 of 17;
    # M-Avg over the two tasks: plotQA items 0-8 (B, (B) → 2/9), needle items 9-16 (B) blue → 1/8)
    plot = [{"video": f"p{i}.mp4", "duration": 100, "question": "Which colour?", "candidates": TEXTS,
             "answer": "blue", "question_type": "plotQA"} for i in range(9)]  # fmt: skip
    needle = [{"video": f"n{i}.mp4", "duration": 100, "question": "Which colour?", "candidates": TEXTS,
               "answer": "blue", "question_type": "findNeedle"} for i in range(N - 9)]  # fmt: skip
    write_json(tmp_path / "json" / "1_plotQA.json", plot)
    write_json(tmp_path / "json" / "2_needle.json", needle)
    responses = {f"1_plotQA/{i}": r for i, r in enumerate(RESPONSES[:9])}
    responses |= {f"2_needle/{i}": r for i, r in enumerate(RESPONSES[9:])}
    out = evaluate("mlvu", tmp_path, responses)
    assert official_right(out) == 3 and out.summary.unreadable == 1  # only "" reads as nothing
    assert out.summary.overall == pytest.approx((100 * 2 / 9 + 100 * 1 / 8) / 2)


def test_mlvu_prompt_writes_a_newline_before_the_instruction(tmp_path):
    from services.eval.benchmarks import get_benchmark

    write_json(tmp_path / "json" / "1_plotQA.json", [{"video": "p.mp4", "duration": 1, "question": "Q?",
               "candidates": ["x", "y"], "answer": "x", "question_type": "plotQA"}])  # fmt: skip
    bench = get_benchmark("mlvu")
    (sample,) = bench.load(bench.find_annotations(tmp_path))
    # JUNJIE99/MLVU evaluation/models/videollava/choice_bench.py main (and videochat2/choice_bench.py's
    # question_prompt, evaluation_test/test_bench.py main): qa_template's rstripped question and options,
    # then "\n" + "Only give the best option."; the system text and "Best Option: (" around it
    assert (
        bench.prompt(sample, "qwen2_5_vl")
        == "Question: Q?\nOptions:\n(A) x\n(B) y" + "\n" + "Only give the best option."
    )
    assert bench.system_prompt(sample) == (
        "Carefully watch this video and pay attention to every detail. Based on your observations, select "
        "the best option that accurately addresses the question."
    )
    assert bench.assistant_prefix(sample) == "Best Option: ("
    # the dev and test splits now send the same text
    assert bench.templates["prompt"] == bench.templates["test"]


def _lvbench_line(key: str, qas: list[dict]) -> dict:
    return {"key": key, "type": "cartoon", "video_info": {"duration_minutes": 1.0}, "qa": qas}


def test_lvbench(tmp_path, evaluate):
    # THUDM/LVBench lvbench/utils/answer_util.py polish_answer + metrics/compute_accuracy.py: the
    # first character of the first word (after "(", before ")"), case-sensitive; only questions with
    # an answer are counted. Right: B, (B), B. blue, B or C, B) blue, Based…, " B" = 7 of 17; an 18th
    # question without a prediction is left out of the denominator.
    question = "Which colour?\n(A) red\n(B) blue\n(C) green\n(D) gray"
    qas = [
        {"uid": str(i), "question": question, "answer": "B", "question_type": ["reasoning"]}
        for i in range(N + 1)
    ]
    write_jsonl(tmp_path / "video_info.meta.jsonl", [_lvbench_line("k", qas)])
    out = evaluate("lvbench", tmp_path, by_index("k/"))
    assert official_right(out) == 7 and out.summary.unreadable == 1  # "" only
    assert out.summary.overall == pytest.approx(100 * 7 / 17)
    assert out.cell("question_type", "reasoning") == pytest.approx(100 * 7 / 17)
    assert out.summary.missing == [f"k/{N}"] and out.summary.details["official_left_out"] == 1
    assert out.summary.robust_overall == pytest.approx(100 * 14 / 18)


def test_motionbench(tmp_path, evaluate):
    # THUDM/MotionBench motionbench/utils/answer_util.py polish_answer (LVBench's rule); answered only
    question = "Which colour?\nA. red\nB. blue\nC. green\nD. gray"
    qas = [{"uid": f"u{i}", "question": question, "answer": "B"} for i in range(N)]
    line = {
        "key": "k",
        "video_path": "k.mp4",
        "video_type": "MedVid",
        "question_type": "Camera Motion",
        "qa": qas,
    }
    write_jsonl(tmp_path / "video_info.meta.jsonl", [line])
    out = evaluate("motionbench", tmp_path, by_index("u"))
    assert official_right(out) == 7
    assert out.summary.overall == pytest.approx(100 * 7 / 17)


def test_vsibench(tmp_path, evaluate):
    # vision-x-nyu/thinking-in-space lmms_eval/tasks/vsibench/utils.py: fuzzy_matching (first word,
    # trailing "." removed), exact_match in any case; numbers float(first word) scored by MRA; the mean
    # of the task scores. MC (route_planning) right: B, B. blue, b, B or C = 4 of 17.
    mc = [{"id": i, "dataset": "scannet", "scene_name": "s", "question_type": "route_planning",
           "question": "Which turn?", "ground_truth": "B", "options": LETTERED} for i in range(N)]  # fmt: skip
    numbers = ["4", "4.", "4 tables", "four", "about 4", "3", "4m", "<think>4</think>4"]
    na = [{"id": 100 + i, "dataset": "scannet", "scene_name": "s", "question_type": "object_counting",
           "question": "How many?", "ground_truth": "4", "options": None} for i in range(len(numbers))]  # fmt: skip
    write_parquet(tmp_path / "test-00000-of-00001.parquet", mc + na)
    responses = {str(i): r for i, r in enumerate(RESPONSES)} | {
        str(100 + i): r for i, r in enumerate(numbers)
    }
    out = evaluate("vsibench", tmp_path, responses)
    route = 100 * 4 / 17
    # counting: 4, 4., 4 tables → 1; 3 → MRA 0.6 (error 0.25 passes θ = 0.50…0.75); the rest 0 → 3.6 / 8
    counting = 100 * 3.6 / 8
    assert out.cell("task", "route_planning") == pytest.approx(route)
    assert out.cell("task", "object_counting") == pytest.approx(counting)
    assert out.summary.overall == pytest.approx((route + counting) / 2)
    # unreadable: "" and " B" (MC; the first word of " B" is empty), four, about 4, 4m, <think>… (numbers)
    assert out.summary.unreadable == 6


def test_longvideobench(tmp_path, evaluate):
    # lmms-eval lmms_eval/tasks/longvideobench/utils.py parse_multi_choice_response (the authors'
    # parser; the release has no scorer): first capital A-E after the fixed phrase list, else a random
    # choice, here counted wrong. Right: B, (B), B. blue, The answer is B, **B**, B or C, B) blue,
    # I think it is B., Based…, " B" = 10; random: blue, b, "", (b) = 4.
    items = [{"video_id": f"v{i}", "question": "Which colour?", "candidates": TEXTS, "correct_choice": 1,
              "id": f"q{i}", "video_path": f"v{i}.mp4", "duration_group": 15, "question_category": "S2E",
              "topic_category": "KS", "level": "L1"} for i in range(N)]  # fmt: skip
    write_json(tmp_path / "lvb_val.json", items)
    out = evaluate("longvideobench", tmp_path, by_index("q"))
    assert official_right(out) == 10
    assert out.summary.overall == pytest.approx(100 * 10 / 17)
    assert len(out.summary.details["official_random_items"]) == 4 and out.summary.unreadable == 4


def test_videomathqa(tmp_path, evaluate):
    # lmms-eval lmms_eval/tasks/videomathqa/utils.py extract_characters_regex (Video-MME's first list,
    # A-E): B, (B), B. blue, The answer is B, **B**, B or C, B) blue, I think it is B., Based…, " B" = 10
    # ("Answer: B" reads the "A" of "Answer"); every question counts (videomathqa_mcq_aggregate_results)
    rows = [{"videoID": f"v{i}", "question_id": i, "category": "Counting", "question": "Which colour?",
             "options": [*LETTERED, "E. pink"], "answer": "B", "steps": "[]", "length": "short"}
            for i in range(N)]  # fmt: skip
    write_parquet(tmp_path / "mcq" / "test-00000-of-00001.parquet", rows)
    out = evaluate("videomathqa", tmp_path, by_index("mcq/"))
    assert official_right(out) == 10
    assert out.summary.overall == pytest.approx(100 * 10 / 17)


CHARADES = [
    ("The event happens in the 4.0 - 10.0 seconds.", 1.0),
    ("Start time: 4.2 seconds\nEnd time: 9.8 seconds", 5.6 / 6),
    ("Starting time: 4\nEnding time: 10", 1.0),
    ("The event happens in the 10 - 4 seconds.", 1.0),  # swapped
    ("from 4 to 10 seconds", 1.0),
    ("3.0 - 7.5 seconds, or 10 - 12 seconds", 3.5 / 7),  # the first: ∩ [4, 7.5], span [3, 10]
    ("00:04 - 00:10", 1.0),
    ("4s - 10s", 1.0),
    ("The start time for this event is 0 seconds, and the end time is 12 seconds.", 0.0),  # one number
    ("start: 3.0s, end: 7.5s", 0.0),  # one sentence: one number
    ("[4.0, 10.0]", 0.0),
    ("I cannot tell.", 0.0),
    ("", 0.0),
    ("<think>maybe 1 - 2</think>The event happens in 4 - 10 seconds.", 0.0),  # [1, 2] is first: ∩ 0
    ("The event happens in 0 - 30 seconds.", 6 / 30),
]


def test_charades_sta(tmp_path, evaluate):
    # lmms-eval lmms_eval/tasks/charades_sta/utils.py extract_time + _temporal_grounding_compute_metrics:
    # mIoU and R@k (IoU >= k) over every query
    lines = "".join(f"V{i:04d} 4.0 10.0##a person opens a door.\n" for i in range(len(CHARADES)))
    (tmp_path / "charades_sta_test.txt").write_text(lines)
    responses = {f"charades_sta_test/{i}": r for i, (r, _) in enumerate(CHARADES)}
    out = evaluate("charades_sta", tmp_path, responses)
    ious = [iou for _, iou in CHARADES]
    for i, iou in enumerate(ious):
        assert out.results[f"charades_sta_test/{i}"].accuracy == pytest.approx(iou), CHARADES[i][0]
    assert out.summary.overall == pytest.approx(100 * sum(ious) / len(ious))
    assert out.summary.metrics["R@0.5"] == pytest.approx(100 * sum(v >= 0.5 for v in ious) / len(ious))


def in_order(name: str, path, responses=RESPONSES, **options) -> dict[str, str]:
    """The responses given to the benchmark's samples in file order."""
    from services.eval.benchmarks import get_benchmark

    bench = get_benchmark(name, **options)
    samples = bench.load(bench.find_annotations(path))
    assert len(samples) == len(responses)
    return {s.id: r for s, r in zip(samples, responses, strict=True)}


def test_videomme_v2(tmp_path, evaluate):
    # MME-Benchmarks/Video-MME-v2 evaluation/test_video_mme_v2.py: extract_characters_regex_v2 and
    # cal_relevance over groups of 4 (16 responses, four relevance groups, truth B):
    # group 1: B, (B), B. blue, The answer is B → 4 right → 100
    # group 2: blue, b, **B**, B or C → 2 → 100·4/16 = 25
    # group 3: "", <think>…A…, Answer: B, B) blue → 2 → 25 (the script marks unreadable -1 and sums it,
    #          which would give 1; here unreadable is wrong, 0)
    # group 4: I think it is B., C, Based…, " B" → 3 → 100·9/16 = 56.25
    options = "\n".join(f"{c}. option {c}" for c in "ABCDEFGH")
    rows = [
        {"video_id": f"{g:03d}", "question_id": f"{g:03d}-{i}", "question": "Q?", "options": options, "answer": "B",
         "group_type": "relevance", "group_structure": "[1, 2, 3, 4]", "level": 1, "second_head": "p",
         "third_head": None, "url": ""}
        for g in range(4) for i in range(1, 5)
    ]  # fmt: skip
    write_parquet(tmp_path / "test.parquet", rows)
    out = evaluate("videomme_v2", tmp_path, in_order("videomme_v2", tmp_path, RESPONSES[:16]))
    assert out.summary.overall == pytest.approx((100 + 25 + 25 + 56.25) / 4)
    assert out.summary.metrics["accuracy"] == pytest.approx(100 * 11 / 16)


def test_video_holmes(tmp_path, evaluate):
    # TencentARC/Video-Holmes evaluate.py: 10 of 17 right (see HOLMES in test_readers.py)
    options = {"A": "red", "B": "blue", "C": "green", "D": "gray", "E": "pink", "F": "black"}
    items = [{"video ID": f"v{i}", "Question ID": i, "Question Type": "SR", "Question": "Which colour?",
              "Options": options, "Answer": "B", "Explanation": ""} for i in range(N)]  # fmt: skip
    write_json(tmp_path / "test_Video-Holmes.json", items)
    out = evaluate("video_holmes", tmp_path, in_order("video_holmes", tmp_path))
    assert official_right(out) == 10 and out.summary.overall == pytest.approx(100 * 10 / 17)


def test_minerva(tmp_path, evaluate):
    # lmms-eval minerva _extract_choice_letter (the release has no scorer): 11 right; 4 would be random
    items = [{"key": f"k{i}", "video_id": f"yt{i}", "question": "Which colour?", "answer": "blue",
              **{f"answer_choice_{j}": t for j, t in enumerate([*TEXTS, "pink"])}, "answer_id": 1,
              "reasoning": "", "question type": "Counting", "split": "s", "category": "c"}
             for i in range(N)]  # fmt: skip
    write_json(tmp_path / "minerva.json", items)
    out = evaluate("minerva", tmp_path, in_order("minerva", tmp_path))
    assert official_right(out) == 11 and out.summary.overall == pytest.approx(100 * 11 / 17)
    assert len(out.summary.details["official_random_items"]) == 4


def test_ovobench(tmp_path, evaluate):
    # JoeLeelyf/OVO-Bench utils/OVOBenchScore.py: the letter anywhere in the reply; 12 of 17 (EPM),
    # plus forward probes: REC digits joined, SSR "Y"/"N" or "Yes"/"No" anywhere
    items = [{"id": i, "task": "EPM", "video": f"v{i}.mp4", "realtime": 5.0, "question": "Which colour?",
              "answer": "blue", "options": TEXTS, "gt": 1} for i in range(N)]  # fmt: skip
    items.append(
        {
            "id": 100,
            "task": "REC",
            "video": "r.mp4",
            "activity": "jump",
            "start_times": [1],
            "end_times": [2],
            "test_info": [{"realtime": 3.0, "count": 12}, {"realtime": 4.0, "count": 3}],
        }
    )
    items.append({"id": 101, "task": "SSR", "video": "s.mp4", "tutorial": "t", "all_steps": ["cut"], "start_time": 0,
                  "end_time": 9, "test_info": [{"realtime": 1.0, "step": "cut", "type": 1},
                                               {"realtime": 2.0, "step": "cut", "type": 0}]})  # fmt: skip
    write_json(tmp_path / "ovo_bench_new.json", items)
    responses = {str(i): r for i, r in enumerate(RESPONSES)}
    responses |= {"100/0": "1, 2", "100/1": "three", "101/0": "Y", "101/1": "No, it is not."}
    out = evaluate("ovobench", tmp_path, responses)
    # backward: EPM 12/17; forward: REC 1/2, SSR 2/2 → (50 + 100) / 2 = 75; total: mean of the two
    assert out.cell("task", "EPM") == pytest.approx(100 * 12 / 17)
    assert out.summary.overall == pytest.approx((100 * 12 / 17 + 75.0) / 2)


def test_tempcompass(tmp_path, evaluate):
    # llyx97/TempCompass eval_multi-choice.py (--disable_llm): 4 of 17 right; eval_yes_no.py: 2 of 3
    question = "Which colour?\n" + "\n".join(LETTERED)
    mc = {"v1": {"action": [{"question": question, "answer": "B. blue"} for _ in range(N)]}}
    yes_no = {"v1": {"action": [{"question": "Is it blue?", "answer": "yes"} for _ in range(3)]}}
    write_json(tmp_path / "questions" / "multi-choice.json", mc)
    write_json(tmp_path / "questions" / "yes_no.json", yes_no)
    responses = in_order("tempcompass", tmp_path, [*RESPONSES, "Yes.", "yes, it is", "It is, yes."])
    out = evaluate("tempcompass", tmp_path, responses)
    assert out.cell("format", "multi-choice") == pytest.approx(100 * 4 / 17)
    assert out.cell("format", "yes_no") == pytest.approx(100 * 2 / 3)
    assert out.summary.overall == pytest.approx((100 * 4 / 17 + 100 * 2 / 3) / 2)


def test_tempcompass_caption_matching(tmp_path, evaluate):
    # llyx97/TempCompass eval_caption_matching.py eval_rule (--disable_llm): the 17 replies of
    # test_tempcompass_caption_matching_eval_rule in test_readers.py, 8 right; 6 match no rule
    from tests.reward.official.test_readers import CAPTIONS

    replies = [
        "Caption B: A man dribbles.", "A man dribbles.", "(B) A man dribbles.", "Caption B", "Caption B.", "B",
        "B.", " B </s>", "Caption A", "A", "A man dunks.", "b", "The answer is Caption B.",
        "Caption B: A man dribbles", "**B**", "B) A man", "",
    ]  # fmt: skip
    item = {"question": CAPTIONS["caption_question"], "answer": CAPTIONS["caption_answer"]}
    write_json(tmp_path / "questions" / "caption_matching.json", {"v1": {"direction": [item] * len(replies)}})
    out = evaluate("tempcompass", tmp_path, in_order("tempcompass", tmp_path, replies))
    assert out.cell("format", "caption_matching") == pytest.approx(100 * 8 / 17)
    assert out.summary.unreadable == 6
    assert out.summary.details["official_reader"] == ["tempcompass_caption"]


def test_videommmu(tmp_path, evaluate):
    # EvolvingLMMs-Lab/VideoMMMU lmms_eval/tasks/videommmu/utils.py parse_multi_choice_response: 8 right
    # (VIDEOMMMU in test_readers.py). The denominator is every multiple-choice item (EvolvingLMMs-Lab/
    # lmms-eval lmms_eval/tasks/videommmu/utils.py: videommmu_process_results parses every reply, the
    # empty one included, to a letter or "No Answer Found.", so videommmu_aggregate_results' "API Error"
    # filter drops none): 8 of 17, the unreadable replies and "" wrong.
    track = {str(i): {"id": f"dev_Art_{i}", "link_selected": "", "question": "Which colour?", "options": TEXTS,
                      "answer": "B"} for i in range(N)}  # fmt: skip
    write_json(tmp_path / "data" / "perception_video.json", {"Perception": track})
    out = evaluate("videommmu", tmp_path, in_order("videommmu", tmp_path))
    assert official_right(out) == 8 and out.summary.overall == pytest.approx(100 * 8 / 17)
    # unreadable: blue, b, **B**, "", B) blue, (b)
    assert out.summary.details["official_left_out"] == 0 and out.summary.unreadable == 6
    # the robust reader keeps every item: 14 of 17 (ROBUST in test_readers.py)
    assert out.summary.robust_overall == pytest.approx(100 * 14 / 17)


def test_videommmu_divides_by_every_item(tmp_path, evaluate):
    # Seven items, as lmms-eval's videommmu_process_results + videommmu_aggregate_results count them:
    #   Perception (multiple choice, truth B):
    #     p0 "B"                          right
    #     p1 an unreadable reasoning trace  "No Answer Found." → wrong, counted
    #     p2 ""                           "No Answer Found." → wrong, counted
    #     p3 no prediction                 wrong, counted (the official run answers every question)
    #   Adaptation (open, truth 12.5):
    #     a0 "12.5"                       right
    #     a1 ""                           parse_open_response → "API Error": left out
    #     a2 no prediction                 wrong, counted
    # official: 2 right of 6 counted = 33.33 (Perception 1/4 = 25, Adaptation 1/2 = 50); left out: a1.
    # Before: 2 of 4 (p2, p3 and a2 left out, a1 counted) = 50.
    # robust: every item, 2 right of 7 (the trace's answer is after </think>: nothing) = 28.57.
    mc = {"question": "Which colour?", "options": TEXTS, "answer": "B"}
    write_json(tmp_path / "data" / "perception_video.json", {"Perception": {
        str(i): {"id": f"dev_Art_{i}", **mc} for i in range(4)}})  # fmt: skip
    write_json(tmp_path / "data" / "adaptation_video.json", {"Adaptation": {
        str(i): {"id": f"test_Physics_{i}", "question": "<image 1> What is the speed in m/s?", "options": [],
                 "answer": "12.5", "question_type": "open"} for i in range(3)}})  # fmt: skip
    responses = {
        "Perception/dev_Art_0": "B",
        "Perception/dev_Art_1": "<think>Let me look at the colours on screen.</think>",
        "Perception/dev_Art_2": "",
        "Adaptation/test_Physics_0": "12.5",
        "Adaptation/test_Physics_1": "",
    }
    out = evaluate("videommmu", tmp_path, responses)
    assert out.results["Perception/dev_Art_3"].missing and out.results["Adaptation/test_Physics_2"].missing
    assert out.summary.overall == pytest.approx(100 * 2 / 6)
    assert out.cell("track", "Perception") == pytest.approx(100 * 1 / 4)
    assert out.cell("track", "Adaptation") == pytest.approx(100 * 1 / 2)
    assert out.summary.details["official_left_out"] == 1
    assert out.summary.robust_overall == pytest.approx(100 * 2 / 7)
    assert out.summary.unreadable == 2  # p1 and p2, read by the official reader


def test_odvbench(tmp_path, evaluate):
    # MCG-NJU/StreamForest lmms_eval/tasks/odvbench/utils.py mcq_acc: 13 right (ODV in test_readers.py:
    # all but "blue", "", the thinking trace's "A" and "C"); odvbench_aggregate_results counts only
    # replies that are not "": 13 of 16
    rows = [{"video": f"s{i}.mp4", "question": "Which colour?", "candidates": TEXTS, "answer": "blue",
             "start": 0.0, "end": 5.0, "task": "single_static", "subtask": "light"} for i in range(N)]  # fmt: skip
    write_json(tmp_path / "targeting_single_static_objects_v4.json", rows)
    out = evaluate("odvbench", tmp_path, in_order("odvbench", tmp_path))
    assert official_right(out) == 13 and out.summary.overall == pytest.approx(100 * 13 / 16)
    assert out.summary.details["official_left_out"] == 1


LONG_REASON = [
    ("<think>She waved.</think> <answer>B</answer>", 1),
    ("<answer>Therefore the final answer is: B</answer>", 1),
    ("<answer> B </answer>", 1),
    ("B", 1),
    ("<answer>B.</answer>", 0),
    ("<answer>(B)</answer>", 0),
    ("<answer>\nB\n</answer>", 0),
    ("The answer is B", 0),
    ("<answer>b</answer>", 0),
    ("<answer>B) saw a friend</answer>", 0),
    ("**B**", 0),
    ("", 0),
    ("<answer>C</answer>", 0),
    ("<think>B</think><answer>C</answer>", 0),
    ("<answer>B</answer><answer>C</answer>", 1),  # the first block
]


def test_longvideo_reason(tmp_path, evaluate):
    # NVlabs/Long-RL eval/eval.py accuracy_reward's string match: 5 of 15
    line = {
        "videos": "longvila_videos/a.mp4",
        "problem": "Why?\nA. keys\nB. a friend\nC. rain\nD. call",
        "answer": "B",
    }
    write_jsonl(tmp_path / "test.jsonl", [line] * len(LONG_REASON))
    out = evaluate(
        "longvideo_reason", tmp_path, in_order("longvideo_reason", tmp_path, [r for r, _ in LONG_REASON])
    )
    assert [out.results[s.id].accuracy for s in out.samples] == [right for _, right in LONG_REASON]
    assert out.summary.overall == pytest.approx(100 * 5 / 15)


def test_every_benchmark_names_its_official_protocol_in_the_docs():
    from pathlib import Path

    from services.eval.benchmarks import benchmark_names, get_benchmark
    from services.reward.official import get_official_reader

    docs = Path(__file__).resolve().parents[3].joinpath("docs", "evaluation.md").read_text(encoding="utf-8")
    for name in benchmark_names():
        bench = get_benchmark(name)
        assert bench.official_source.count(" · ") >= 2, name  # repo · path · function
        assert bench.official_source in docs, f"docs/evaluation.md lacks {name}'s official protocol"
        for reader in bench.official_readers.values():
            get_official_reader(reader)  # every named reader exists


def test_video_r1(tmp_path, evaluate):
    # cyuQ1n/EasyVideoR1 extract_answer on multiple choice: 9 of 17 (VIDEO_R1 in test_readers.py)
    rows = [{"problem_id": f"mc{i}", "problem": "Which colour?", "data_type": "video", "problem_type": "multiple choice",
             "options": [f"{chr(65 + j)}: {t}" for j, t in enumerate(TEXTS)], "solution": "<answer>B</answer>",
             "path": f"v{i}.mp4", "data_source": "videomme"} for i in range(N)]  # fmt: skip
    write_json(tmp_path / "eval.json", rows)
    out = evaluate("video_r1", tmp_path, in_order("video_r1", tmp_path))
    assert official_right(out) == 9 and out.summary.overall == pytest.approx(100 * 9 / 17)


def test_summary_table_shows_both_readers():
    from services.eval.benchmarks import Summary
    from services.eval.outputs import markdown_table

    table = markdown_table([Summary(benchmark="lvbench", metric="accuracy", overall=40.0, count=5,
                                    robust_overall=60.0, unreadable=2)])  # fmt: skip
    assert "| overall | robust reader | unreadable |" in table
    assert "| lvbench | accuracy | 40.00 | 60.00 | 2 | 5 |" in table


def test_mlvu_test_split(tmp_path, evaluate):
    # JUNJIE99/MLVU evaluation_test/test_bench.py: "\nOnly give the best option." (a newline, as the dev
    # scripts write it) and the submitted option is the stripped text before ")": right for B, B) blue,
    # " B" = 3
    from services.eval.benchmarks import get_benchmark

    items = [{"question_id": f"AR_{i}", "question_type": "anomaly_reco", "video": f"a{i}.mp4", "question": "Q?",
              "candidates": [*TEXTS, "pink", "black"], "answer": "blue"} for i in range(N)]  # fmt: skip
    write_json(tmp_path / "test_question.json", items)
    out = evaluate("mlvu", tmp_path / "test_question.json", {f"AR_{i}": r for i, r in enumerate(RESPONSES)})
    assert official_right(out) == 3 and out.summary.overall == pytest.approx(100 * 3 / 17)
    bench = get_benchmark("mlvu")
    assert bench.prompt(out.samples[0], "qwen2_5_vl").endswith("(F) black\nOnly give the best option.")


# Benchmarks whose official evaluation has no text rule to re-implement: the robust reader reads their
# answers under both protocols (ROBUST in test_readers.py: 14 of 17; a hedge, "" and "C" are wrong),
# and the summary says so.
def _livesports(tmp_path):
    items = [{"video_id": "vid", "question_id": f"q{i}", "q_type": "Who", "OCR": 0, "question": "Which colour?",
              "options": LETTERED, "answer": "B", "begin": 0.0, "end": 10.0} for i in range(N)]  # fmt: skip
    write_json(tmp_path / "LiveSports-3K-QA.json", items)


def _mmvu(tmp_path):
    items = [{"id": f"validation_{i}", "video": "https://x/videos/Art/1.mp4", "youtube_url": "",
              "question_type": "multiple-choice", "metadata": {"subject": "Art"}, "question": "Which colour?",
              "choices": dict(zip("ABCD", TEXTS, strict=True)), "answer": "B"} for i in range(N)]  # fmt: skip
    write_json(tmp_path / "validation.json", items)


def _vcrbench(tmp_path):
    question = "Which colour?\n" + "\n".join(LETTERED)
    items = [{"id": i, "video_path": f"video/{i}.mp4", "duration": 45, "dimension": "Visual Perception",
              "question": question, "multiple-choice": True, "choices": dict(zip("ABCD", TEXTS, strict=True)),
              "answer": "B", "reasoning": []} for i in range(N)]  # fmt: skip
    write_json(tmp_path / "meta_info_video.json", items)


@pytest.mark.parametrize(
    ("name", "write"), [("livesports3k", _livesports), ("mmvu", _mmvu), ("vcrbench", _vcrbench)]
)
def test_judged_or_likelihood_benchmarks_read_robustly(tmp_path, evaluate, name, write):
    write(tmp_path)
    out = evaluate(name, tmp_path, in_order(name, tmp_path))
    assert out.summary.overall == out.summary.robust_overall == pytest.approx(100 * 14 / 17)
    assert out.summary.details["official_reader"] == [] and out.summary.unreadable == 0
    assert any("no official rule reader" in note for note in out.summary.notes)
