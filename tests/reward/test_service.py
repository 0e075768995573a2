"""The reward service as deployed: `reelrl serve reward` (real uvicorn, 2 workers) and concurrent clients."""

import asyncio
import http.client
import json
import os
import re
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from urllib.parse import urlsplit

import httpx
import pytest

from services.reward import HttpRewardClient, RewardConfig, score
from tests.servers import free_port, served

pytestmark = pytest.mark.integration

ITEMS = [
    ({"problem_type": "mcq", "answer": "B", "options": ["A. red", "B. blue"]}, "<answer>B</answer>"),
    ({"problem_type": "regression", "answer": "10"}, "<answer>12</answer>"),
    ({"problem_type": "math", "answer": "x^2+2x+1"}, r"<answer>\boxed{(x+1)^2}</answer>"),
    ({"problem_type": "temporal grounding", "answer": {"time": [2, 6]}}, '<answer>{"time": [4, 8]}</answer>'),
    ({"problem_type": "open-ended", "answer": "the cat sat on the mat"}, "the cat sat"),
    ({"problem_type": "no such type", "answer": "B"}, "B"),
]


@pytest.fixture(scope="module")
def service_url(tmp_path_factory: pytest.TempPathFactory):
    port = free_port()
    reelrl = Path(sys.executable).with_name("reelrl")
    command = [str(reelrl), "serve", "reward", "--port", str(port), "--workers", "2"]
    env = {k: v for k, v in os.environ.items() if k != "PROMETHEUS_MULTIPROC_DIR"}
    url = f"http://127.0.0.1:{port}"
    log = tmp_path_factory.mktemp("reward-service") / "service.log"
    with served(command, f"{url}/healthz", log, env, start_s=90):
        yield url


def _expected():
    results = []
    for sample, response in ITEMS:
        try:
            results.append(score(sample, response).overall)
        except ValueError:
            results.append(0.0)
    return results


def test_concurrent_clients_get_the_in_process_scores(service_url):
    expected = _expected()
    client = HttpRewardClient(RewardConfig(url=service_url))

    def one(_):
        return [r.overall for r in client.score_batch(ITEMS)]

    with ThreadPoolExecutor(16) as pool:
        answers = list(pool.map(one, range(48)))
    client.close()
    assert answers == [expected] * 48


def test_async_client_and_bad_item(service_url):
    async def run():
        client = HttpRewardClient(RewardConfig(url=service_url))
        batches = await asyncio.gather(*(client.ascore_batch(ITEMS) for _ in range(20)))
        await client.aclose()
        return batches

    batches = asyncio.run(run())
    assert [[r.overall for r in b] for b in batches] == [_expected()] * 20
    assert all("unknown problem_type 'no such type'" in b[-1].error for b in batches)


def test_problem_types_over_http(service_url):
    client = HttpRewardClient(RewardConfig(url=service_url))
    names = {t["name"] for t in client.problem_types()}
    client.close()
    assert {"multiple choice", "math", "tracking"} <= names and len(names) == 15


def test_metrics_sum_over_both_workers(service_url):
    def scored_requests() -> float:
        text = httpx.get(f"{service_url}/metrics").text
        pattern = r'reelrl_reward_requests_total\{method="POST",route="/v1/score",status="200"\} ([0-9.e+]+)'
        return sum(float(m) for m in re.findall(pattern, text))

    before = scored_requests()
    with httpx.Client(base_url=service_url) as http, ThreadPoolExecutor(8) as pool:
        body = {"items": [{"sample": ITEMS[0][0], "response": "B"}]}
        statuses = list(pool.map(lambda _: http.post("/v1/score", json=body).status_code, range(40)))
    assert statuses == [200] * 40
    # each worker keeps its own counters; the multiprocess collector must add up all 40
    assert scored_requests() - before == 40


def test_non_finite_numbers_get_422_and_keep_the_connection(service_url):
    # before: the 422 handler crashed serialising the NaN (500) and uvicorn dropped the keep-alive connection
    address = urlsplit(service_url)
    connection = http.client.HTTPConnection(address.hostname, address.port, timeout=30)
    headers = {"content-type": "application/json"}
    good = json.dumps({"items": [{"sample": ITEMS[0][0], "response": "<answer>B</answer>"}]})
    try:
        for body, field in [
            (b'{"items": [], "options": {"w_acc": NaN}}', ["body", "options", "w_acc"]),
            (b'{"items": [{"sample": {"problem_type": "mcq", "answer": "B"}, "response": 1e999}]}',
             ["body", "items", 0, "response"]),
        ]:  # fmt: skip
            connection.request("POST", "/v1/score", body=body, headers=headers)
            socket_before = connection.sock
            response = connection.getresponse()
            detail = json.loads(response.read())["detail"]
            assert (response.status, detail[0]["loc"], detail[0]["type"]) == (422, field, "finite_number")
            assert not response.will_close
            connection.request("POST", "/v1/score", body=good, headers=headers)
            assert connection.sock is socket_before  # the same keep-alive connection
            response = connection.getresponse()
            assert (response.status, json.loads(response.read())["results"][0]["overall"]) == (200, 1.0)
    finally:
        connection.close()


def test_a_chunk_full_of_absurd_math_answers_is_answered_with_notes(service_url):
    # the case: ~24 towers in one 256-item chunk cost 24 × 5 s on one helper and the client gave up
    tower = ({"problem_type": "math", "answer": "10"}, r"<answer>\boxed{9^{9^{9^{9}}}}</answer>")
    simple = ({"problem_type": "math", "answer": "2"}, r"<answer>\boxed{\sqrt{4}}</answer>")
    items = [tower] * 24 + [simple, ITEMS[0]] * 116
    client = HttpRewardClient(RewardConfig(url=service_url, http_timeout_s=60, http_retries=0))
    results = client.score_batch(items)
    client.close()
    assert len(results) == 256
    assert all(
        r.accuracy == 0.0 and r.note.startswith("math equivalence check refused") for r in results[:24]
    )
    assert all(r.accuracy == 1.0 and r.note is None and r.error is None for r in results[24:])
