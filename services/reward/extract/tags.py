"""Splitting a response into thinking, the ``<answer>`` block and the text a final answer is read from.

Rules (documented in docs/rewards.md):
- ``<think>…</think>`` blocks are reasoning, never the answer. A ``</think>`` without an opening tag (the
  chat template opened it) ends the reasoning too. A ``<think>`` that is never closed means the model never
  finished thinking: only an ``<answer>`` block after it counts.
- Exactly one ``<answer>…</answer>`` block is an answer. Repeated, nested or unclosed answer tags are
  malformed: accuracy 0 and format 0, whatever they contain.
- Without an answer block, the text after the reasoning is searched for a final answer.
- A ``\\boxed{}`` is the answer, the text around it working; several boxes saying different things are a
  hedge and read as nothing (taking the last one let "\\boxed{A} or \\boxed{B}" answer twice).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

_THINK_OPEN = re.compile(r"<think>", re.I)
_THINK_CLOSE = re.compile(r"</think>", re.I)
_ANSWER_OPEN = re.compile(r"<answer>", re.I)
_ANSWER_CLOSE = re.compile(r"</answer>", re.I)
_STRICT = re.compile(r"\s*<think>(.*?)</think>\s*<answer>(.*?)</answer>\s*", re.S | re.I)
_BOXED = re.compile(r"\\(?:boxed|fbox)\s*\{")
_BRACE = re.compile(r"[{}]")
# "Therefore, the final answer is: X", "The answer is X", "Answer: X", "I choose X", "Best option: X".
_FINAL_PHRASE = re.compile(
    r"\b(?:(?:final|correct|best)\s+(?:answer|option|choice)|answer)\b"
    r"(?:\s+(?:is|would\s+be|should\s+be)\b\s*[:：=]?|\s*[:：=])\s*"
    r"|\bi\s+(?:would\s+)?(?:choose|select|pick)\b\s*",
    re.I,
)
_SENTENCE_END = re.compile(r"[.!?。](?=\s|$)|\n")


@dataclass(frozen=True)
class ResponseParts:
    """``answer``: content of the single well-formed answer block (None if absent or malformed).
    ``body``: text searched when there is no answer block (None when the thinking never ended).
    """

    answer: str | None
    body: str | None
    malformed: bool
    strict_ok: bool

    @property
    def has_answer_tag(self) -> bool:
        return self.answer is not None


def split_response(response: str) -> ResponseParts:
    closes = list(_THINK_CLOSE.finditer(response))
    if closes:
        after_thinking: str | None = response[closes[-1].end() :]
        searchable = after_thinking
    elif (opened := _THINK_OPEN.search(response)) is not None:
        after_thinking = None
        searchable = response[opened.end() :]
    else:
        after_thinking = searchable = response

    opens = list(_ANSWER_OPEN.finditer(searchable))
    shuts = list(_ANSWER_CLOSE.finditer(searchable))
    answer = None
    malformed = False
    if opens or shuts:
        if len(opens) == 1 and len(shuts) == 1 and opens[0].end() <= shuts[0].start():
            answer = searchable[opens[0].end() : shuts[0].start()].strip()
        else:
            malformed = True
    strict_ok = (
        not malformed
        and answer is not None
        and len(_THINK_OPEN.findall(response)) == 1
        and len(closes) == 1
        and _STRICT.fullmatch(response) is not None
    )
    return ResponseParts(answer=answer, body=after_thinking, malformed=malformed, strict_ok=strict_ok)


def _balanced_boxes(text: str) -> list[tuple[int, int, int]]:
    """``(macro start, content start, content end)`` of each ``\\boxed{…}`` whose braces balance, in the
    order they close.

    One pass over the braces with a stack (``O(len(text))``): a brace closes the innermost open one, and a
    ``\\boxed{`` that never closes is no box.
    """
    box_opens = {m.end() - 1: m.start() for m in _BOXED.finditer(text)}
    if not box_opens:
        return []
    stack: list[int] = []  # positions of the open braces
    boxes = []
    for brace in _BRACE.finditer(text):
        at = brace.start()
        if brace.group() == "{":
            stack.append(at)
        elif stack:
            opened = stack.pop()
            if opened in box_opens:
                boxes.append((box_opens[opened], opened + 1, at))
    return boxes


def last_boxed(text: str) -> str | None:
    """Content of the last-opened ``\\boxed{…}`` whose braces balance, or None (a ``\\boxed{`` that never
    closes is skipped for an earlier balanced one)."""
    boxes = _balanced_boxes(text)
    if not boxes:
        return None
    _, start, end = max(boxes, key=lambda box: box[1])
    return text[start:end].strip()


def boxed_answers(text: str) -> list[str]:
    """What each outermost balanced ``\\boxed{…}`` says, in order: its content with the boxes inside it
    unwrapped, so ``\\boxed{\\boxed{5}}`` says "5" and ``\\boxed{5 or \\boxed{4}}`` says "5 or 4"."""
    answers: list[str] = []
    outer_end = -1
    cut: set[int] = set()  # the "\\boxed{" and "}" of boxes inside an outer one
    outer: list[tuple[int, int]] = []
    for macro, start, end in sorted(_balanced_boxes(text)):
        if macro < outer_end:
            cut.update(range(macro, start))
            cut.add(end)
        else:
            outer.append((start, end))
            outer_end = end
    for start, end in outer:
        answers.append("".join(text[i] for i in range(start, end) if i not in cut).strip())
    return answers


def after_final_phrase(text: str) -> str | None:
    """The clause after the last "the answer is" style phrase, cut at the end of its sentence."""
    last = None
    for last in _FINAL_PHRASE.finditer(text):  # noqa: B007 - we want the final match
        pass
    if last is None:
        return None
    tail = text[last.end() :]
    end = _SENTENCE_END.search(tail, 1) if tail else None
    clause = (tail[: end.start()] if end else tail).strip()
    return clause or None


def answer_text(parts: ResponseParts, *, phrases: bool) -> str | None:
    """The text a type's extractor reads: the answer block or the post-reasoning body, narrowed to its
    ``\\boxed{}`` (None when several say different things: a hedge) and otherwise (when ``phrases``) to the
    clause after the last final-answer phrase."""
    if parts.malformed:
        return None
    source = parts.answer if parts.answer is not None else parts.body
    if source is None:
        return None
    boxed = boxed_answers(source)
    if boxed:
        return boxed[0] if all(answer == boxed[0] for answer in boxed[1:]) else None
    if phrases:
        clause = after_final_phrase(source)
        if clause is not None:
            return clause
    return source.strip()
