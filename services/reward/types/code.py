"""Code answers (SVG, HTML, Python): well-formedness gates the score, structure decides it.

accuracy = F1 between the multisets of structural features of the answer and of the reference (element
tags and (tag, attribute) pairs for SVG/HTML; AST node types for Python), and 0 when the answer does not
parse. An empty ``<svg/>`` shares one feature with a rich reference and earns almost nothing.

The code is the fenced block, else the whole text. Several blocks holding different code are two
programs, a hedge: no answer (a reference written so is an invalid sample). Taking the last one let an
answer offer a second program.
"""

from __future__ import annotations

import ast
from collections import Counter
from html.parser import HTMLParser
from typing import Any
from xml.etree import ElementTree

from services.reward.errors import InvalidSample
from services.reward.extract.structured import FENCE, sole
from services.reward.registry import ProblemType, ScoreContext, normalise_name, register
from services.reward.sample import RewardSample

LANGUAGES = ("svg", "html", "python")
_VOID = frozenset({
    "area", "base", "br", "col", "embed", "hr", "img", "input", "link", "meta", "param", "source", "track", "wbr",
    "!doctype",
})  # fmt: skip
# Elements HTML lets an author leave open.
_OPTIONAL_CLOSE = frozenset({
    "p", "li", "dt", "dd", "tr", "td", "th", "thead", "tbody", "tfoot", "option", "colgroup", "html", "head", "body",
})  # fmt: skip


class _HtmlStructure(HTMLParser):
    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.features: Counter[str] = Counter()
        self.stack: list[str] = []
        self.balanced = True

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.features[tag] += 1
        self.features.update(f"{tag}@{name}" for name, _ in attrs)
        if tag not in _VOID:
            self.stack.append(tag)

    def handle_startendtag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.features[tag] += 1
        self.features.update(f"{tag}@{name}" for name, _ in attrs)

    def handle_endtag(self, tag: str) -> None:
        while self.stack and self.stack[-1] != tag and self.stack[-1] in _OPTIONAL_CLOSE:
            self.stack.pop()
        if self.stack and self.stack[-1] == tag:
            self.stack.pop()
        elif tag not in _VOID:
            self.balanced = False


def html_features(code: str) -> Counter[str] | None:
    """Tag and tag@attribute counts of well-formed HTML (every non-void element closed in order)."""
    parser = _HtmlStructure()
    try:
        parser.feed(code)
        parser.close()
    except RecursionError:  # no HTML a model should write nests this deep
        return None
    open_left = [t for t in parser.stack if t not in _OPTIONAL_CLOSE]
    if not parser.balanced or open_left or not parser.features:
        return None
    return parser.features


def svg_features(code: str) -> Counter[str] | None:
    """Tag and tag@attribute counts of a well-formed XML document whose root is <svg>."""
    try:
        root = ElementTree.fromstring(code)
    except (ElementTree.ParseError, RecursionError):
        return None
    if root.tag.rsplit("}", 1)[-1] != "svg":
        return None
    features: Counter[str] = Counter()
    for element in root.iter():
        tag = element.tag.rsplit("}", 1)[-1]
        features[tag] += 1
        features.update(f"{tag}@{name.rsplit('}', 1)[-1]}" for name in element.attrib)
    return features


def python_features(code: str) -> Counter[str] | None:
    """AST node type counts of syntactically valid Python."""
    try:
        tree = ast.parse(code)
        features = Counter(type(node).__name__ for node in ast.walk(tree))
    # ValueError: null bytes in the source. MemoryError / RecursionError: CPython's parser gives up on
    # deep nesting ("x = ----…1", "1 + 1 + …" thousands of times) with these instead of SyntaxError.
    except (SyntaxError, ValueError, MemoryError, RecursionError):
        return None
    return features if len(features) > 1 else None  # a bare Module is no program


_FEATURES = {"svg": svg_features, "html": html_features, "python": python_features}


def feature_f1(pred: Counter[str], truth: Counter[str]) -> float:
    """F1 of two multisets: overlap = Σ min counts; P = overlap/|pred|, R = overlap/|truth|."""
    overlap = sum((pred & truth).values())
    if overlap == 0:
        return 0.0
    precision, recall = overlap / sum(pred.values()), overlap / sum(truth.values())
    return 2 * precision * recall / (precision + recall)


def code_block(text: str) -> str | None:
    """The fenced block's content, else the text itself; None when several blocks differ (a hedge)."""
    return sole([body.strip() for _, body in FENCE.findall(text)] or [text.strip()])


def language_of(sample: RewardSample) -> str:
    """``language`` field, else the alias used (svg-code, html-code), else guessed from the reference."""
    stated = sample.extra_field("language")
    if stated is not None:
        language = str(stated).casefold()
        if language not in LANGUAGES:
            raise InvalidSample(
                f"{sample.label}: code language {stated!r}; supported: {', '.join(LANGUAGES)}"
            )
        return language
    alias = normalise_name(sample.problem_type)
    if alias in ("svg code", "html code"):
        return alias.split()[0]
    reference = (code_block(str(sample.answer)) or "").lstrip().casefold()
    if reference.startswith("<svg") or (reference.startswith("<?xml") and "<svg" in reference):
        return "svg"
    if reference.startswith("<"):
        return "html"
    return "python"


@register
class Code(ProblemType):
    name = "code"
    aliases = ("svg-code", "html-code", "python-code", "coding")
    description = "SVG/HTML/Python in a ``` block or the answer tag; 0 unless it parses, else structure F1."
    narrow_phrases = False

    def parse_truth(self, sample: RewardSample) -> tuple[str, Counter[str]]:
        language = language_of(sample)
        code = code_block(str(sample.answer))
        if code is None:
            raise InvalidSample(f"{sample.label}: the reference holds several different code blocks")
        features = _FEATURES[language](code)
        if features is None:
            raise InvalidSample(f"{sample.label}: the reference {language} code does not parse")
        return language, features

    def extract(self, text: str, sample: RewardSample) -> str | None:
        return code_block(text) or None

    def accuracy(self, parsed: Any, truth: Any, sample: RewardSample, ctx: ScoreContext) -> float:
        language, truth_features = truth
        features = _FEATURES[language](parsed)
        return 0.0 if features is None else feature_f1(features, truth_features)
