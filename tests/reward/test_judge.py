"""The LLM judge as a training reward: its readers by hand, its client against a scripted endpoint
(retries, backoff, refusals, cache), then a real vLLM OpenAI server of a tiny model (constrained verdicts,
a garbage-answering judge isolated per item, an unreachable one), and the colour task trained for two
steps with examples/tiny_cpu_judge.yaml's mix: the problem type's reward, two reward functions and the
judge, each logged as its own metric."""

from __future__ import annotations

import json
import os
import sys
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any, ClassVar

import httpx
import pytest

from services.reward import RewardConfig, make_reward_client
from services.reward.functions import RewardFunctionError
from services.reward.judge import JUDGE_PROMPT, JudgeFunction, judge_prompt, read_score, read_verdict
from services.reward.mix import MixedRewardClient
from tests.servers import free_port, served

ROOT = Path(__file__).resolve().parents[2]
OPEN = {"id": "o1", "problem_type": "open-ended", "problem": "What moves?", "answer": "a red square"}
OTHER = {"id": "o2", "problem_type": "open-ended", "problem": "Which way?", "answer": "to the left"}


@pytest.mark.parametrize(
    ("reply", "verdict"),
    [
        ("Correct", 1.0), ("correct.", 1.0), ("**Correct**", 1.0), ("The response is correct.", 1.0),
        ("Incorrect", 0.0), ("INCORRECT!", 0.0), ("`Incorrect`", 0.0),
        # hedges and negations in each accepted form earn no verdict
        ("Correct or Incorrect", None), ("correct / incorrect", None), ("**Correct** (or Incorrect)", None),
        ("Not correct", None), ("The response is not correct.", None), ("isn't correct", None),
        ("not incorrect", None), ("A", None), ("", None), ("up isupangreen", None),
        ("The response doesn't seem correct", None), ("It cannot be considered correct", None),
        ("I can't say it's correct", None), ("Partially correct", None), ("Mostly correct.", None),
        ("Correct answer would be 'running'; the response is wrong.", None), ("Correct answer", None),
        ("Verdict: Incorrect", 0.0), ("**Final verdict:** Correct", 1.0), ("The model's response is correct", 1.0),
    ],
)  # fmt: skip
def test_a_verdict_is_one_word_neither_hedged_nor_negated(reply: str, verdict: float | None) -> None:
    assert read_verdict(reply) == verdict


@pytest.mark.parametrize(
    ("reply", "score"),
    [
        ("7", 0.7), ("Score: 7/10", 0.7), ("8.5 out of 10", 0.85), ("10/10", 1.0), ("0", 0.0),
        ("7 or 8", None), ("7/10, maybe 8/10", None), ("11", None), ("7/5", None), ("", None), ("seven", None),
        ("-3", None), ("−3/10", None),
    ],
)  # fmt: skip
def test_a_grade_is_one_number_within_the_scale(reply: str, score: float | None) -> None:
    assert read_score(reply, 10.0) == (pytest.approx(score) if score is not None else None)


def test_the_prompt_fills_the_template_and_the_config_checks_it() -> None:
    assert judge_prompt("Q?", "a", "  r  ") == JUDGE_PROMPT.format(question="Q?", answer="a", response="r")
    base = {"url": "http://127.0.0.1:1/v1", "model": "m"}
    with pytest.raises(ValueError, match="only"):
        RewardConfig(judge={**base, "template": "{question} {oops} {response}"})
    with pytest.raises(ValueError, match="never shows the judge the"):
        RewardConfig(judge={**base, "template": "{question} {answer}"})
    with pytest.raises(ValueError, match=r"shadow|more than once"):
        RewardConfig(judge={**base, "name": "brevity"}, functions=[{"name": "brevity", "path": "x.py:f"}])


def test_an_api_job_may_ask_only_the_operators_judges_with_the_operators_tokens(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A job must not make the worker send answers (or a secret it holds, as a bearer token) anywhere."""
    from services.common.settings import reset_settings_cache
    from services.trainer.config import TrainConfig, TrainJobConfig

    (tmp_path / "m").mkdir()
    (tmp_path / "m" / "config.json").write_text("{}")
    judge = {"url": "http://127.0.0.1:8000/v1/", "model": "judge"}
    job = {
        "data": {"train_files": ["d/t.jsonl"]}, "actor": {"model_path": "m"}, "trainer": {"output_dir": "runs/a"},
        "reward": {"judge": judge},
    }  # fmt: skip
    stolen = {**job, "reward": {"judge": {**judge, "api_key_env": "REELRL_DATABASE_URL"}}}
    monkeypatch.setenv("REELRL_DATA_ROOTS", str(tmp_path))
    for var in ("REELRL_JUDGE_URLS", "REELRL_JUDGE_KEY_ENVS"):
        monkeypatch.delenv(var, raising=False)
    reset_settings_cache()
    try:
        with pytest.raises(ValueError, match=r"reward.judge.url=.*REELRL_JUDGE_URLS \(now: unset"):
            TrainJobConfig.model_validate(job)
        monkeypatch.setenv("REELRL_JUDGE_URLS", "http://127.0.0.1:8000/v1, http://judge.internal/v1")
        reset_settings_cache()
        assert TrainJobConfig.model_validate(job).reward.judge.url == judge["url"]
        with pytest.raises(ValueError, match=r"reward.judge.url=http://attacker"):
            TrainJobConfig.model_validate(
                {**job, "reward": {"judge": {**judge, "url": "http://attacker/v1"}}}
            )
        with pytest.raises(ValueError, match="api_key_env=REELRL_DATABASE_URL: not a variable"):
            TrainJobConfig.model_validate(stolen)
        monkeypatch.setenv("REELRL_JUDGE_KEY_ENVS", "JUDGE_TOKEN")
        reset_settings_cache()
        with pytest.raises(ValueError, match="api_key_env=REELRL_DATABASE_URL"):
            TrainJobConfig.model_validate(stolen)
        allowed = {**job, "reward": {"judge": {**judge, "api_key_env": "JUDGE_TOKEN"}}}
        assert TrainJobConfig.model_validate(allowed).reward.judge.api_key_env == "JUDGE_TOKEN"
        assert TrainConfig.model_validate(stolen).reward.judge  # the CLI on one's own machine: any
    finally:
        reset_settings_cache()


class Scripted(BaseHTTPRequestHandler):
    """An OpenAI-compatible endpoint answering from a script of (status, reply) per request."""

    script: ClassVar[list[tuple[int, str]]] = []
    seen: ClassVar[list[dict[str, Any]]] = []

    def do_POST(self) -> None:
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        type(self).seen.append({"path": self.path, "auth": self.headers.get("Authorization"), **body})
        status, reply = type(self).script.pop(0) if type(self).script else (200, "Correct")
        payload = (
            reply if status != 200 or reply.startswith("{")
            else json.dumps({"choices": [{"message": {"role": "assistant", "content": reply}}]})
        )  # fmt: skip
        data = payload.encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def log_message(self, *args: object) -> None:
        pass


@pytest.fixture
def scripted() -> Iterator[str]:
    Scripted.script, Scripted.seen = [], []
    server = ThreadingHTTPServer(("127.0.0.1", 0), Scripted)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/v1"
    finally:
        server.shutdown()
        server.server_close()


def judge_client(url: str, **judge: Any) -> MixedRewardClient:
    config = RewardConfig(judge={"url": url, "model": "judge", "backoff_s": 0.01, **judge})
    client = make_reward_client(config)
    assert isinstance(client, MixedRewardClient)
    return client


def counters(client: MixedRewardClient) -> JudgeFunction:
    (runner, _), *_ = client.parts
    return runner.fn


def test_retries_back_off_then_verdicts_are_cached(scripted: str, monkeypatch) -> None:
    monkeypatch.setenv("JUDGE_TOKEN", "s3cret")
    Scripted.script = [(503, "busy"), (429, "slow down"), (200, "Correct"), (200, "Incorrect")]
    with judge_client(scripted, retries=2, api_key_env="JUDGE_TOKEN", system="Be strict.") as client:
        first = client.score_batch([(OPEN, "a red square")])
        # the same response again (a group's duplicate, a later step) costs no request
        again, other = client.score_batch([(OPEN, "a red square"), (OTHER, "to the right")])
        judge = counters(client)
    assert first[0].parts["judge"] == 1.0 and again.parts["judge"] == 1.0 and other.parts["judge"] == 0.0
    assert first[0].overall == pytest.approx(first[0].parts["builtin"] + 1.0)
    assert (judge.requests, judge.cache_hits, len(Scripted.seen)) == (4, 1, 4)
    request = Scripted.seen[-1]
    assert request["path"] == "/v1/chat/completions" and request["auth"] == "Bearer s3cret"
    assert request["model"] == "judge" and request["max_tokens"] == 16 and request["temperature"] == 0.0
    assert request["messages"] == [
        {"role": "system", "content": "Be strict."},
        {"role": "user", "content": judge_prompt("Which way?", "to the left", "to the right")},
    ]
    assert "structured_outputs" not in request


def test_a_refusal_a_malformed_answer_or_a_hedge_fails_its_item_alone(scripted: str) -> None:
    Scripted.script = [
        (200, "Correct"),
        (400, '{"error": "bad"}'),
        (200, '{"nothing": 1}'),
        (200, "Correct or not"),
    ]
    items = [(OPEN, "one"), (OPEN, "two"), (OPEN, "three"), (OPEN, "four")]
    with judge_client(scripted, concurrency=1) as client:
        ok, refused, malformed, hedged = client.score_batch(items)
    assert ok.error is None and ok.parts["judge"] == 1.0
    assert "answered 400" in refused.error and refused.parts["judge"] == 0.0
    assert "sent no chat completion" in malformed.error
    assert "no verdict could be read in the judge's reply 'Correct or not'" in hedged.error


def test_a_judge_that_fails_every_item_fails_the_batch(scripted: str) -> None:
    Scripted.script = [(503, "down")] * 6
    with (
        judge_client(scripted, retries=2) as client,
        pytest.raises(
            RewardFunctionError,
            match=r"judge failed on all 2 items.*unreachable after 3 attempts: status 503",
        ),
    ):
        client.score_batch([(OPEN, "one"), (OTHER, "two")])


# --- a real vLLM OpenAI-compatible server ------------------------------------------------------------


@pytest.fixture(scope="module")
def vllm_judge(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """vLLM's OpenAI server (what `vllm serve` runs) of a tiny random-weight Qwen2.5-VL, on 127.0.0.1."""
    from services.common.tiny_models import build_tiny_model

    model = build_tiny_model("qwen2_5_vl", tmp_path_factory.mktemp("judge") / "model", seed=0)
    port = free_port()
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "VLLM_CPU_KVCACHE_SPACE": "1"}
    command = [
        sys.executable, "-m", "vllm.entrypoints.openai.api_server", "--model", str(model),
        "--served-model-name", "judge", "--host", "127.0.0.1", "--port", str(port),
        "--max-model-len", "1024", "--enforce-eager", "--dtype", "float32",
    ]  # fmt: skip
    url = f"http://127.0.0.1:{port}"
    log = tmp_path_factory.mktemp("judge-log") / "server.log"
    with served(command, f"{url}/health", log, env, start_s=300, stop_s=60):
        yield f"{url}/v1"


def ask(url: str, prompt: str, constrain: bool) -> str:
    """What the server itself replies to the judge's request (temperature 0: the same every time)."""
    body: dict[str, Any] = {
        "model": "judge", "messages": [{"role": "user", "content": prompt}], "max_tokens": 16, "temperature": 0.0,
    }  # fmt: skip
    if constrain:
        body["structured_outputs"] = {"choice": ["Correct", "Incorrect"]}
    reply = httpx.post(f"{url}/chat/completions", json=body, timeout=120)
    reply.raise_for_status()
    return reply.json()["choices"][0]["message"]["content"]


@pytest.mark.integration
@pytest.mark.slow
def test_a_vllm_judge_gives_verdicts_and_a_garbage_one_fails_items_alone(vllm_judge: str) -> None:
    items = [(OPEN, "a red square"), (OTHER, "to the right"), (OPEN, "a red square")]
    with judge_client(vllm_judge, constrain=True) as client:
        results = client.score_batch(items)
        judge = counters(client)
        assert (judge.requests, judge.cache_hits) == (2, 1)
        # constrained, a random-weight model still answers a verdict word: the one the server gives
        for (sample, response), result in zip(items, results, strict=True):
            reply = ask(vllm_judge, judge_prompt(sample["problem"], sample["answer"], response), True)
            assert reply in ("Correct", "Incorrect") and result.error is None
            assert result.parts["judge"] == read_verdict(reply)
        # unconstrained, the same model answers noise: each such item fails alone and is counted, while
        # a verdict already cached for the same prompt still stands
        client.parts[0][0].fn.config = client.parts[0][0].fn.config.model_copy(update={"constrain": False})
        cached, fresh = client.score_batch([(OPEN, "a red square"), (OTHER, "up and away")])
    garbage = ask(vllm_judge, judge_prompt("Which way?", "to the left", "up and away"), False)
    assert read_verdict(garbage) is None, garbage  # the tiny model's noise is no verdict
    assert cached.error is None and cached.parts["judge"] == results[0].parts["judge"]
    reason = f"no verdict could be read in the judge's reply {garbage[:200]!r}"
    assert fresh.error == f"reward function judge raised JudgeError: {reason}"
    assert fresh.parts["judge"] == 0.0


@pytest.mark.integration
def test_an_unreachable_judge_fails_the_batch_by_name() -> None:
    with (
        judge_client(f"http://127.0.0.1:{free_port()}/v1", retries=1) as client,
        pytest.raises(
            RewardFunctionError,
            match=r"judge failed on all 1 items.*unreachable after 2 attempts: ConnectError",
        ),
    ):
        client.score_batch([(OPEN, "a red square")])


@pytest.mark.integration
@pytest.mark.slow
def test_the_colour_task_trains_on_a_mix_with_a_vllm_judge(
    vllm_judge: str, reelrl_home: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """examples/tiny_cpu_judge.yaml for two steps: every part is logged, and the logged overall is the
    weighted sum of the logged parts (all means over the same responses)."""
    from services.trainer.config import load_config
    from services.trainer.loop import Trainer
    from tests.trainer.loop_runs import colour_task, step_metrics

    data, model = colour_task(tmp_path)
    monkeypatch.chdir(ROOT)  # the example names its reward functions from the repository root
    overrides = {
        "data.train_files": f"[{data['colour_mix']}]", "data.val_files": "[]", "data.batch_size": 2,
        "actor.model_path": str(model), "trainer.output_dir": str(tmp_path / "out"),
        "trainer.total_steps": 2, "trainer.val_before_train": "false", "trainer.loggers": "[jsonl]",
        "reward.judge.url": vllm_judge,
    }  # fmt: skip
    config = load_config(
        ROOT / "examples" / "tiny_cpu_judge.yaml", [f"{k}={v}" for k, v in overrides.items()]
    )
    Trainer(config).fit()
    weights = {"builtin": 1.0, "answer_first": 0.2, "brevity": 0.1, "judge": 0.5}
    for step in (1, 2):
        metrics = step_metrics(tmp_path / "out", step)
        parts = {name: metrics[f"reward/{name}"] for name in weights}
        assert metrics["reward/overall"] == pytest.approx(
            sum(weights[n] * parts[n] for n in weights), abs=1e-6
        )
        assert "reward/answer_first/preamble_chars" in metrics
        assert 0.0 <= parts["judge"] <= 1.0 and metrics["reward/errors"] == 0.0
