"""Official readers against hand-read expectations: what each benchmark's released rule reads from the
same responses (options A-D, truth B). `None` means the official code finds no answer; "?" that it
draws a random option (scored wrong here). Each column cites the rule it follows (see the reader's
``source``); the robust reader's reading is in the last column for contrast."""

from __future__ import annotations

import pytest

from services.reward import score
from services.reward.official import get_official_reader, official_reader_names, score_official
from services.reward.sample import RewardSample

MC = {
    "problem_type": "multiple choice",
    "answer": "B",
    "options": ["A. red", "B. blue", "C. green", "D. gray"],
}
THINK = "<think>A seems likely... no, B</think>B"
RESPONSES = [
    "B", "(B)", "B. blue", "The answer is B", "blue", "b", "**B**", "B or C", "", THINK,
    "Answer: B", "B) blue", "I think it is B.", "C", "Based on the video, B.", " B", "(b)",
]  # fmt: skip
# Video-MME extract_characters_regex (thanku-all/parse_answer, the script its README links): answer
# phrases removed (case-sensitive; "Answer:" among them), then the first capital A-D anywhere
VIDEOMME = ["B", "B", "B", "B", None, None, "B", "B", None, "A", "B", "B", "B", "C", "B", "B", None]
# MVBench infer_mvbench + check_ans: "(" + first line, first space word lowercased, "(x" or "(x)…"
MVBENCH = ["B", "B", "B", None, None, "B", None, "B", None, None, None, "B", "I", "C", None, "B", "B"]
# MLVU check_ans: the character before the first ")", else the whole answer; compared case-sensitively
MLVU = [
    "B", "B", "B. blue", "The answer is B", "blue", "b", "**B**", "B or C", None, THINK,
    "Answer: B", "B", "I think it is B.", "C", "Based on the video, B.", " B", "b",
]  # fmt: skip
# LVBench / MotionBench polish_answer: before ")", after "(", first word's first character
POLISH = ["B", "B", "B", "T", "b", "b", "*", "B", None, "<", "A", "B", "I", "C", "B", "B", "b"]
# VSI-Bench fuzzy_matching: first space-separated word, trailing "." removed (compared in any case)
VSI = ["B", "(B)", "B", "THE", "BLUE", "B", "**B**", "B", None, "<THINK>A", "ANSWER:", "B)", "I", "C", "BASED", None,
       "(B)"]  # fmt: skip
# lmms-eval LongVideoBench parse_multi_choice_response: fixed phrase list, first capital A-E, else random
LVB = ["B", "B", "B", "B", "?", "?", "B", "B", "?", "A", "A", "B", "B", "C", "B", "B", "?"]
# Video-MME-v2 extract_characters_regex_v2: its phrase list (with "Answer:"), first capital A-H
VIDEOMME_V2 = ["B", "B", "B", "B", None, None, "B", "B", None, "A", "B", "B", "B", "C", "B", "B", None]
# Video-Holmes evaluate.py: "X ", "X:" or "[X" for A-F in letter order, else any A-F in letter order
HOLMES = ["B", "B", "B", "B", None, None, "B", "B", None, "A", "A", "B", "B", "C", "B", "B", None]
# lmms-eval MINERVA _extract_choice_letter: last "answer/option is|: X", else the last capital A-E
MINERVA = ["B", "B", "B", "B", "?", "?", "B", "C", "?", "B", "B", "B", "B", "C", "B", "B", "?"]
# TempCompass eval_multi-choice.py rules: the full answer, a bare letter, "X." or "X)" at the start
TEMPCOMPASS = [
    "B", None, "B", None, None, None, None, None, None, None, None, "B", None, "C", None, "B", None,
]  # fmt: skip
# Video-MMMU parse_multi_choice_response: "X." / "X:", "(X)", "X ", option text; the last written
VIDEOMMMU = ["B", "B", "B", "B", None, None, None, "C", None, "A", "B", None, "B", "C", "B", "B", None]
# EasyVideoR1 extract_answer (multiple choice): tags, "answer is X", after </think>, last lines
VIDEO_R1 = ["B", "B", None, "B", None, "B", None, "C", None, "B", "B", None, "B", "C", "B", "B", None]
# MLVU test_bench.py (test split): stripped, before the first ")" stripped again
MLVU_TEST = [
    "B", "(B", "B. blue", "The answer is B", "blue", "b", "**B**", "B or C", None, THINK,
    "Answer: B", "B", "I think it is B.", "C", "Based on the video, B.", "B", "(b",
]  # fmt: skip
# the robust reader (training rewards): option text, lowercase letters, phrases; hedges read as nothing
ROBUST = ["B", "B", "B", "B", "B", "B", "B", None, None, "B", "B", "B", "B", "C", "B", "B", "B"]

COLUMNS = {
    "videomme": VIDEOMME,
    "mvbench": MVBENCH,
    "mlvu": MLVU,
    "lvbench": POLISH,
    "motionbench": POLISH,
    "vsibench_choice": VSI,
    "longvideobench": LVB,
    "videomme_v2": VIDEOMME_V2,
    "video_holmes": HOLMES,
    "minerva": MINERVA,
    "tempcompass_mc": TEMPCOMPASS,
    "videommmu": VIDEOMMMU,
    "video_r1": VIDEO_R1,
    "mlvu_test": MLVU_TEST,
}
CASES = [(name, r, col[i]) for name, col in COLUMNS.items() for i, r in enumerate(RESPONSES)]


@pytest.mark.parametrize(("reader", "response", "expected"), CASES)
def test_choice_readers(reader, response, expected):
    read = get_official_reader(reader).read(response, "", RewardSample.model_validate(MC))
    if expected == "?":
        assert read.value is None and read.random
    else:
        assert read.value == expected and not read.random
    result = score_official(reader, MC, response)
    # right exactly when the reader's value is the truth's letter as the official code compares it
    assert result.accuracy == (1.0 if expected == "B" else 0.0)
    assert result.readable == (expected not in (None, "?"))


@pytest.mark.parametrize(("response", "expected"), list(zip(RESPONSES, ROBUST, strict=True)))
def test_the_robust_reader_reads_more(response, expected):
    assert score(MC, response).extracted == expected


def test_videomme_variant_letters_and_concatenated_phrases():
    # videomathqa: letters A-E; both keep the released list, whose missing commas join two phrases, so
    # "The best option is E" keeps its "T…" (no capital A-E in "The best option is") and reads E
    five = {**MC, "options": [*MC["options"], "E. pink"], "answer": "E"}
    assert score_official("videomathqa", five, "The best option is E").accuracy == 1.0
    assert score_official("videomme", five, "E").readable is False
    # "Best option: C": the released list never removes "Best option:" alone, so its "B" is read
    assert score_official("videomme", MC, "Best option: C").extracted == "B"
    # the list Video-MME's README links removes "Answer:"; lmms-eval's VideoMathQA copy does not
    assert score_official("videomme", MC, "Answer: B").extracted == "B"
    assert score_official("videomathqa", MC, "Answer: B").extracted == "A"
    assert score_official("videomme", MC, "The correct option: C").extracted == "C"


@pytest.mark.parametrize(
    ("response", "expected"),
    [
        ("B.) blue", "B"),  # "(b.)" without its dot is "(b)": check_ans' substring test
        ("B), blue", "B"),  # "(b)," holds "(b)"
        ("B.), blue", None),  # "(b)," is no substring of "(b)", and "(b.)," does not hold "(b)"
        ("B.)</answer>", None),
    ],
)
def test_mvbench_dots_count_only_in_the_substring_test(response, expected):
    # video_chat2/mvbench.ipynb check_ans: pred_option.replace('.', '') in gt_option, or gt_option in
    # pred_option (the word as written)
    assert (
        get_official_reader("mvbench").read(response, "", RewardSample.model_validate(MC)).value == expected
    )


# OVO-Bench get_score: right when the truth's letter occurs anywhere (even "B" of "Based")
OVO = [1, 1, 1, 1, 0, 0, 1, 1, 0, 1, 1, 1, 1, 0, 1, 1, 0]


@pytest.mark.parametrize(("response", "right"), list(zip(RESPONSES, OVO, strict=True)))
def test_ovobench_letter_anywhere(response, right):
    assert score_official("ovobench_choice", MC, response).accuracy == right


@pytest.mark.parametrize(
    ("response", "count", "right"),
    [("3", 3, 1), ("They did it 3 times.", 3, 1), ("1, 2", 12, 1), ("three", 3, 0), ("3 or 4", 3, 0)],
)
def test_ovobench_count_joins_every_digit(response, count, right):
    sample = {"problem_type": "counting", "answer": count}
    assert score_official("ovobench_count", sample, response).accuracy == right


@pytest.mark.parametrize(
    ("response", "truth", "right"),
    [
        ("Y", "yes", 1),
        ("N", "no", 1),
        ("Yes.", "yes", 1),
        ("yes", "yes", 0),
        ("No, Yes", "yes", 1),
        ("y", "yes", 0),
    ],
)
def test_ovobench_yes_no(response, truth, right):
    sample = {"problem_type": "boolean", "answer": truth}
    assert score_official("ovobench_yes_no", sample, response).accuracy == right


@pytest.mark.parametrize(
    ("response", "right", "readable"),
    [("Yes", 1, True), ("yes, he is", 1, True), ("No.", 0, True), ("I think yes", 0, False), ("", 0, False)],
)
def test_tempcompass_yes_no_starts_with(response, right, readable):
    result = score_official("tempcompass_yes_no", {"problem_type": "boolean", "answer": "yes"}, response)
    assert (result.accuracy, result.readable) == (right, readable)


CAPTIONS = {
    "problem_type": "multiple choice",
    "answer": "B",
    "options": ["A. A man dunks.", "B. A man dribbles."],
    "caption_question": "Which caption matches the video better?\nCaption A: A man dunks.\nCaption B: A man dribbles.",
    "caption_answer": "Caption B: A man dribbles.",
}


@pytest.mark.parametrize(
    ("response", "right", "readable"),
    [
        ("Caption B: A man dribbles.", 1, True),  # the option line, equal to the answer
        ("A man dribbles.", 1, True),  # its sentence = answer.split(": ")[1]
        ("(B) A man dribbles.", 1, True),  # the text after ") " is the sentence
        ("Caption B", 1, True),  # its label = answer.split(":")[0]
        ("Caption B.", 1, True),  # dots removed
        ("B", 1, True),  # the bare label = answer.split(": ")[0].split()[1]
        ("B.", 1, True),
        (" B </s>", 1, True),  # "</s>" removed, stripped
        ("Caption A", 0, True),
        ("A", 0, True),
        ("A man dunks.", 0, True),
        ("b", 0, False),  # no rule matches: ChatGPT's, here unreadable
        ("The answer is Caption B.", 0, False),
        ("Caption B: A man dribbles", 0, False),  # no final dot: neither the line nor its sentence
        ("**B**", 0, False),
        ("B) A man", 0, False),
        ("", 0, False),
    ],
)
def test_tempcompass_caption_matching_eval_rule(response, right, readable):
    # llyx97/TempCompass eval_caption_matching.py eval_rule (with --disable_llm)
    result = score_official("tempcompass_caption", CAPTIONS, response)
    assert (result.accuracy, result.readable) == (right, readable)


def test_tempcompass_caption_matching_numbered_options():
    sample = {**CAPTIONS, "caption_question": "Which option?\nOption 1: up\nOption 2: down",
              "caption_answer": "Option 2: down", "options": ["A. up", "B. down"]}  # fmt: skip
    assert [
        score_official("tempcompass_caption", sample, r).accuracy for r in ("2", "Option 2", "down", "1")
    ] == [1, 1, 1, 0]
    with pytest.raises(ValueError, match="caption_question"):
        score_official("tempcompass_caption", {**MC}, "B")


VSI_NA = {"problem_type": "regression", "answer": "4"}


@pytest.mark.parametrize(
    ("response", "accuracy", "readable"),
    [
        ("4", 1.0, True),
        ("4.", 1.0, True),  # trailing dot stripped
        ("4 tables", 1.0, True),  # first word
        ("4.0", 1.0, True),
        ("3", 0.6, True),  # error 0.25 ≤ 1-θ for θ = 0.50 … 0.75: 6 of 10 thresholds
        ("3.8", 1.0, True),  # error 0.05 ≤ 1-θ up to θ = 0.95: all 10
        ("four", 0.0, False),  # no float
        ("about 4", 0.0, False),
        ("4m", 0.0, False),
        ("**4**", 0.0, False),
        ("", 0.0, False),
        ("<think>count</think>4", 0.0, False),
    ],
)
def test_vsibench_numbers(response, accuracy, readable):
    result = score_official("vsibench_number", VSI_NA, response)
    assert (result.accuracy, result.readable) == (pytest.approx(accuracy), readable)


@pytest.mark.parametrize(
    ("truth", "response", "official", "robust"),
    [
        # 1 - np.linspace(.5, .95, 10) in floats: 0.5, 0.44999999999999996, 0.4, 0.35, 0.30000000000000004,
        # 0.25, 0.19999999999999996, 0.15000000000000002, 0.10000000000000009, 0.050000000000000044
        ("5", "4", 0.6, 0.7),  # error 0.2: the script's float 1 - 0.8 is below it, so θ = 0.8 fails
        ("5", "6", 0.6, 0.7),
        ("10", "8", 0.6, 0.7),
        ("10", "9", 0.9, 0.9),  # error 0.1 ≤ 0.10000000000000009: θ = 0.9 passes in both
        ("4", "3", 0.6, 0.6),  # error 0.25 ≤ 0.25
    ],
)
def test_vsibench_mra_compares_in_floats_as_the_script(truth, response, official, robust):
    # thinking-in-space vsibench/utils.py mean_relative_accuracy: abs(pred - target) / target <= 1 - conf_intervs
    sample = {"problem_type": "regression", "answer": truth}
    assert score_official("vsibench_number", sample, response).accuracy == pytest.approx(official)
    assert score(sample, response).accuracy == pytest.approx(robust)


TG = {"problem_type": "temporal grounding", "answer": [4.0, 10.0]}


@pytest.mark.parametrize(
    ("response", "interval"),
    [
        ("The event happens in the 4.0 - 10.0 seconds.", [4.0, 10.0]),
        ("Start time: 4.2 seconds\nEnd time: 9.8 seconds", [4.2, 9.8]),  # each line's first number
        ("Starting time: 4\nEnding time: 10", [4.0, 10.0]),
        ("The event happens in the 10 - 4 seconds.", [4.0, 10.0]),  # swapped
        ("from 4 to 10 seconds", [4.0, 10.0]),  # "to" becomes "-"
        ("3.0 - 7.5 seconds, or 10 - 12 seconds", [3.0, 7.5]),  # the first
        ("00:04 - 00:10", [4.0, 10.0]),  # clock range
        ("4s - 10s", [4.0, 10.0]),  # the last rule: numbers with "s"
        # one sentence holding both times: only its first number counts, so no pair (lmms-eval and
        # TimeChat alike); the robust reader reads these
        ("The start time for this event is 0 seconds, and the end time is 12 seconds.", None),
        ("start: 3.0s, end: 7.5s", None),
        ("[4.0, 10.0]", None),  # no range dash, no keyword: one number per sentence
        ("I cannot tell.", None),
        ("", None),
    ],
)
def test_charades_extract_time(response, interval):
    result = score_official("charades_sta", TG, response)
    assert result.extracted == interval
    if interval is None:
        assert result.accuracy == 0.0 and not result.readable


def test_official_iou_is_overlap_over_the_joint_span():
    # [4.2, 9.8] against [4, 10]: overlap 5.6 over the span 6
    assert score_official("charades_sta", TG, "Start time: 4.2\nEnd time: 9.8").accuracy == pytest.approx(
        5.6 / 6
    )


def test_every_reader_names_its_source():
    for name in official_reader_names():
        reader = get_official_reader(name)
        assert reader.source.count(" · ") >= 2 and reader.rule, name
    with pytest.raises(KeyError, match="unknown official reader"):
        get_official_reader("nope")


# StreamForest ODV-Bench mcq_acc: "X. text" → X, else punctuation out, lowercased, first standalone a-e
ODV = ["B", "B", "B", "B", "blue", "B", "B", "B", None, "A", "B", "B", "B", "C", "B", "B", "B"]


@pytest.mark.parametrize(("response", "expected"), list(zip(RESPONSES, ODV, strict=True)))
def test_odvbench_mcq_acc(response, expected):
    assert score_official("odvbench", MC, response).extracted == expected


def test_odvbench_reads_the_article_a_as_a_letter():
    assert score_official("odvbench", MC, "It is a blue car, B").extracted == "A"


@pytest.mark.parametrize(
    ("response", "right"),
    [
        ("<think>…</think><answer>B</answer>", 1.0),
        ("<answer>Therefore the final answer is: B</answer>", 1.0),
        ("<answer> B </answer>", 1.0),
        ("B", 1.0),  # no tags: the whole reply
        ("<answer>B.</answer>", 0.0),
        ("<answer>(B)</answer>", 0.0),
        ("<answer>\nB\n</answer>", 0.0),  # the pattern does not cross lines: the whole reply ≠ "B"
        ("The answer is B", 0.0),
    ],
)
def test_longvideo_reason_exact_answer(response, right):
    assert score_official("longvideo_reason", MC, response).accuracy == right
