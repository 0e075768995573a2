"""Official multiple-choice readers. Each docstring states the rule; each ``source`` names the code."""

from __future__ import annotations

import re

from services.reward.official.registry import Read, official_reader
from services.reward.sample import RewardSample

# Video-MME's first list (BradyFU/Video-MME evaluation/eval_your_results.py, removed from that repo in
# 49a2e67; lmms-eval's VideoMathQA task keeps it): two pairs of entries lack a comma between them, so
# Python joins them into one string ("The best option isThe correct option is") and neither phrase is
# ever removed alone.
VIDEOMME_V1_PREFIXES = (
    "The best answer is",
    "The correct answer is",
    "The answer is",
    "The answer",
    "The best option isThe correct option is",
    "Best answer:Best option:",
)
# The script Video-MME's README links now (thanku-all/parse_answer eval_your_results.py): the same list,
# joined pairs included, with four more phrases, so "Answer: B" no longer reads the "A" of "Answer".
VIDEOMME_PREFIXES = (
    *VIDEOMME_V1_PREFIXES,
    "Answer:",
    "Option:",
    "The correct answer",
    "The correct option",
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
    source="thanku-all/parse_answer · eval_your_results.py · extract_characters_regex (the script "
    "BradyFU/Video-MME's README links)",
)
def videomme(response: str, prefix: str, sample: RewardSample) -> Read:
    return Read(first_capital(response, VIDEOMME_PREFIXES, "ABCD"))


@official_reader(
    "videomathqa",
    rule="Video-MME's rule with letters A–E (lmms-eval's VideoMathQA copy); none → wrong",
    source="EvolvingLMMs-Lab/lmms-eval · lmms_eval/tasks/videomathqa/utils.py · extract_characters_regex",
)
def videomathqa(response: str, prefix: str, sample: RewardSample) -> Read:
    return Read(first_capital(response, VIDEOMME_V1_PREFIXES, "ABCDE"))


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
    # check_ans' first test: the word without dots is a substring of "(x)", i.e. "(x" or "(x)"
    if len(bare) in (2, 3) and bare[1].isalpha() and (len(bare) == 2 or bare[2] == ")"):
        return Read(bare[1].upper())
    # its second: "(x)" inside the word as written, dots included
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


VIDEOMME_V2_PREFIXES = (
    "Final Answer:",
    "The best answer is",
    "The correct answer is",
    "The answer is",
    "The answer",
    "The best option is",
    "The correct option is",
    "Best answer:",
    "Best option:",
    "Answer:",
    "Option:",
)


@official_reader(
    "videomme_v2",
    rule="remove the answer phrases ('Final Answer:' first), then the first capital A–H anywhere",
    source="MME-Benchmarks/Video-MME-v2 · evaluation/test_video_mme_v2.py · extract_characters_regex_v2",
)
def videomme_v2(response: str, prefix: str, sample: RewardSample) -> Read:
    return Read(first_capital(response, VIDEOMME_V2_PREFIXES, "ABCDEFGH"))


_HOLMES_ANSWER = re.compile(r"<answer>\s*(.*?)\s*</answer>", re.S)


@official_reader(
    "video_holmes",
    rule="the last <answer>…</answer> (else the whole reply); the first of A–F written 'X ', 'X:' or "
    "'[X', else the first of A–F occurring anywhere, in letter order",
    source="TencentARC/Video-Holmes · evaluate.py · the answer matching after generation",
)
def video_holmes(response: str, prefix: str, sample: RewardSample) -> Read:
    tagged = _HOLMES_ANSWER.findall(response)
    choice = tagged[-1].strip() if tagged else response
    letters = "ABCDEF"
    for letter in letters:
        if f"{letter} " in choice or f"{letter}:" in choice or f"[{letter}" in choice:
            return Read(letter)
    for letter in letters:
        if letter in choice:
            return Read(letter)
    return Read(None)


_EXPLICIT = re.compile(r"(?:answer|option)\s*(?:is|:)\s*([ABCDE])", re.I)
_MINERVA_PREFIXES = (
    "The best answer is",
    "The correct answer is",
    "The answer is",
    "Answer:",
    "Option:",
    "Therefore, the final answer is:",
)


@official_reader(
    "minerva",
    rule="the last 'answer/option is|: X' (any case), else the last capital A–E after removing the "
    "answer phrases; none → a random option (here: wrong)",
    source="EvolvingLMMs-Lab/lmms-eval · lmms_eval/tasks/minerva/utils.py · _extract_choice_letter + "
    "minerva_process_results",
)
def minerva(response: str, prefix: str, sample: RewardSample) -> Read:
    text = response.strip()
    explicit = list(_EXPLICIT.finditer(text))
    if explicit:
        return Read(explicit[-1].group(1).upper())
    for phrase in _MINERVA_PREFIXES:
        text = text.replace(phrase, "")
    letters = re.findall(r"[ABCDE]", text)
    return Read(letters[-1]) if letters else Read(None, random=True)


@official_reader(
    "ovobench_choice",
    rule="right when the truth's letter occurs anywhere in the reply (case-sensitive substring)",
    source="JoeLeelyf/OVO-Bench · utils/OVOBenchScore.py · calculate_score_backward_realtime.get_score",
    compare="given",
)
def ovobench_choice(response: str, prefix: str, sample: RewardSample) -> Read:
    return Read(1.0 if str(sample.answer).strip() in response else 0.0)


@official_reader(
    "ovobench_count",
    rule="every digit of the reply joined, equal to the count",
    source="JoeLeelyf/OVO-Bench · utils/OVOBenchScore.py · calculate_score_forward.get_score_REC",
    compare="given",
)
def ovobench_count(response: str, prefix: str, sample: RewardSample) -> Read:
    digits = "".join(re.findall(r"\d+", response))
    return Read(1.0 if digits == str(sample.answer).strip() else 0.0)


@official_reader(
    "ovobench_yes_no",
    rule="the reply 'Y'/'N' exactly, else 'Yes'/'No' (case-sensitive) occurring anywhere",
    source="JoeLeelyf/OVO-Bench · utils/OVOBenchScore.py · calculate_score_forward (SSR / CRR)",
    compare="given",
)
def ovobench_yes_no(response: str, prefix: str, sample: RewardSample) -> Read:
    yes = str(sample.answer).strip().lower() == "yes"
    if response == ("Y" if yes else "N"):
        return Read(1.0)
    return Read(1.0 if ("Yes" if yes else "No") in response else 0.0)


@official_reader(
    "tempcompass_mc",
    rule="after stripping: the full answer ('A. text'), a bare A–D, or a reply starting 'X.' / 'X)'; "
    "anything else goes to the ChatGPT judge (here, as with --disable_llm: unreadable, 0)",
    source="llyx97/TempCompass · eval_multi-choice.py · main (hand-crafted matching rules)",
)
def tempcompass_mc(response: str, prefix: str, sample: RewardSample) -> Read:
    text = response.replace("</s>", "").strip()
    full = {f"{o.letter}. {o.text}": o.letter for o in sample.options}
    if text in full:
        return Read(full[text])
    if text in ("A", "B", "C", "D"):
        return Read(text)
    for mark in (".", ")"):
        if any(text.startswith(f"{letter}{mark}") for letter in "ABCD"):
            return Read(text.split(mark)[0])
    return Read(None)


@official_reader(
    "tempcompass_yes_no",
    rule="the lowercased reply starts with 'yes' or 'no'; else the ChatGPT judge (here: unreadable, 0)",
    source="llyx97/TempCompass · eval_yes_no.py · extract_pred",
)
def tempcompass_yes_no(response: str, prefix: str, sample: RewardSample) -> Read:
    text = response.replace("</s>", "").strip().lower()
    for word in ("yes", "no"):
        if text.startswith(word):
            return Read(word == "yes")
    return Read(None)


def _piece(text: str, sep: str, index: int) -> str | None:
    """``text.split(sep)[index]``, or None where the released code would raise IndexError."""
    parts = text.split(sep)
    return parts[index] if -len(parts) <= index < len(parts) else None


@official_reader(
    "tempcompass_caption",
    rule="after stripping: the reply equal to an option line, an option's sentence (also the text after "
    "') '), or its label ('Caption A', 'A'; dots removed), the last such match counting; right when it "
    "names the answer line, its label or its sentence; else the ChatGPT judge (here, as with "
    "--disable_llm: unreadable, 0)",
    source="llyx97/TempCompass · eval_caption_matching.py · eval_rule",
    compare="given",
)
def tempcompass_caption(response: str, prefix: str, sample: RewardSample) -> Read:
    extra = sample.model_extra or {}
    question, answer = extra.get("caption_question"), extra.get("caption_answer")
    if not isinstance(question, str) or not isinstance(answer, str):
        raise ValueError("the caption-matching reader needs the sample's caption_question and caption_answer")
    text = response.replace("</s>", "").strip()
    lines = question.split("\n")[1:]
    sentences = [sentence for line in lines if (sentence := _piece(line, ": ", 1)) is not None]
    labels = [line.split(": ")[0] for line in lines]
    labels += [
        label.replace("Sentence ", "").replace("Option ", "").replace("Caption ", "") for label in labels
    ]
    pred = None
    for line in lines:
        if line == text:
            pred = line
    after = _piece(text, ") ", 1) if ") " in text else None
    for sentence in sentences:
        if sentence in (text, after):
            pred = sentence
    for label in labels:
        if label in (text, text.replace(".", "")):
            pred = label
    if pred is None:
        return Read(None)
    words = answer.split(": ")[0].split()
    named = (answer, answer.split(":")[0], _piece(answer, ": ", 1), words[1] if len(words) > 1 else None)
    return Read(1.0 if pred in named else 0.0)


def _mmmu_last(response: str, candidates: list[str], marks: str | None, texts: dict[str, str]) -> str:
    """Of several candidates, the one written last (by the mark that found them, else by its text)."""
    if marks is None:
        positions = [response.lower().rfind(texts[c].lower()) for c in candidates]
    else:
        positions = [response.rfind(marks.format(c)) for c in candidates]
    return candidates[max(range(len(candidates)), key=lambda i: (positions[i], -i))]


@official_reader(
    "videommmu",
    rule="punctuation stripped from the ends; candidates 'X.' and 'X:', else '(X)', else 'X ', else "
    "(over 5 words) an option's text; several → the one written last; none → 'No Answer Found' (wrong)",
    source="EvolvingLMMs-Lab/VideoMMMU · lmms_eval/tasks/videommmu/utils.py · parse_multi_choice_response + "
    "eval_multi_choice",
)
def videommmu(response: str, prefix: str, sample: RewardSample) -> Read:
    if response == "":
        return Read(None)
    for char in ",.!?;:'":
        response = response.strip(char)
    response = f" {response} "
    letters = [o.letter for o in sample.options]
    texts = {o.letter: o.text for o in sample.options}
    period = [c for c in letters if f"{c}." in response]
    colon = [c for c in letters if f"{c}:" in response]
    candidates, marks = period + colon, "{}." if period else "{}:"
    if not candidates:
        candidates, marks = [c for c in letters if f"({c})" in response], "({})"
    if not candidates:
        candidates, marks = [c for c in letters if f"{c} " in response], " {} "
    if not candidates and len(response.split()) > 5:
        candidates = [c for c in letters if texts[c].lower() in response.lower()]
        marks = None
    if not candidates:
        return Read(None)
    # (the released code returns the first candidate when there is one, the last-written of several)
    return Read(candidates[0] if len(candidates) == 1 else _mmmu_last(response, candidates, marks, texts))


_ODV_OPTION = re.compile(r"^([A-E])\.\s*(.+)$", re.I)
_ODV_PUNCT = (
    ";",
    "/",
    "[",
    "]",
    '"',
    "{",
    "}",
    "(",
    ")",
    "=",
    "+",
    "\\",
    "_",
    "-",
    ">",
    "<",
    "@",
    "`",
    ",",
    "?",
    "!",
)
_ODV_PERIOD = re.compile(r"(?!<=\d)(\.)(?!\d)")
_ODV_COMMA = re.compile(r"(\d)(\,)(\d)")


def odv_process(text: str) -> str:
    """StreamForest's ``mcq_acc.process``: "X. text" → X; else punctuation dropped (glued or spaced as
    the released rule decides), lowercased, the first standalone a–e as a capital, else the text."""
    match = _ODV_OPTION.match(text.strip())
    if match:
        return match.group(1).upper()
    text = text.replace("\n", " ").replace("\t", " ").strip()
    out = text
    for p in _ODV_PUNCT:
        glued = p + " " in text or " " + p in text or _ODV_COMMA.search(text) is not None
        out = out.replace(p, "" if glued else " ")
    # the released call passes re.UNICODE (32) as the count: at most 32 periods are removed
    out = _ODV_PERIOD.sub("", out, 32)
    out = out.strip("'").strip('"').strip(")").strip("(").strip().lower()
    letter = re.search(r"\b([a-e])\b", out)
    return letter.group(1).upper() if letter else out


@official_reader(
    "odvbench",
    rule="mcq_acc: 'X. text' → X, else punctuation removed and lowercased, the first standalone letter "
    "a–e (even the article 'a'); equal to the processed truth letter",
    source="MCG-NJU/StreamForest · lmms_eval/tasks/odvbench/utils.py · mcq_acc + odvbench_process_results",
)
def odvbench(response: str, prefix: str, sample: RewardSample) -> Read:
    return Read(odv_process(response) or None)


_LVR_FINAL = re.compile(r"<answer>Therefore the final answer is: (.*?)</answer>")
_LVR_ANSWER = re.compile(r"<answer>(.*?)</answer>")
_TRUTH_TAG = re.compile(r"<answer>(.*?)</answer>")


@official_reader(
    "longvideo_reason",
    rule="the first one-line <answer>…</answer> (after 'Therefore the final answer is: ' when the reply "
    "says it), else the whole reply, stripped, equal to the answer string (math_verify's symbolic "
    "first pass is not reproduced)",
    source="NVlabs/Long-RL · eval/eval.py · accuracy_reward",
    compare="given",
)
def longvideo_reason(response: str, prefix: str, sample: RewardSample) -> Read:
    truth = str(sample.answer)
    tagged = _TRUTH_TAG.search(truth)
    truth = tagged.group(1).strip() if tagged else truth.strip()
    pattern = _LVR_FINAL if "Therefore the final answer is:" in response else _LVR_ANSWER
    found = pattern.search(response)
    answer = found.group(1).strip() if found else response.strip()
    return Read(1.0 if answer == truth else 0.0)


_EASY_LETTERS = "ABCDEFGHIJ"
_EASY_FINAL = (
    re.compile(
        r"(?:Therefore|So|Thus|Hence|Finally)[,\s]*(?:the\s+)?(?:final\s+|best\s+|correct\s+)?answer\s+is[:\s]+"
        r"([A-J])\b",
        re.I,
    ),
    re.compile(r"(?:the\s+)?(?:final\s+|best\s+|correct\s+)?answer\s+is[:\s]+([A-J])\b", re.I),
    re.compile(r"答案[是为：:]\s*([A-J])\b", re.I),
)
_EASY_TAG = re.compile(r"<answer>\s*(.*?)\s*</answer>", re.S)
_EASY_AFTER_THINK = re.compile(r"</think>\s*(.*?)$", re.S | re.I)
_EASY_LEADING = re.compile(r"^([A-J])(?:\s*[.。\):]|$|\s)")
_EASY_ANSWER_IS = re.compile(r"answer\s+is[:\s]+([A-J])\b", re.I)
_EASY_CHOOSE = re.compile(r"(?:I\s+)?(?:choose|select|pick)\s+(?:option\s+)?([A-J])\b", re.I)
_EASY_LINE = re.compile(r"^([A-J])\s*[.):\s。]?\s*$")
_EASY_LINE_END = re.compile(r"\b([A-J])\s*[.)]?\s*$")


@official_reader(
    "video_r1",
    rule="EasyVideoR1's extract_answer for multiple choice: a short <answer> letter, 'the final answer "
    "is X', the text after </think> starting with a letter, 'I choose X', a letter alone (or ending a "
    "short line) in the last five lines; letters A–J",
    source="cyuQ1n/EasyVideoR1 · eval/code/AsyncLLMEngine_eval_videobench_qwen3vl_multi_task.py · extract_answer",
)
def video_r1(response: str, prefix: str, sample: RewardSample) -> Read:
    tagged = _EASY_TAG.search(response)
    answer = tagged.group(1).strip() if tagged else ""
    if answer and len(answer) <= 2:
        letter = answer.strip().rstrip(".").upper()
        if letter in _EASY_LETTERS:  # a substring test in the released code ("AB" passes too)
            return Read(letter)
    for pattern in _EASY_FINAL:
        if found := pattern.search(response):
            return Read(found.group(1).upper())
    if (after := _EASY_AFTER_THINK.search(response)) and (text := after.group(1).strip()):
        if len(text) == 1 and text.upper() in _EASY_LETTERS:
            return Read(text.upper())
        if found := _EASY_LEADING.match(text) or _EASY_ANSWER_IS.search(text):
            return Read(found.group(1).upper())
    if found := _EASY_CHOOSE.search(response):
        return Read(found.group(1).upper())
    for line in reversed(response.strip().split("\n")[-5:]):
        line = line.strip()
        if len(line) == 1 and line.upper() in _EASY_LETTERS:
            return Read(line.upper())
        if found := _EASY_LINE.match(line) or (len(line) < 30 and _EASY_LINE_END.search(line)):
            return Read(found.group(1).upper())
    return Read(None)


@official_reader(
    "mlvu_test",
    rule="the stripped answer, cut before its first ')' and stripped again, equal to the option letter "
    "(the test split's submission rule; the leaderboard compares the submitted option)",
    source="JUNJIE99/MLVU · evaluation_test/test_bench.py · main (the 'option' it submits)",
)
def mlvu_test(response: str, prefix: str, sample: RewardSample) -> Read:
    text = response.strip()
    if ")" in text:
        text = text[: text.index(")")].strip()
    return Read(text or None)
