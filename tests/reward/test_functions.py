"""Reward functions from a file: loading, confinement, isolation, concurrency, the weighted mix, and the
reward service serving configured functions by name (in-process app and `reelrl serve reward`)."""

from __future__ import annotations

import asyncio
import math
import os
import sys
import time
from pathlib import Path

import pytest
from fastapi.testclient import TestClient

from services.reward import RewardConfig, make_reward_client
from services.reward.app import create_app
from services.reward.functions import (
    FunctionRunner,
    Outcome,
    PluginRefused,
    RewardFunctionError,
    confine,
    load_function,
    parse_target,
    read_returned,
)
from services.reward.mix import MixedRewardClient, check_not_all_failed, combine
from services.reward.result import RewardResult
from services.reward.settings import RewardServiceSettings
from tests.servers import free_port, served

MC = {"id": "q1", "problem_type": "multiple choice", "answer": "B", "options": ["A. red", "B. blue"]}

PLUGIN = '''
import asyncio

calls = []


def brevity(sample, response):
    """1 for a reply of at most 20 characters, less the longer it gets; extras logged beside it."""
    calls.append(sample.id)
    return {"overall": min(1.0, 20 / max(len(response), 1)), "chars": float(len(response))}


def says_blue(sample, response):
    if "boom" in response:
        raise RuntimeError("the plugin broke on " + sample.id)
    if "nan" in response:
        return float("nan")
    if "text" in response:
        return "high"
    return 1.0 if "blue" in response else 0.0


def always_raises(sample, response):
    raise KeyError("no field " + sample.problem_type)


def spins(sample, response):
    while "slow" in response:
        pass
    return 0.5


async def waits(sample, response):
    if "slow" in response:
        await asyncio.sleep(60)
    return 0.25
'''


@pytest.fixture
def plugin(tmp_path: Path) -> Path:
    path = tmp_path / "plugins" / "my_rewards.py"
    path.parent.mkdir()
    path.write_text(PLUGIN)
    return path


def test_a_target_is_a_python_file_and_a_function_name() -> None:
    assert parse_target("rewards/my.py:score") == ("rewards/my.py", "score")
    assert parse_target("/abs/x:y.py:f") == ("/abs/x:y.py", "f")  # the last colon separates
    for bad in ("rewards/my.py", "rewards/my.py:", ":score", "rewards/my.py:not-a-name", "rewards/my.txt:f"):
        with pytest.raises(RewardFunctionError, match="reward function"):
            parse_target(bad)


def test_returned_values_are_read_strictly() -> None:
    assert read_returned(0.25) == (0.25, {})
    assert read_returned(1) == (1.0, {})
    assert read_returned({"overall": 0.5, "len": 3}) == (0.5, {"len": 3.0})
    assert read_returned({"first": 0.75, "second": 0.0}) == (0.75, {"second": 0.0})  # no overall: the first
    for bad, why in (
        (float("nan"), "nan"), (float("inf"), "inf"), ("0.9", "str"), (True, "bool"), (None, "NoneType"),
        ({}, "empty dict"), ({"overall": "x"}, "str"), ({"a b": 1.0}, "not a name"), ({"a": math.nan}, "nan"),
    ):  # fmt: skip
        with pytest.raises(ValueError, match=why):
            read_returned(bad)


def test_load_names_a_missing_file_function_or_import_error(tmp_path: Path, plugin: Path) -> None:
    assert load_function(f"{plugin}:brevity").__name__ == "brevity"
    with pytest.raises(RewardFunctionError, match="no file"):
        load_function(f"{tmp_path}/absent.py:f")
    with pytest.raises(RewardFunctionError, match="defines no 'absent'"):
        load_function(f"{plugin}:absent")
    with pytest.raises(RewardFunctionError, match="not callable"):
        load_function(f"{plugin}:calls")
    broken = tmp_path / "broken.py"
    broken.write_text("import no_such_module_anywhere\n")
    with pytest.raises(RewardFunctionError, match="ModuleNotFoundError"):
        load_function(f"{broken}:f")


def test_a_job_may_load_only_files_inside_the_plugin_roots(tmp_path: Path, plugin: Path) -> None:
    root = plugin.parent
    assert confine("my_rewards.py:brevity", [root]) == f"{plugin.resolve()}:brevity"
    assert confine(f"{plugin}:brevity", [tmp_path / "elsewhere", root]) == f"{plugin.resolve()}:brevity"
    outside = tmp_path / "outside.py"
    outside.write_text(PLUGIN)
    (root / "link.py").symlink_to(outside)
    for target in (f"{outside}:f", "../outside.py:f", f"{root}/../outside.py:f", "link.py:f", "absent.py:f"):
        with pytest.raises(PluginRefused, match="not a file inside the plugin roots"):
            confine(target, [root])
    with pytest.raises(PluginRefused, match="REELRL_PLUGIN_ROOTS"):
        confine(f"{plugin}:brevity", [])


def test_the_api_job_config_confines_reward_functions(tmp_path: Path, plugin: Path, monkeypatch) -> None:
    from services.common.settings import reset_settings_cache
    from services.trainer.config import TrainConfig, TrainJobConfig

    (tmp_path / "m").mkdir()
    (tmp_path / "m" / "config.json").write_text("{}")
    job = {
        "data": {"train_files": ["d/t.jsonl"]}, "actor": {"model_path": "m"}, "trainer": {"output_dir": "runs/a"},
        "reward": {"functions": [{"name": "brevity", "path": "my_rewards.py:brevity", "weight": 0.5}]},
    }  # fmt: skip
    monkeypatch.setenv("REELRL_DATA_ROOTS", str(tmp_path))
    monkeypatch.delenv("REELRL_PLUGIN_ROOTS", raising=False)
    reset_settings_cache()
    try:
        with pytest.raises(ValueError, match=r"reward.functions\[0\] \(brevity\).*REELRL_PLUGIN_ROOTS"):
            TrainJobConfig.model_validate(job)
        monkeypatch.setenv("REELRL_PLUGIN_ROOTS", str(plugin.parent))
        reset_settings_cache()
        ok = TrainJobConfig.model_validate(job)
        assert ok.reward.functions[0].path == f"{plugin.resolve()}:brevity"
        escape = {"name": "brevity", "path": "../../etc/x.py:f"}
        with pytest.raises(ValueError, match="not a file inside the plugin roots"):
            TrainJobConfig.model_validate({**job, "reward": {"functions": [escape]}})
        # the CLI on one's own machine names any file
        assert TrainConfig.model_validate({**job, "reward": {"functions": [escape]}}).reward.functions
    finally:
        reset_settings_cache()


def test_the_config_refuses_shadowing_twice_used_and_unservable_names() -> None:
    fn = {"name": "brevity", "path": "x.py:f"}
    with pytest.raises(ValueError, match="used more than once"):
        RewardConfig(functions=[fn, fn])
    with pytest.raises(ValueError, match="shadow"):
        RewardConfig(functions=[{**fn, "name": "accuracy"}])
    with pytest.raises(ValueError, match="no reward service"):
        RewardConfig(functions=[{"name": "judge_like"}])
    with pytest.raises(ValueError, match="pattern"):
        RewardConfig(functions=[{**fn, "name": "Has Space"}])
    with pytest.raises(ValueError):
        RewardConfig(functions=[{**fn, "weight": float("nan")}])
    RewardConfig(url="http://127.0.0.1:1", functions=[{"name": "served_by_name"}])


def test_calls_run_at_once_up_to_the_limit_and_keep_their_loop_between_batches() -> None:
    state = {"now": 0, "most": 0, "lock": None}

    async def counted(sample, response):
        # an asyncio.Lock binds to the loop of its first use: a second loop per batch would fail here
        state["lock"] = state["lock"] or asyncio.Lock()
        async with state["lock"]:
            state["now"] += 1
            state["most"] = max(state["most"], state["now"])
        await asyncio.sleep(0.05)
        async with state["lock"]:
            state["now"] -= 1
        return len(response) / 10

    runner = FunctionRunner("counted", counted, timeout_s=10, concurrency=3)
    try:
        items = [(None, "x" * i) for i in range(7)]
        assert [o.value for o in runner.run(items)] == [i / 10 for i in range(7)]
        assert state["most"] == 3
        assert [o.value for o in asyncio.run(runner.arun(items[:2]))] == [0.0, 0.1]
    finally:
        runner.close()


@pytest.mark.parametrize("name", ["spins", "waits"])
def test_a_call_past_its_limit_fails_that_item_alone(plugin: Path, name: str) -> None:
    runner = FunctionRunner(name, load_function(f"{plugin}:{name}"), timeout_s=0.5, concurrency=4)
    try:
        fast, slow = runner.run([(None, "quick"), (None, "slow")])
    finally:
        runner.close()
    assert fast.error is None and fast.value == (0.5 if name == "spins" else 0.25)
    assert slow.error == f"reward function {name}: no result within 0.5 s"


def test_a_plugin_raising_system_exit_or_cancelled_fails_its_item_and_the_runner_goes_on() -> None:
    def exits(sample, response):
        if response == "exit":
            raise SystemExit(3)
        if response == "interrupt":
            raise KeyboardInterrupt
        return 1.0

    async def aexits(sample, response):
        if response == "exit":
            raise SystemExit(3)
        if response == "cancelled":
            raise asyncio.CancelledError
        return 1.0

    for fn, bad in ((exits, ["exit", "interrupt"]), (aexits, ["exit", "cancelled"])):
        runner = FunctionRunner("exits", fn, timeout_s=5, concurrency=2)
        try:
            outcomes = runner.run([(None, "ok"), *((None, b) for b in bad)])
            assert outcomes[0] == Outcome(1.0)
            assert [o.error.split(":")[0] for o in outcomes[1:]] == [
                f"reward function exits raised {name}"
                for name in ("SystemExit", "KeyboardInterrupt" if fn is exits else "CancelledError")
            ]
            assert runner.run([(None, "again")]) == [Outcome(1.0)]  # the loop lives on
        finally:
            runner.close()


def test_an_async_function_that_blocks_its_loop_is_stopped_at_the_batch_deadline() -> None:
    """An async function calling time.sleep holds the loop where asyncio.wait_for cannot fire: the batch
    ends at its deadline (the limit per wave of calls, plus grace), the unfinished items fail, and the
    next batch runs on a fresh loop."""

    async def blocks(sample, response):
        if response == "block":
            time.sleep(4)  # the mistake: blocking instead of awaiting
        return 0.5

    runner = FunctionRunner("blocks", blocks, timeout_s=0.5, concurrency=4)
    try:
        began = time.monotonic()
        quick, blocked = runner.run([(None, "quick"), (None, "block")])
        # the batch ended at its deadline (0.5 s + 2 s of grace), before the blocking call let go (4 s)
        assert time.monotonic() - began < 3.9
        assert "blocked their event loop" in blocked.error
        assert quick.error is not None  # the loop it waited on was held: it cannot have finished
        assert asyncio.run(runner.arun([(None, "fine")])) == [Outcome(0.5)]
    finally:
        runner.close()


def test_the_gate_reads_the_builtin_reward_alone(plugin: Path) -> None:
    """The rollout's mix gate reads accuracy: it gets the mix's builtin client, so a function failing on
    one item cannot fail generation (the mixed result carries that item's error)."""
    from services.rollout.config import RolloutConfig
    from services.rollout.groups import gate_accuracies
    from services.rollout.samples import RolloutResponse, RolloutSample

    config = RewardConfig(functions=[{"name": "says_blue", "path": f"{plugin}:says_blue"}])
    sample = RolloutSample(id="q1", prompt="?", offline_output="<answer>B</answer>", reward=MC)
    generated = [
        (
            [1],
            [
                RolloutResponse(
                    token_ids=[2],
                    logprobs=[0.0],
                    text=t,
                    finish_reason="stop",
                    weight_version=0,
                    weight_versions=((0, 0),),
                )
                for t in ("<answer>B</answer>", "boom")
            ],
        )
    ]
    rollout = RolloutConfig(n=3, mix_policy=True, mix_accuracy_threshold=0.5)
    with make_reward_client(config) as client:
        assert client.builtin() is client.base and client.builtin().builtin() is client.base
        assert gate_accuracies([sample], generated, rollout, client.builtin()) == [[1.0, 0.0]]
        with pytest.raises(
            ValueError, match="the mix gate cannot score it: reward function says_blue raised"
        ):
            gate_accuracies([sample], generated, rollout, client)
    assert config.builtin_only().functions == [] and config.builtin_only().judge is None


def test_the_weighted_mix_by_hand() -> None:
    base = [
        RewardResult(overall=0.9, accuracy=1.0, format=0.0, problem_type="multiple choice"),
        RewardResult.failed("item 1: unknown problem_type"),
    ]
    parts = [
        ("brevity", 2.0, [Outcome(0.4, {"chars": 30.0}), Outcome(0.5)]),
        ("blue", -1.0, [Outcome(error="reward function blue raised RuntimeError: x"), Outcome(1.0)]),
    ]
    first, second = combine(base, parts, builtin_weight=0.5)
    assert first.overall == pytest.approx(0.5 * 0.9 + 2.0 * 0.4)  # the failed part counts 0
    assert first.parts == {"builtin": 0.9, "brevity": 0.4, "brevity/chars": 30.0, "blue": 0.0}
    assert first.error == "reward function blue raised RuntimeError: x"
    assert (first.accuracy, first.format, first.problem_type) == (1.0, 0.0, "multiple choice")
    assert second.overall == pytest.approx(0.0 + 2.0 * 0.5 - 1.0)
    assert second.error == "item 1: unknown problem_type"
    check_not_all_failed("brevity", parts[0][2])
    with pytest.raises(RewardFunctionError, match=r"failed on all 1 items(?s:.*)\nTraceback"):
        check_not_all_failed(
            "x", [Outcome(error="reward function x raised KeyError", trace="Traceback (...)")]
        )


def test_the_client_mixes_isolates_and_fails_a_batch_that_failed_throughout(plugin: Path) -> None:
    config = RewardConfig(
        builtin_weight=0.5,
        functions=[
            {"name": "brevity", "path": f"{plugin}:brevity", "weight": 1.0},
            {"name": "says_blue", "path": f"{plugin}:says_blue", "weight": 2.0},
        ],
    )
    custom = {"id": "q2", "problem_type": "horoscope", "answer": "B"}  # a type only the functions know
    bad = {"id": "q3", "problem_type": "mcq"}  # no answer: not a sample at all
    items = [
        (MC, "<answer>B</answer> blue"), (MC, "<answer>A</answer> boom"), (MC, "nan"), (MC, "text"),
        (custom, "blue"), (bad, "blue"),
    ]  # fmt: skip
    with make_reward_client(config) as client:
        assert isinstance(client, MixedRewardClient)
        results = client.score_batch(items)
        assert asyncio.run(client.ascore_batch(items)) == results
    right, boom, nan, text, unknown, invalid = results
    # "<answer>B</answer> blue": 23 characters
    assert right.parts == {"builtin": 1.0, "brevity": 20 / 23, "brevity/chars": 23.0, "says_blue": 1.0}
    assert right.overall == pytest.approx(0.5 * 1.0 + 20 / 23 + 2.0) and right.error is None
    assert boom.parts["says_blue"] == 0.0 and boom.overall == pytest.approx(0.5 * 0.1 + 20 / 23)
    assert "says_blue raised RuntimeError: the plugin broke on q1" in boom.error
    assert "says_blue the returned value is nan" in nan.error
    assert "says_blue the returned value is str" in text.error
    # a problem type the library does not know: the functions still score it, the builtin's error stays
    assert "unknown problem_type 'horoscope'" in unknown.error
    assert unknown.overall == pytest.approx(0.5 * 0.0 + 1.0 + 2.0 * 1.0)
    # a sample that is not one: no function is called with it, the item fails alone
    assert "field answer" in invalid.error and "functions not called" in invalid.error
    assert invalid.overall == 0.0 and invalid.parts == {"builtin": 0.0, "brevity": 0.0, "says_blue": 0.0}

    broken = RewardConfig(functions=[{"name": "raises", "path": f"{plugin}:always_raises"}])
    with (
        make_reward_client(broken) as client,
        pytest.raises(
            RewardFunctionError, match=r"(?s)raises failed on all 2 items.*KeyError.*always_raises"
        ),
    ):
        client.score_batch([(MC, "a"), (MC, "b")])


def test_without_functions_the_client_is_the_library_itself() -> None:
    from services.reward.client import InProcessRewardClient

    with make_reward_client(RewardConfig()) as client:
        assert isinstance(client, InProcessRewardClient)
        assert client.score(MC, "<answer>B</answer>").parts is None


def test_the_app_scores_items_naming_a_served_function(plugin: Path) -> None:
    settings = RewardServiceSettings(
        warm_math=False, functions=f"brevity={plugin}:brevity,says_blue={plugin}:says_blue"
    )
    with TestClient(create_app(settings)) as http:
        body = {
            "items": [
                {"sample": MC, "response": "<answer>B</answer>"},
                {"sample": MC, "response": "blue", "reward_function": "brevity"},
                {"sample": MC, "response": "boom", "reward_function": "says_blue"},
                {"sample": MC, "response": "b", "reward_function": "not_served"},
                {"sample": {"problem_type": "mcq"}, "response": "b", "reward_function": "brevity"},
            ]
        }
        builtin, served, raised, unknown, invalid = http.post("/v1/score", json=body).json()["results"]
    assert builtin["overall"] == 1.0 and builtin["parts"] is None
    assert served["overall"] == 1.0 and served["parts"] == {"brevity": 1.0, "brevity/chars": 4.0}
    assert "says_blue raised RuntimeError" in raised["error"] and raised["overall"] == 0.0
    assert "'not_served' is not served here" in unknown["error"] and "brevity" in unknown["error"]
    assert "answer" in invalid["error"]


def test_a_service_refuses_to_start_with_a_bad_function(tmp_path: Path) -> None:
    with pytest.raises(RewardFunctionError, match="no file"):
        create_app(RewardServiceSettings(warm_math=False, functions=f"x={tmp_path}/absent.py:f"))
    with pytest.raises(ValueError, match="expected name=path"):
        RewardServiceSettings(functions="just/a/path.py:f")


@pytest.mark.integration
def test_a_trainer_asks_the_service_for_its_functions_by_name(plugin: Path) -> None:
    """`reelrl serve reward --reward-function` (2 uvicorn workers); the client names a function without a
    path and gets the service's scores, mixed as a local function's would be."""
    port = free_port()
    reelrl = Path(sys.executable).with_name("reelrl")
    command = [str(reelrl), "serve", "reward", "--port", str(port), "--workers", "2",
               "--reward-function", f"brevity={plugin}:brevity"]  # fmt: skip
    env = {
        k: v
        for k, v in os.environ.items()
        if k not in ("PROMETHEUS_MULTIPROC_DIR", "REELRL_REWARD_FUNCTIONS")
    }
    url = f"http://127.0.0.1:{port}"
    with served(command, f"{url}/healthz", plugin.parent / "service.log", env, start_s=90):
        items = [(MC, "<answer>B</answer>"), (MC, "<answer>A</answer>" + "x" * 30)]
        remote = RewardConfig(url=url, functions=[{"name": "brevity", "weight": 0.5}])
        local = RewardConfig(functions=[{"name": "brevity", "path": f"{plugin}:brevity", "weight": 0.5}])
        with make_reward_client(remote) as over_http, make_reward_client(local) as here:
            assert over_http.score_batch(items) == here.score_batch(items)
            assert asyncio.run(over_http.ascore_batch(items)) == here.score_batch(items)
        missing = RewardConfig(url=url, functions=[{"name": "absent"}])
        with make_reward_client(missing) as client, pytest.raises(RewardFunctionError, match="not served"):
            client.score_batch(items)


def test_plugin_source_stays_a_plain_module(plugin: Path) -> None:
    """The file is imported once per process, under a name derived from its path (two runs naming the same
    file share its module, so module-level state such as a client is built once)."""
    first = load_function(f"{plugin}:brevity")
    second = load_function(f"{plugin}:says_blue")
    assert sys.modules[first.__module__] is sys.modules[second.__module__]
