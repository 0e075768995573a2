"""RewardClient: the factory, the in-process client, and the HTTP client's retries and errors."""

import httpx
import pytest

from services.reward import HttpRewardClient, InProcessRewardClient, RewardConfig, make_reward_client
from services.reward.client import RewardServiceError, sample_payload
from services.reward.errors import InvalidSample
from services.reward.sample import RewardSample

MC = {"problem_type": "mcq", "answer": "B", "options": ["A. red", "B. blue"]}
OK_RESULT = {
    "overall": 1.0,
    "accuracy": 1.0,
    "format": 1.0,
    "extracted": "B",
    "problem_type": "multiple choice",
}


def test_factory_picks_by_url():
    assert isinstance(make_reward_client(RewardConfig()), InProcessRewardClient)
    http = make_reward_client(RewardConfig(url="http://reward:8100"))
    assert isinstance(http, HttpRewardClient)
    http.close()


def test_in_process_client_marks_bad_items():
    with InProcessRewardClient(RewardConfig(w_acc=1.0, w_fmt=0.0)) as client:
        good, bad = client.score_batch([(MC, "B"), ({"problem_type": "?", "answer": "B"}, "B")])
    assert (good.overall, good.error) == (1.0, None)  # 1.0·1 + 0·0
    assert "unknown problem_type" in bad.error
    assert len(client.problem_types()) == 15


def test_validated_samples_travel_in_the_input_schema():
    sample = RewardSample.model_validate(MC)
    payload = sample_payload(sample)
    assert payload["options"] == ["A. red", "B. blue"]
    assert RewardSample.model_validate(payload) == sample


def test_http_client_chunks_sends_options_and_retries_503():
    calls = []

    def handler(request: httpx.Request) -> httpx.Response:
        calls.append(request)
        if len(calls) == 1:
            return httpx.Response(503)
        items = httpx.Response(200, content=request.content).json()["items"]
        return httpx.Response(200, json={"results": [OK_RESULT] * len(items)})

    config = RewardConfig(url="http://reward", http_batch_size=2, w_acc=0.8, w_fmt=0.2)
    client = HttpRewardClient(config, transport=httpx.MockTransport(handler))
    results = client.score_batch([(MC, "B")] * 3)
    assert [r.accuracy for r in results] == [1.0, 1.0, 1.0]
    # one 503, then the retry of chunk 1 (2 items), then chunk 2 (1 item)
    bodies = [httpx.Response(200, content=c.content).json() for c in calls]
    assert [len(b["items"]) for b in bodies] == [2, 2, 1]
    assert bodies[0]["options"] == {
        "w_acc": 0.8,
        "w_fmt": 0.2,
        "strict_format": False,
        "max_response_chars": 60000,
    }


def test_http_client_reports_rejections_and_gives_up():
    rejecting = HttpRewardClient(
        RewardConfig(url="http://reward"),
        transport=httpx.MockTransport(lambda r: httpx.Response(413, json={"detail": "too many"})),
    )
    with pytest.raises(RewardServiceError, match=r"413.*too many"):
        rejecting.score_batch([(MC, "B")])

    def refuse(request):
        raise httpx.ConnectError("refused", request=request)

    unreachable = HttpRewardClient(
        RewardConfig(url="http://reward", http_retries=1), transport=httpx.MockTransport(refuse)
    )
    with pytest.raises(RewardServiceError, match="gave up after retries"):
        unreachable.score_batch([(MC, "B")])


def test_http_client_names_a_non_finite_number_before_sending():
    sent = []
    client = HttpRewardClient(
        RewardConfig(url="http://reward", http_batch_size=2),
        transport=httpx.MockTransport(lambda r: sent.append(r) or httpx.Response(500)),
    )
    items = [
        (MC, "B"),
        (MC, "B"),
        ({"problem_type": "regression", "answer": 3, "meta": [1, float("nan")]}, "3"),
    ]
    with pytest.raises(InvalidSample, match=r"item 2: sample\.meta\.1 is NaN; JSON has no non-finite"):
        client.score_batch(items)
    assert sent == []  # refused whole: no chunk went out
