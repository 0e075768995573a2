"""Official multiple-choice readers. Each docstring states the rule; each ``source`` names the code."""

from __future__ import annotations

import re

from services.reward.official.registry import Read, official_reader
from services.reward.sample import RewardSample

# Video-MME's list as released: two pairs of entries lack a comma between them, so Python joins them
# into one string ("The best option isThe correct option is") and neither phrase is ever removed alone.
VIDEOMME_PREFIXES = (
    "The best answer is",
    "The correct answer is",
    "The answer is",
    "The answer",
    "The best option isThe correct option is",
    "Best answer:Best option:",
)
# lmms-eval's LongVideoBench copy of that list, with the commas.
LMMS_PREFIXES = (
    "The best answer is",
    "The correct answer is",
    "The answer is",
    "The answer",
    "The best option is",
    "The correct option is",
    "Best answer:",
    "Best option:",
)


def first_capital(response: str, prefixes: tuple[str, ...], letters: str) -> str | None:
    """Strip, delete every (case-sensitive) prefix phrase, then the first capital option letter anywhere,
    even inside a word (the "A" of "Answer", the "B" of "Based"). The official code's extra test (more
    than ten words and no letter) gives the same "none" as finding no letter."""
    text = response.strip()
    for phrase in prefixes:
        text = text.replace(phrase, "")
    found = re.search(f"[{letters}]", text)
    return found.group(0) if found else None


@official_reader(
    "videomme",
    rule="remove the answer phrases, then the first capital A–D anywhere; none → unanswered",
    source="BradyFU/Video-MME · evaluation/eval_your_results.py · extract_characters_regex",
)
def videomme(response: str, prefix: str, sample: RewardSample) -> Read:
    return Read(first_capital(response, VIDEOMME_PREFIXES, "ABCD"))


@official_reader(
    "videomathqa",
    rule="Video-MME's rule with letters A–E (lmms-eval's VideoMathQA copy); none → wrong",
    source="EvolvingLMMs-Lab/lmms-eval · lmms_eval/tasks/videomathqa/utils.py · extract_characters_regex",
)
def videomathqa(response: str, prefix: str, sample: RewardSample) -> Read:
    return Read(first_capital(response, VIDEOMME_PREFIXES, "ABCDE"))


@official_reader(
    "longvideobench",
    rule="remove the answer phrases, then the first capital A–E; none → a random option (here: wrong)",
    source="EvolvingLMMs-Lab/lmms-eval · lmms_eval/tasks/longvideobench/utils.py · parse_multi_choice_response",
)
def longvideobench(response: str, prefix: str, sample: RewardSample) -> Read:
    letter = first_capital(response, LMMS_PREFIXES, "ABCDE")
    return Read(letter) if letter is not None else Read(None, random=True)


@official_reader(
    "mvbench",
    rule="'(' + the first line of the answer; its first space-separated word, lowercased, dots removed, "
    "must be '(x' or start with '(x)' for option x (check_ans: substring test against '(x)')",
    source="OpenGVLab/Ask-Anything · video_chat2/mvbench.ipynb · infer_mvbench + check_ans",
)
def mvbench(response: str, prefix: str, sample: RewardSample) -> Read:
    lines = response.strip().split("\n")
    word = ("(" + lines[0]).lower().split(" ")[0]
    bare = word.replace(".", "")
    if len(bare) >= 2 and bare[1].isalpha() and (len(bare) == 2 or bare[2] == ")"):
        return Read(bare[1].upper())
    # "(" alone is a substring of every "(x)": check_ans counts an empty answer right for any item.
    # That is a defect, not a rule: it reads as unanswered here (docs/evaluation.md).
    inner = re.search(r"\(([a-z])\)", word)
    return Read(inner.group(1).upper() if inner else None)


@official_reader(
    "mlvu",
    rule="the character just before the first ')' (the whole answer when there is none), "
    "case-sensitive, equal to the option letter",
    source="JUNJIE99/MLVU · evaluation/multiple_choice_evaluation/choice_bench.py · check_ans",
)
def mlvu(response: str, prefix: str, sample: RewardSample) -> Read:
    text = response
    if ")" in text:
        at = text.index(")")
        text = text[at - 1 : at] if at > 0 else ""
    return Read(text or None)


def polish_answer(response: str) -> str:
    """LVBench's and MotionBench's ``polish_answer``: before the first ')', after a '(', the first
    space-separated word's first character."""
    text = response.strip().split(")")[0].strip()
    if "(" in text:
        text = text.split("(")[1].strip()
    word = text.split(" ")[0]
    return word[:1]


@official_reader(
    "lvbench",
    rule="polish_answer: before the first ')', after '(', the first character of the first word; "
    "compared case-sensitively",
    source="THUDM/LVBench · lvbench/utils/answer_util.py · polish_answer (+ metrics/compute_accuracy.py)",
)
def lvbench(response: str, prefix: str, sample: RewardSample) -> Read:
    return Read(polish_answer(response) or None)


@official_reader(
    "motionbench",
    rule="LVBench's polish_answer (the same function in MotionBench's release)",
    source="THUDM/MotionBench · motionbench/utils/answer_util.py · polish_answer",
)
def motionbench(response: str, prefix: str, sample: RewardSample) -> Read:
    return Read(polish_answer(response) or None)


def first_word(response: str) -> str:
    """VSI-Bench's ``fuzzy_matching``: the text before the first space, trailing dots removed."""
    return response.split(" ")[0].rstrip(".").strip()


@official_reader(
    "vsibench_choice",
    rule="fuzzy_matching (first space-separated word, trailing '.' removed) equal to the letter, any case",
    source="vision-x-nyu/thinking-in-space · lmms_eval/tasks/vsibench/utils.py · fuzzy_matching + exact_match",
)
def vsibench_choice(response: str, prefix: str, sample: RewardSample) -> Read:
    word = first_word(response)
    return Read(word.upper() or None)
