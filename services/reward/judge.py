"""The LLM judge: one prompt and one verdict reader, for the evaluator and for training rewards.

The evaluator asks its judge through its own engine (services/eval/pipeline.py); training asks an
OpenAI-compatible chat endpoint (``reward.judge``: ``vllm serve`` of a judge model beside the run, or any
hosted API) through ``JudgeFunction``, which the reward mix calls like any reward function (so a judge that
is unreachable, or answers something no verdict can be read from, fails that item alone, counted in
``reward/errors``, never a silent 0).

The verdict is read strictly (``read_verdict``): one word, "Correct" or "Incorrect", with nothing around
it but a few filler words; a negation, a qualifier or a second verdict is no verdict. The evaluator reads
its judge's replies the same way (services/eval/benchmarks/base.py ``read_judge``).
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import os
import re
from collections import OrderedDict
from typing import Any

import httpx

from services.reward.errors import RewardError

JUDGE_PROMPT = (
    "You are given a question about a video, the ground-truth answer and a model's response. The model "
    "response should contain all information in the ground-truth answer and must not contradict it. Judge "
    "whether the model response is correct.\n\nQuestion: {question}\nGround-truth answer: {answer}\n"
    "Model response: {response}\n\nDirectly output 'Correct' or 'Incorrect'."
)
VERDICTS = ("Correct", "Incorrect")
_RETRY_STATUS = frozenset({429, 500, 502, 503, 504})


class JudgeError(RewardError):
    """The judge gave no usable verdict for one item: unreachable, refused, or unreadable."""


def judge_prompt(question: Any, answer: Any, response: str, template: str = JUDGE_PROMPT) -> str:
    """What the judge is asked about one response."""
    return template.format(question=question, answer=answer, response=response.strip())


# Words a judge may put around its one-word verdict ("The response is correct.", "Verdict: Incorrect").
# Anything else (a negation, a qualifier, "correct answer would be…", a second verdict) is no verdict.
_FILLER = frozenset({"the", "response", "model", "s", "is", "verdict", "judgment", "judgement", "final"})


def read_verdict(reply: str) -> float | None:
    """1.0 for a reply that says "Correct", 0.0 for "Incorrect", None for anything else. Case,
    punctuation and markdown do not matter, nor the words of ``_FILLER`` around the verdict; every other
    word makes the reply no verdict: "not correct", "doesn't seem correct", "partially correct",
    "Correct or Incorrect", "Correct answer: X; the response is wrong"."""
    words = [w for w in re.findall(r"[a-z]+", reply.lower()) if w not in _FILLER]
    said = set(words)
    if said == {"correct"}:
        return 1.0
    if said == {"incorrect"}:
        return 0.0
    return None


_SCORE = re.compile(r"(?<![\w.\-−/])(\d+(?:\.\d+)?)\s*(?:(?:/|out\s+of)\s*(\d+(?:\.\d+)?))?", re.I)


def read_score(reply: str, top: float) -> float | None:
    """A graded reply ("7", "Score: 7/10", "8.5 out of 10") as a fraction of ``top``: the reply must hold
    exactly one grade (a second number is a hedge, "7 or 8"), within [0, top]; None otherwise."""
    found = [(float(m.group(1)), m.group(2)) for m in _SCORE.finditer(reply)]
    if len(found) != 1:
        return None
    value, out_of = found[0]
    if out_of is not None and float(out_of) != top:
        return None
    return value / top if 0.0 <= value <= top else None


def read_reply(reply: str, parser: str, top: float) -> float | None:
    """The reply read by the configured parser (``verdict``: Correct/Incorrect; ``score``: a grade)."""
    if parser == "verdict":
        return read_verdict(reply)
    if parser == "score":
        return read_score(reply, top)
    raise ValueError(f"unknown judge parser {parser!r}; known: verdict, score")


class JudgeFunction:
    """An async reward function asking an OpenAI-compatible chat endpoint for a verdict on each response.

    Transport errors and 429/5xx are retried with exponential backoff; verdicts are cached by (template,
    system prompt, model, question, answer, response), so a response repeated across steps or a group
    costs nothing the second time (a duplicate asked while the first is in flight waits for its answer).
    ``requests`` and ``cache_hits`` count what it did.
    """

    def __init__(self, config: Any) -> None:  # a JudgeRewardConfig (services/reward/config.py)
        self.config = config
        self._client: httpx.AsyncClient | None = None
        self._cache: OrderedDict[str, float] = OrderedDict()
        self._pending: dict[str, asyncio.Future[float]] = {}
        self.requests = 0
        self.cache_hits = 0

    def _key(self, prompt: str) -> str:
        c = self.config
        return hashlib.sha256(json.dumps([c.model, c.system, c.template, prompt]).encode()).hexdigest()

    def _body(self, prompt: str) -> dict[str, Any]:
        c = self.config
        messages = ([{"role": "system", "content": c.system}] if c.system else []) + [
            {"role": "user", "content": prompt}
        ]
        body: dict[str, Any] = {
            "model": c.model, "messages": messages, "max_tokens": c.max_tokens, "temperature": c.temperature,
        }  # fmt: skip
        if c.constrain and c.parser == "verdict":
            # vLLM's structured outputs: the reply is one of the verdict words, read like any other
            body["structured_outputs"] = {"choice": list(VERDICTS)}
        return body

    def _headers(self) -> dict[str, str]:
        key = os.environ.get(self.config.api_key_env) if self.config.api_key_env else None
        return {"Authorization": f"Bearer {key}"} if key else {}

    async def _ask(self, prompt: str) -> str:
        c = self.config
        if self._client is None:  # on the runner's loop, which lives as long as the judge
            self._client = httpx.AsyncClient(base_url=c.url.rstrip("/"), timeout=c.request_timeout_s)
        problem = ""
        for attempt in range(c.retries + 1):
            if attempt:
                await asyncio.sleep(c.backoff_s * 2 ** (attempt - 1))
            self.requests += 1
            try:
                response = await self._client.post(
                    "/chat/completions", json=self._body(prompt), headers=self._headers()
                )
            except httpx.TransportError as exc:
                problem = f"{type(exc).__name__}: {exc}"
                continue
            if response.status_code in _RETRY_STATUS:
                problem = f"status {response.status_code}: {response.text[:200]}"
                continue
            if response.status_code != 200:
                raise JudgeError(f"judge {c.url} answered {response.status_code}: {response.text[:300]}")
            try:
                return response.json()["choices"][0]["message"]["content"] or ""
            except (ValueError, KeyError, IndexError, TypeError) as exc:
                raise JudgeError(
                    f"judge {c.url} sent no chat completion ({exc!r}): {response.text[:300]}"
                ) from None
        raise JudgeError(f"judge {c.url} unreachable after {c.retries + 1} attempts: {problem}")

    async def __call__(self, sample: Any, response: str) -> float:
        question = sample.problem or ""
        prompt = judge_prompt(question, sample.answer, response, self.config.template)
        key = self._key(prompt)
        if key in self._cache:
            self.cache_hits += 1
            self._cache.move_to_end(key)
            return self._cache[key]
        if key in self._pending:  # the same question already asked in this batch (a group's duplicate)
            self.cache_hits += 1
            return await asyncio.shield(self._pending[key])
        asked = asyncio.ensure_future(self._verdict(prompt, key))
        self._pending[key] = asked
        try:
            return await asyncio.shield(asked)
        finally:
            if asked.done():
                self._pending.pop(key, None)
            else:  # this caller timed out; the question stays asked for the others, then leaves
                asked.add_done_callback(lambda _: self._pending.pop(key, None))

    async def _verdict(self, prompt: str, key: str) -> float:
        reply = await self._ask(prompt)
        verdict = read_reply(reply, self.config.parser, self.config.score_max)
        if verdict is None:
            raise JudgeError(f"no {self.config.parser} could be read in the judge's reply {reply[:200]!r}")
        if self.config.cache_size:
            self._cache[key] = verdict
            while len(self._cache) > self.config.cache_size:
                self._cache.popitem(last=False)
        return verdict

    async def aclose(self) -> None:
        if self._client is not None:
            await self._client.aclose()
            self._client = None
