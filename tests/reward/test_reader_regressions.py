"""Reader regressions found by held-out cases (issue 36 §4), and hedges of the same kind.

1. A temporal interval written end first ([30, 10], "from 30 to 10 seconds") is an invalid answer, not the
   reversed valid one: commit 13ff270 swapped it, so it earned the full IoU of [10, 30].
2. An answer offering two or more intervals is a hedge and earns nothing, as several letters do: commit
   13ff270 took the first of several, so "[0, 20] or [20, 40]" earned the first one's IoU.
3. A full-width option letter ("Ｂ", U+FF22) is read as its ASCII letter through NFKC.

All three were fixed in e077df2 (each case here fails on its parent); the hedges of the same kind found
after it are pinned here too: two time or box keys in one JSON object, a JSON key given twice, a list of
intervals beside a prose one, a spatial-temporal time hedged in prose, a tracking frame given two boxes,
and a multiple-choice truth written full-width.

Then (sections 4–6): a fenced JSON answer was read from its fence alone, so text beside it offering another
interval or box went unread; segmentation read only its first box key and first points key; a second
value past the 32 places JSON is looked for went unseen; a tracking or spatial-temporal frame given a box
beside "boxes" kept the one under "boxes". Those tests fail on the readers before this change; the cases
in them that already read right (bare JSON beside bare JSON, one answer written twice) pin the same rule.

Project rule: every form a reader accepts has a test that a hedge written in that same form earns 0.
Each expected value is worked out by hand in the comment beside it.
"""

import json

import pytest

from services.reward import score
from services.reward.official import score_official

TRUTH = [10, 30]
TEMPORAL = {"problem_type": "temporal grounding", "answer": {"time": TRUTH}}

# Every form the temporal reader accepts, with "{s}" and "{e}" for the two ends in seconds.
INTERVAL_FORMS = {
    "json time": '{{"time": [{s}, {e}]}}',
    "json timestamps": '{{"timestamps": [{s}, {e}]}}',
    "json timestamp": '{{"timestamp": [{s}, {e}]}}',
    "json interval": '{{"interval": [{s}, {e}]}}',
    "json segment": '{{"segment": [{s}, {e}]}}',
    "json start/end": '{{"start": {s}, "end": {e}}}',
    "json start_time/end_time": '{{"start_time": {s}, "end_time": {e}}}',
    "json begin/end": '{{"begin": {s}, "end": {e}}}',
    "json strings": '{{"time": ["{s}", "{e}"]}}',
    "fenced json": '```json\n{{"time": [{s}, {e}]}}\n```',
    "bare list": "[{s}, {e}]",
    "from … to": "from {s} to {e} seconds",
    "between … and": "between {s} and {e} seconds",
    "dash": "{s} - {e} seconds",
    "en dash": "{s}–{e} s",
    "tilde": "{s} ~ {e} s",
    "to": "{s} to {e} seconds",
    "until": "{s} until {e}",
    "glued units": "{s}s-{e}s",
    "starts … ends": "starts at {s} seconds and ends at {e} seconds",
    "Start time / End time": "Start time: {s} seconds\nEnd time: {e} seconds",
    "Starting / Ending time": "Starting time: {s} seconds\nEnding time: {e} seconds",
    "the start time … the end time": "The start time for this event is {s} seconds, and the end time is {e} seconds.",
    "start: … end:": "start: {s}s, end: {e}s",
    "parentheses": "({s}, {e})",
    "bracketed units": "[{s}s, {e}s]",
}


def _clock(seconds: int) -> str:
    return f"00:{seconds:02d}"


def _hours(seconds: int) -> str:
    return f"0:00:{seconds:02d}"


# The same forms with clock times: "00:10 to 00:30" is 10 to 30 seconds.
CLOCK_FORMS = {"mm:ss to": ("{s} to {e}", _clock), "h:mm:ss dash": ("{s} - {e}", _hours)}


def _interval(form: str, start: int, end: int) -> str:
    if form in CLOCK_FORMS:
        text, clock = CLOCK_FORMS[form]
        return text.format(s=clock(start), e=clock(end))
    return INTERVAL_FORMS[form].format(s=start, e=end)


ALL_FORMS = [*INTERVAL_FORMS, *CLOCK_FORMS]


def _temporal(text: str) -> float:
    return score(TEMPORAL, f"<answer>{text}</answer>").accuracy


# --- 1. inverted intervals ----------------------------------------------------------------------------


@pytest.mark.parametrize("form", ALL_FORMS)
def test_each_interval_form_is_read_in_order(form):
    # [10, 30] is the truth: IoU 1; [20, 40] against [10, 30]: ∩ 10, ∪ 30 → 1/3
    assert _temporal(_interval(form, 10, 30)) == 1.0
    assert _temporal(_interval(form, 20, 40)) == pytest.approx(1 / 3)


@pytest.mark.parametrize("form", ALL_FORMS)
def test_an_interval_written_end_first_earns_nothing_in_each_form(form):
    # swapped, [30, 10] would be the truth itself (IoU 1); written end first it is no interval at all
    result = score(TEMPORAL, f"<answer>{_interval(form, 30, 10)}</answer>")
    assert (result.accuracy, result.extracted) == (0.0, None)


STVG_TRUTH = {"time": TRUTH, "boxes": {"10": [0, 0, 10, 10], "20": [0, 0, 10, 10]}}
STVG = {"problem_type": "spatial-temporal grounding", "answer": STVG_TRUTH}
RIGHT_BOXES = {"10": [0, 0, 10, 10], "20": [0, 0, 10, 10]}


def _stvg(answer: dict, after: str = "") -> float:
    return score(STVG, f"<answer>{json.dumps(answer)}{after}</answer>").accuracy


@pytest.mark.parametrize(
    ("in_order", "end_first"),
    [
        ({"time": [10, 30]}, {"time": [30, 10]}),
        ({"timestamps": [10, 30]}, {"timestamps": [30, 10]}),
        ({"start": 10, "end": 30}, {"start": 30, "end": 10}),
        ({"start_time": 10, "end_time": 30}, {"start_time": 30, "end_time": 10}),
        ({"begin": 10, "end": 30}, {"begin": 30, "end": 10}),
    ],
)
def test_spatial_temporal_grounding_scores_an_inverted_time_as_no_time(in_order, end_first):
    # both boxes right: 0.5·tIoU + 0.5·(1 + 1)/2; in order tIoU 1 → 1.0, written end first tIoU 0 → 0.5
    assert _stvg({**in_order, "boxes": RIGHT_BOXES}) == 1.0
    assert _stvg({**end_first, "boxes": RIGHT_BOXES}) == 0.5


# --- 2. several intervals are a hedge -----------------------------------------------------------------


@pytest.mark.parametrize("form", ALL_FORMS)
@pytest.mark.parametrize("joint", [" or ", "\n", ", ", " and ", "; "])
def test_two_intervals_in_one_form_earn_nothing(form, joint):
    # [0, 20] alone earns ∩ 10 / ∪ 30 = 1/3 and [10, 30] alone 1; offered together, either first: 0
    for first, second in (((0, 20), (20, 40)), ((10, 30), (40, 50)), ((40, 50), (10, 30))):
        hedge = f"{_interval(form, *first)}{joint}{_interval(form, *second)}"
        assert _temporal(hedge) == 0.0, hedge


@pytest.mark.parametrize(
    "hedge",
    [
        "[[10, 30], [40, 50]]",  # a list of two intervals
        "[[10, 30], [40, 50], [60, 70]]",  # of three
        '{"time": [[10, 30], [40, 50]]}',
        '[{"start": 10, "end": 30}, {"start": 40, "end": 50}]',
        '[{"start": 10, "end": 30}, {"start": 40, "end": 50}, {"start": 60, "end": 70}]',
        '{"time": [10, 30]} or from 40 to 50 seconds',  # two forms
        "from 40 to 50 seconds, i.e. [10, 30]",
        "[10, 30] or 00:40 to 00:50",
        # a list of intervals beside a prose one: the list is read as JSON and offers three more
        "[[0, 5], [40, 50], [60, 70]] or from 10 to 30 seconds",
        "```json\n[[0, 5], [40, 50], [60, 70]]\n```\nfrom 10 to 30 seconds",
        # one object naming two different intervals under two keys
        '{"time": [10, 30], "timestamps": [40, 50]}',
        '{"time": [10, 30], "start": 40, "end": 50}',
        '{"start": 10, "end": 30, "start_time": 40, "end_time": 50}',
        '{"segment": [40, 50], "interval": [10, 30]}',
        # one key given twice (json keeps the last, so the order would decide)
        '{"time": [40, 50], "time": [10, 30]}',
        '{"time": [10, 30], "time": [40, 50]}',
        '{"start": 40, "start": 10, "end": 30}',
    ],
)
def test_other_multi_interval_hedges_earn_nothing(hedge):
    assert _temporal(hedge) == 0.0


@pytest.mark.parametrize(
    "answer",
    [
        '{"time": [10, 30], "timestamps": [10, 30]}',  # two keys, one interval
        '{"time": [10, 30], "start": 10, "end": 30}',
        '{"time": [10, 30], "time": [10, 30]}',  # a key twice with the same interval
        '{"time": [10, 30]}, i.e. from 10 to 30 seconds',
    ],
)
def test_one_interval_written_several_ways_is_one_answer(answer):
    assert _temporal(answer) == 1.0


@pytest.mark.parametrize(
    "hedge",
    [
        {"time": [[10, 30], [40, 50]], "boxes": RIGHT_BOXES},
        {"time": [10, 30], "timestamps": [40, 50], "boxes": RIGHT_BOXES},
        {"time": [10, 30], "start": 40, "end": 50, "boxes": RIGHT_BOXES},
    ],
)
def test_spatial_temporal_grounding_scores_a_hedged_time_as_no_time(hedge):
    # boxes right, time hedged: 0.5·0 + 0.5·1 = 0.5
    assert _stvg(hedge) == 0.5


def test_spatial_temporal_grounding_reads_a_prose_interval_beside_its_json_as_a_hedge():
    answer = {"time": TRUTH, "boxes": RIGHT_BOXES}
    assert _stvg(answer) == 1.0
    assert _stvg(answer, ", i.e. from 10 to 30 seconds") == 1.0  # the same interval again
    assert _stvg(answer, " or from 40 to 50 seconds") == 0.5  # another one: time hedged, boxes 0.5
    assert _stvg(answer, " or [40, 50]") == 0.0  # a second JSON value: the whole answer is two answers


def test_two_spatial_temporal_answers_earn_nothing():
    right = json.dumps({"time": TRUTH, "boxes": RIGHT_BOXES})
    other = json.dumps({"time": [40, 50], "boxes": RIGHT_BOXES})
    assert score(STVG, f"<answer>{right} or {other}</answer>").accuracy == 0.0


# --- boxes: inverted and hedged, in every box form -----------------------------------------------------

BOX_TRUTH = [10, 10, 20, 20]
SPATIAL = {"problem_type": "spatial grounding", "answer": {"boxes": BOX_TRUTH}}
BOX_FORMS = {
    "bare": "{}",
    "boxes": '{{"boxes": {}}}',
    "bbox": '{{"bbox": {}}}',
    "bbox_2d": '{{"bbox_2d": {}}}',
    "box": '{{"box": {}}}',
    "box_2d": '{{"box_2d": {}}}',
    "qwen records": '[{{"bbox_2d": {}, "label": "cup"}}]',
    "fenced": "```json\n{}\n```",
}


def _box(form: str, box: list[int]) -> str:
    return BOX_FORMS[form].format(json.dumps(box))


def _spatial(text: str) -> float:
    return score(SPATIAL, f"<answer>{text}</answer>").accuracy


@pytest.mark.parametrize("form", BOX_FORMS)
def test_each_box_form_is_read_and_an_inverted_box_earns_nothing(form):
    assert _spatial(_box(form, BOX_TRUTH)) == 1.0
    # [15, 10, 25, 20] against [10, 10, 20, 20]: ∩ 50, ∪ 150 → 1/3
    assert _spatial(_box(form, [15, 10, 25, 20])) == pytest.approx(1 / 3)
    assert _spatial(_box(form, [20, 10, 10, 20])) == 0.0  # x2 < x1
    assert _spatial(_box(form, [10, 20, 20, 10])) == 0.0  # y2 < y1
    assert _spatial(_box(form, [20, 20, 10, 10])) == 0.0  # both


@pytest.mark.parametrize("form", BOX_FORMS)
@pytest.mark.parametrize("joint", [" or ", "\n", ", "])
def test_two_boxes_in_one_form_earn_nothing(form, joint):
    for first, second in ((BOX_TRUTH, [0, 0, 5, 5]), ([0, 0, 5, 5], BOX_TRUTH)):
        assert _spatial(f"{_box(form, first)}{joint}{_box(form, second)}") == 0.0


@pytest.mark.parametrize(
    "hedge",
    [
        '{"bbox_2d": [10, 10, 20, 20], "bbox": [0, 0, 5, 5]}',  # two box keys in one object
        '{"bbox": [0, 0, 5, 5], "bbox_2d": [10, 10, 20, 20]}',
        '{"box": [10, 10, 20, 20], "boxes": [[0, 0, 5, 5]]}',
        '{"bbox_2d": [0, 0, 5, 5], "bbox_2d": [10, 10, 20, 20]}',  # one key twice
        '{"bbox_2d": [[10, 10, 20, 20], [0, 0, 5, 5]]}',
        '{"bbox_2d": [10, 10, 20, 20], "bbox": [20, 20, 10, 10]}',  # with an inverted one
    ],
)
def test_other_box_hedges_earn_nothing(hedge):
    assert _spatial(hedge) == 0.0


def test_one_box_under_two_keys_is_one_answer():
    assert _spatial('{"bbox_2d": [10, 10, 20, 20], "bbox": [10, 10, 20, 20]}') == 1.0


TRACKING = {"problem_type": "tracking", "answer": {"boxes": {"0": [0, 0, 10, 10], "1": [0, 0, 10, 10]}}}
WRONG = [50, 50, 60, 60]


@pytest.mark.parametrize(
    "answer",
    [
        '{"0": [0, 0, 10, 10], "0.0": [50, 50, 60, 60], "1": [0, 0, 10, 10]}',  # "0" and "0.0": one frame
        '{"0.0": [50, 50, 60, 60], "0": [0, 0, 10, 10], "1": [0, 0, 10, 10]}',
        '{"0": [50, 50, 60, 60], "0": [0, 0, 10, 10], "1": [0, 0, 10, 10]}',  # one key twice
        '{"0": [0, 0, 10, 10], "0": [50, 50, 60, 60], "1": [0, 0, 10, 10]}',
        '{"0": [[0, 0, 10, 10], [50, 50, 60, 60]], "1": [0, 0, 10, 10]}',  # two boxes for one frame
        '{"0": [10, 10, 0, 0], "1": [0, 0, 10, 10]}',  # an inverted box: missing
        '[{"frame": 0, "bbox_2d": [50, 50, 60, 60]}, {"frame": 0, "bbox_2d": [0, 0, 10, 10]},'
        ' {"frame": 1, "bbox_2d": [0, 0, 10, 10]}]',  # two records for frame 0
        '[{"frame": 0, "bbox_2d": [0, 0, 10, 10]}, {"frame": 0, "bbox_2d": [50, 50, 60, 60]},'
        ' {"frame": 1, "bbox_2d": [0, 0, 10, 10]}]',
        '{"boxes": {"0": [0, 0, 10, 10], "0.0": [10, 10, 0, 0], "1": [0, 0, 10, 10]}}',  # with an invalid one
    ],
)
def test_a_tracking_frame_given_two_boxes_counts_as_missing(answer):
    # frame 0 hedged (scored 0), frame 1 right (1): (0 + 1) / 2
    assert score(TRACKING, f"<answer>{answer}</answer>").accuracy == 0.5


def test_a_tracking_frame_given_the_same_box_twice_is_one_answer():
    both = '{"0": [0, 0, 10, 10], "0.0": [0, 0, 10.0, 10], "1": [0, 0, 10, 10]}'
    assert score(TRACKING, f"<answer>{both}</answer>").accuracy == 1.0


# --- 3. full-width letters ----------------------------------------------------------------------------

MC = {
    "problem_type": "multiple choice",
    "answer": "B",
    "options": ["A. red", "B. blue", "C. green", "D. pink"],
}
FULL = {"A": "\uff21", "B": "\uff22"}  # Ａ, Ｂ
# Full-width forms of what the choice reader accepts; each reads B alone.
FULL_WIDTH_FORMS = {
    "letter": "{}",
    "parentheses": "\uff08{}\uff09",  # （Ｂ）
    "full stop": "{}\uff0e",  # Ｂ．
    "right parenthesis": "{}\uff09",  # Ｂ）
    "colon": "{}\uff1a",  # Ｂ：
    "brackets": "\uff3b{}\uff3d",  # ［Ｂ］
    "bold": "\uff0a\uff0a{}\uff0a\uff0a",  # ＊＊Ｂ＊＊
    "after a phrase": "The answer is {}",
    "lettered option": "{}\uff0e {}",  # Ｂ． ｂｌｕｅ
}
FULL_TEXT = {"A": "\uff52\uff45\uff44", "B": "\uff42\uff4c\uff55\uff45"}  # ｒｅｄ, ｂｌｕｅ


def _full(form: str, letter: str) -> str:
    if form == "lettered option":
        return FULL_WIDTH_FORMS[form].format(FULL[letter], FULL_TEXT[letter])
    return FULL_WIDTH_FORMS[form].format(FULL[letter])


@pytest.mark.parametrize("form", FULL_WIDTH_FORMS)
def test_a_full_width_letter_is_read_as_its_ascii_letter(form):
    result = score(MC, f"<answer>{_full(form, 'B')}</answer>")
    assert (result.accuracy, result.extracted) == (1.0, "B")
    assert score({**MC, "answer": "C"}, f"<answer>{_full(form, 'B')}</answer>").accuracy == 0.0


@pytest.mark.parametrize("form", FULL_WIDTH_FORMS)
@pytest.mark.parametrize("joint", [" or ", "\u3001", "\uff0c", " and "])  # "、", "，"
def test_a_hedge_in_each_full_width_form_earns_nothing(form, joint):
    right, wrong = _full(form, "B"), _full(form, "A")
    hedges = [f"{right}{joint}{wrong}", f"{wrong}{joint}{right}"]
    if form == "after a phrase":  # the phrase once, then both letters
        hedges = [
            f"The answer is {FULL['B']}{joint}{FULL['A']}",
            f"The answer is {FULL['A']}{joint}{FULL['B']}",
        ]
    for hedge in hedges:
        assert score(MC, f"<answer>{hedge}</answer>").accuracy == 0.0, hedge


def test_full_width_option_text_is_read_and_two_texts_are_a_hedge():
    assert score(MC, f"<answer>{FULL_TEXT['B']}</answer>").accuracy == 1.0
    assert score(MC, f"<answer>{FULL_TEXT['B']} or {FULL_TEXT['A']}</answer>").accuracy == 0.0


FULL_WIDTH_TRUTHS = ["\uff22", "\uff08\uff22\uff09", "\uff22\uff0e blue"]  # Ｂ, （Ｂ）, Ｂ． blue


@pytest.mark.parametrize("truth", FULL_WIDTH_TRUTHS)
def test_a_truth_written_full_width_is_its_ascii_letter(truth):
    assert score({**MC, "answer": truth}, "<answer>B</answer>").accuracy == 1.0
    assert score({**MC, "answer": truth}, "<answer>A</answer>").accuracy == 0.0


@pytest.mark.parametrize(
    ("reader", "ascii_reads"),
    [("videomme", "B"), ("longvideobench", "B"), ("mlvu", "B"), ("lvbench", "B"), ("video_r1", "B")],
)
def test_official_readers_keep_their_released_rule_for_full_width_letters(reader, ascii_reads):
    # The official readers re-implement each benchmark's released code, none of which normalises text
    # (Video-MME's re.search("[ABCD]") finds no "Ｂ"): a full-width letter is not read as B there, or the
    # headline would no longer be comparable with published figures. The robust reader reads it.
    sample = {**MC, "answer": "B"}
    assert score_official(reader, sample, "B").extracted == ascii_reads
    full = score_official(reader, sample, "\uff22")
    assert (full.accuracy, full.extracted) != (1.0, "B")


# --- 4. text beside a JSON answer ---------------------------------------------------------------------
# A fenced JSON answer was read from its fence alone, so '```json {"time": [10, 20]}``` or maybe [30, 40]'
# earned [10, 20]'s IoU: the text beside it offered a second answer. JSON is read wherever it is, fenced
# or not, and the text around it is read for intervals (temporal) and boxes (the box types) as well: any
# other value is a hedge, the same value again is one answer.

JSON_INTERVAL_FORMS = [form for form in INTERVAL_FORMS if form.startswith(("json", "fenced", "bare"))]


@pytest.mark.parametrize("answer_form", JSON_INTERVAL_FORMS)
@pytest.mark.parametrize("other_form", ALL_FORMS)
@pytest.mark.parametrize("joint", [" or maybe ", "\n"])
def test_another_interval_beside_a_json_interval_is_a_hedge(answer_form, other_form, joint):
    answer = _interval(answer_form, 10, 30)
    assert _temporal(answer) == 1.0
    # [40, 50] beside it, after or before: a second answer, 0 (alone [40, 50] would earn 0 too, so also
    # [20, 40], which alone earns ∩ 10 / ∪ 30 = 1/3: the hedge must not earn the better of the two)
    for other in (_interval(other_form, 40, 50), _interval(other_form, 20, 40)):
        assert _temporal(f"{answer}{joint}{other}") == 0.0
        assert _temporal(f"{other}{joint}{answer}") == 0.0
    # the same interval again, in any form: one answer, IoU 1
    assert _temporal(f"{answer}{joint}{_interval(other_form, 10, 30)}") == 1.0


def test_the_brief_s_fenced_hedge_earns_nothing():
    sample = {"problem_type": "temporal grounding", "answer": {"time": [10, 20]}}
    hedge = '```json {"time": [10, 20]}``` or maybe [30, 40]'
    assert score(sample, f"<answer>{hedge}</answer>").accuracy == 0.0
    assert score(sample, '<answer>```json {"time": [10, 20]}```</answer>').accuracy == 1.0


# A box written in prose, (x1, y1, x2, y2), is no answer on its own (the box types read JSON), but beside a
# JSON answer it offers a second box just as a JSON one does.
PROSE_BOX = "({}, {}, {}, {})"


@pytest.mark.parametrize("form", BOX_FORMS)
@pytest.mark.parametrize("other", [*BOX_FORMS, "prose"])
def test_another_box_beside_a_box_answer_is_a_hedge(form, other):
    def written(box: list[int]) -> str:
        return PROSE_BOX.format(*box) if other == "prose" else _box(other, box)

    answer = _box(form, BOX_TRUTH)
    for joint in (" or maybe ", "\n"):
        # [0, 0, 5, 5] beside the right box: a hedge, 0 either way round
        assert _spatial(f"{answer}{joint}{written([0, 0, 5, 5])}") == 0.0
        assert _spatial(f"{written([0, 0, 5, 5])}{joint}{answer}") == 0.0
        # [15, 10, 25, 20] alone earns 1/3 (∩ 50, ∪ 150): beside the right box still 0
        assert _spatial(f"{answer}{joint}{written([15, 10, 25, 20])}") == 0.0
        # the same box again in prose or as the same JSON: one answer, IoU 1. As a different JSON value
        # ({"box": A} beside [A]) it is two JSON answers, read strictly as a hedge like any two: 0
        same_json = other == form or {form, other} == {"bare", "fenced"}
        expected = 1.0 if other == "prose" or same_json else 0.0
        assert _spatial(f"{answer}{joint}{written(BOX_TRUTH)}") == expected


def test_a_prose_box_alone_is_no_answer():
    assert _spatial(PROSE_BOX.format(*BOX_TRUTH)) == 0.0


FENCED = "```json\n{}\n```"


@pytest.mark.parametrize(
    ("beside", "expected"),
    [
        ("", 1.0),  # the answer alone: tIoU 1, both boxes right
        # the same interval in prose, the same box in prose: one answer
        ("i.e. from 10 to 30 seconds", 1.0),
        ("the box (0, 0, 10, 10) throughout", 1.0),
        # another interval in prose: the time is hedged (0), the boxes stand: 0.5·0 + 0.5·1
        ("or maybe from 40 to 50 seconds", 0.5),
        ("or maybe 40 - 50 s", 0.5),
        # another JSON value or a prose box beside it: two answers, 0
        ("or maybe [40, 50]", 0.0),
        ('or {"time": [40, 50], "boxes": {"10": [0, 0, 10, 10], "20": [0, 0, 10, 10]}}', 0.0),
        ("or maybe (50, 50, 60, 60)", 0.0),
    ],
)
def test_text_beside_a_fenced_spatial_temporal_answer(beside, expected):
    fenced = FENCED.format(json.dumps({"time": TRUTH, "boxes": RIGHT_BOXES}))
    assert score(STVG, f"<answer>{fenced}\n{beside}</answer>").accuracy == expected


@pytest.mark.parametrize(
    ("beside", "expected"),
    [
        ("", 1.0),  # both frames right: (1 + 1) / 2
        ('i.e. {"0": [0, 0, 10, 10], "1": [0, 0, 10, 10]}', 1.0),  # the same answer again
        ("the box stays at (0, 0, 10, 10)", 1.0),  # a box it gives, in prose
        ('or maybe {"0": [50, 50, 60, 60], "1": [0, 0, 10, 10]}', 0.0),  # a second answer
        ("or maybe [50, 50, 60, 60]", 0.0),
        ("or maybe (50, 50, 60, 60)", 0.0),  # a box it does not give
    ],
)
def test_text_beside_a_fenced_tracking_answer(beside, expected):
    fenced = FENCED.format('{"0": [0, 0, 10, 10], "1": [0, 0, 10, 10]}')
    assert score(TRACKING, f"<answer>{fenced}\n{beside}</answer>").accuracy == expected


SEGMENTATION = {"problem_type": "segmentation", "answer": {"bbox": BOX_TRUTH}}
SEG_ANSWER = {"bbox": BOX_TRUTH, "positive_points": [[15, 15]]}


def _segmentation(text: str) -> float:
    return score(SEGMENTATION, f"<answer>{text}</answer>").accuracy


@pytest.mark.parametrize("wrap", ["{}", FENCED])
@pytest.mark.parametrize(
    ("beside", "expected"),
    [
        ("", 1.0),  # IoU 1, the one positive point inside: 0.5·1 + 0.5·1·1
        ("i.e. (10, 10, 20, 20)", 1.0),  # the same box in prose
        ("or maybe [0, 0, 5, 5]", 0.0),  # a second box
        ("or maybe (0, 0, 5, 5)", 0.0),
        ('or {"bbox": [10, 10, 20, 20], "positive_points": [[0, 0]]}', 0.0),  # a second prompt
    ],
)
def test_text_beside_a_segmentation_answer(wrap, beside, expected):
    assert _segmentation(f"{wrap.format(json.dumps(SEG_ANSWER))}\n{beside}") == expected


# --- 5. segmentation reads every box key and every points key ------------------------------------------
# It read the first box key and the first points key it found, so '{"bbox": A, "bbox_2d": B}' answered
# twice and the key order chose. Every key counts, as in grounding: two that differ are a hedge.


@pytest.mark.parametrize(
    "hedge",
    [
        {"bbox": BOX_TRUTH, "bbox_2d": [0, 0, 5, 5], "positive_points": [[15, 15]]},
        {"bbox_2d": [0, 0, 5, 5], "bbox": BOX_TRUTH, "positive_points": [[15, 15]]},
        {"box": BOX_TRUTH, "boxes": [[0, 0, 5, 5]], "positive_points": [[15, 15]]},
        {"bbox": [BOX_TRUTH, [0, 0, 5, 5]], "positive_points": [[15, 15]]},  # two boxes under one key
        {"bbox": BOX_TRUTH, "box": [20, 20, 10, 10], "positive_points": [[15, 15]]},  # with an inverted one
        # two points keys, positive or negative, giving different points
        {"bbox": BOX_TRUTH, "positive_points": [[15, 15]], "points": [[0, 0]]},
        {"bbox": BOX_TRUTH, "points": [[0, 0]], "point_2d": [15, 15]},
        {
            "bbox": BOX_TRUTH,
            "positive_points": [[15, 15]],
            "negative_points": [[0, 0]],
            "points_neg": [[12, 12]],
        },
    ],
)
def test_two_box_or_points_keys_in_a_segmentation_answer_are_a_hedge(hedge):
    # read as one key each, these earned up to 1.0; a hedge reads as no answer: 0
    result = score(SEGMENTATION, f"<answer>{json.dumps(hedge)}</answer>")
    assert (result.accuracy, result.extracted) == (0.0, None)


@pytest.mark.parametrize(
    "hedge",
    [
        '{"bbox": [0, 0, 5, 5], "bbox": [10, 10, 20, 20], "positive_points": [[15, 15]]}',  # a key twice
        '{"bbox": [10, 10, 20, 20], "points": [[0, 0]], "points": [[15, 15]]}',
    ],
)
def test_a_segmentation_key_given_twice_is_a_hedge(hedge):
    assert _segmentation(hedge) == 0.0


@pytest.mark.parametrize(
    "answer",
    [
        {"bbox": BOX_TRUTH, "bbox_2d": BOX_TRUTH, "positive_points": [[15, 15]]},  # one box, two keys
        {"bbox": BOX_TRUTH, "positive_points": [[15, 15]], "points": [[15, 15]]},  # one point, two keys
        {"bbox": BOX_TRUTH, "positive_points": [[15, 15]], "point_2d": [15, 15]},  # flat and nested
        {"bbox": [BOX_TRUTH], "positive_points": [[15, 15]]},  # one box in a list
    ],
)
def test_one_segmentation_value_under_two_keys_is_one_answer(answer):
    # IoU 1, the positive point (15, 15) inside [10, 10, 20, 20], no negatives: 0.5·1 + 0.5·1·1
    assert _segmentation(json.dumps(answer)) == 1.0


# --- 6. found looking over every reader again -----------------------------------------------------------


def test_a_box_past_the_json_reading_limit_still_counts():
    # JSON is looked for at most 32 times; '[x]' is no JSON and used one each, so a second box after 40 of
    # them was never seen and [10, 10, 20, 20] earned IoU 1. A text with more places to look is unreadable.
    padding = " [x]" * 40
    assert _spatial(f"[10, 10, 20, 20]{padding} [0, 0, 5, 5]") == 0.0
    assert _spatial(f"[10, 10, 20, 20]{' [x]' * 20}") == 1.0  # within the limit: read as before


def test_an_interval_past_the_json_reading_limit_still_counts():
    # {"begin": 40, "end": 50} past the limit: no prose pattern reads it either ("begin" is no start word)
    padding = " {x}" * 40
    assert _temporal(f'{{"time": [10, 30]}}{padding} {{"begin": 40, "end": 50}}') == 0.0


@pytest.mark.parametrize(
    "answer",
    [
        # frames beside "boxes" were never read: frame 0 given a second box at the top level…
        '{"boxes": {"0": [0, 0, 10, 10], "1": [0, 0, 10, 10]}, "0": [50, 50, 60, 60]}',
        # …or under another box key
        '{"boxes": {"0": [0, 0, 10, 10], "1": [0, 0, 10, 10]}, "bbox": {"0": [50, 50, 60, 60]}}',
        '{"bbox_2d": {"0": [50, 50, 60, 60]}, "boxes": {"0": [0, 0, 10, 10], "1": [0, 0, 10, 10]}}',
        '{"boxes": [{"frame": 0, "bbox_2d": [0, 0, 10, 10]}, {"frame": 1, "bbox_2d": [0, 0, 10, 10]}],'
        ' "box": {"0": [50, 50, 60, 60]}}',
    ],
)
def test_a_tracking_frame_given_a_box_beside_boxes_counts_as_missing(answer):
    # frame 0 given two boxes (scored 0), frame 1 right (1): (0 + 1) / 2; read from "boxes" alone it was 1
    assert score(TRACKING, f"<answer>{answer}</answer>").accuracy == 0.5


@pytest.mark.parametrize("key", ["bbox_2d", "bbox", "box", "box_2d"])
def test_tracking_frames_under_any_box_key_are_read(key):
    right = {key: {"0": [0, 0, 10, 10], "1": [0, 0, 10, 10]}}
    assert score(TRACKING, f"<answer>{json.dumps(right)}</answer>").accuracy == 1.0
    # the hedge in that form: frame 0 given two boxes, (0 + 1) / 2
    hedge = f'{{"{key}": {{"0": [0, 0, 10, 10], "0.0": [50, 50, 60, 60], "1": [0, 0, 10, 10]}}}}'
    assert score(TRACKING, f"<answer>{hedge}</answer>").accuracy == 0.5


def test_a_spatial_temporal_frame_given_a_box_beside_boxes_counts_as_missing():
    # time right (tIoU 1); frame 10 given a second box at the top level, frame 20 right:
    # 0.5·1 + 0.5·(0 + 1)/2 = 0.75 (read from "boxes" alone: 1.0)
    answer = {"time": TRUTH, "boxes": RIGHT_BOXES, "10": WRONG}
    assert _stvg(answer) == 0.75
    assert _stvg({"time": TRUTH, "boxes": RIGHT_BOXES, "bbox": {"10": WRONG}}) == 0.75
    assert _stvg({"time": TRUTH, "boxes": RIGHT_BOXES, "10": [0, 0, 10, 10]}) == 1.0  # the same box again
