"""``trainer.off_policy_steps``: the batch schedule (what runs when, on which thread), the checkpointed
batch, the behaviour log-probs of the ratio, the settings it refuses, and clipping of a ratio ≠ 1 in the
real update. The loop end to end: tests/trainer/test_off_policy_loop.py."""

from __future__ import annotations

import math
import threading
import time
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch

from services.rollout.samples import RolloutGroup, RolloutResponse
from services.trainer.ahead import (
    PENDING_FILE,
    Batch,
    BatchSchedule,
    behaviour_log_probs,
    load_pending,
    save_pending,
)
from services.trainer.config import ConfigError, parse_config
from services.trainer.placement import PlacementError, resolve

WAIT_S = 30.0  # a bound on waits between threads that normally take milliseconds


def online(tokens: list[int], logprobs: list[float] | None, version: int = 0) -> RolloutResponse:
    return RolloutResponse(
        token_ids=tokens, logprobs=logprobs, text="x", finish_reason="stop", weight_version=version,
        weight_versions=((0, version),),
    )  # fmt: skip


def offline(tokens: list[int]) -> RolloutResponse:
    return RolloutResponse(token_ids=tokens, logprobs=None, text="y", finish_reason="offline", offline=True)


def sample(sample_id: str) -> SimpleNamespace:
    return SimpleNamespace(sample=SimpleNamespace(id=sample_id))


# ---------------------------------------------------------------------- the schedule ----------------


def recording(log: list[tuple[int, str]]):
    def generate(step: int):
        log.append((step, threading.current_thread().name))
        return [sample(f"s{step}")], [], {"rollout/groups": float(step)}

    return generate


def test_on_policy_generates_each_batch_when_its_step_takes_it() -> None:
    log: list[tuple[int, str]] = []
    schedule = BatchSchedule(recording(log), off_policy_steps=0, last_step=3)
    for step in (1, 2, 3):
        batch = schedule.take(step)
        assert (batch.lag, batch.metrics) == (0, {"rollout/groups": float(step)})
        assert schedule.pending() is None
        schedule.settle()
    schedule.close()
    assert log == [(s, threading.current_thread().name) for s in (1, 2, 3)]


def test_one_step_ahead_generates_the_next_batch_while_the_step_works() -> None:
    """Generating step 2 waits for a signal that only the caller's 'update' of step 1 gives, and the
    update waits for generation to have begun: only concurrent work finishes both."""
    began, updated = threading.Event(), threading.Event()
    log: list[tuple[int, str]] = []

    def generate(step: int):
        log.append((step, threading.current_thread().name))
        if step == 2:
            began.set()
            assert updated.wait(WAIT_S), "step 1's update never ran beside the generation"
        return [sample(f"s{step}")], [], {}

    schedule = BatchSchedule(generate, off_policy_steps=1, last_step=3)
    first = schedule.take(1)
    assert first.lag == 0 and log[0] == (1, threading.current_thread().name)
    assert began.wait(WAIT_S), "step 2's batch was not being generated during step 1"
    updated.set()  # step 1's update
    schedule.settle()  # before the push
    step, ahead = schedule.pending()
    assert (step, ahead.lag, [s.sample.id for s in ahead.samples]) == (2, 1, ["s2"])
    assert schedule.take(2) is ahead
    schedule.settle()
    assert schedule.take(3).lag == 1
    assert schedule.pending() is None  # nothing after the last step
    schedule.close()
    assert [s for s, _ in log] == [1, 2, 3]
    assert all(name.startswith("rollout-ahead") for _, name in log[1:])


def failing_ahead(error: BaseException):
    """A ``generate`` whose step-2 batch (the first one generated ahead) raises ``error``."""

    def generate(step: int):
        if step == 2:
            raise error
        return [sample("a")], [], {}

    return generate


def test_a_failed_generation_ahead_fails_at_the_settle_not_a_step_later() -> None:
    schedule = BatchSchedule(failing_ahead(RuntimeError("engine 0 failed")), off_policy_steps=1, last_step=3)
    schedule.take(1)
    with pytest.raises(RuntimeError, match="engine 0 failed"):
        schedule.settle()
    schedule.close()  # the failure already reported: closing does not raise it again
    assert schedule.pending() is None


def test_the_schedule_refuses_a_step_out_of_turn_and_an_unknown_setting() -> None:
    schedule = BatchSchedule(recording([]), off_policy_steps=1, last_step=5)
    schedule.take(1)
    with pytest.raises(RuntimeError, match="for step 2, not 3"):
        schedule.take(3)
    schedule.close()
    with pytest.raises(ValueError, match="0 or 1"):
        BatchSchedule(recording([]), off_policy_steps=2, last_step=5)


# ---------------------------------------------------------------------- the checkpointed batch -------


def test_a_checkpoint_keeps_the_batch_generated_ahead_bit_for_bit(tmp_path: Path) -> None:
    samples = [sample("a"), sample("b"), sample("c")]
    groups = [
        RolloutGroup(sample_id="c", prompt_token_ids=[1, 2], responses=[online([5, 6], [-0.1, -1 / 3])]),
        RolloutGroup(
            sample_id="a", prompt_token_ids=[3], responses=[online([7], [-2.5e-8], 4), offline([8])]
        ),
    ]
    batch = Batch([samples[2], samples[0]], groups, {"rollout/dynamic_sampling_rounds": 2.0}, lag=1)
    save_pending(tmp_path, None, samples)
    assert not (tmp_path / PENDING_FILE).exists()
    save_pending(tmp_path, (7, batch), samples)
    step, back = load_pending(tmp_path, samples)
    assert step == 7 and back.lag == 1 and back.metrics == batch.metrics
    assert back.samples[0] is samples[2] and back.samples[1] is samples[0]
    assert back.groups == groups  # the log-probs included, exactly
    assert load_pending(tmp_path / "elsewhere", samples) is None
    with pytest.raises(ValueError, match="do not answer its samples"):
        load_pending(tmp_path, [sample("x"), sample("y"), sample("z")])


# ---------------------------------------------------------------------- the ratio's old log-probs ----


def test_behaviour_log_probs_are_vllms_and_offline_rows_are_recomputed() -> None:
    groups = [
        RolloutGroup(
            sample_id="a", prompt_token_ids=[1], responses=[online([5, 6], [-0.5, -1.5]), offline([9])]
        ),
        RolloutGroup(sample_id="b", prompt_token_ids=[1], responses=[online([7], [-0.25])]),
    ]
    recomputed = [torch.tensor([-9.0, -9.0]), torch.tensor([-0.75]), torch.tensor([-9.0])]
    out = behaviour_log_probs(groups, recomputed)
    assert [t.tolist() for t in out] == [[-0.5, -1.5], [-0.75], [-0.25]]
    # without a recomputed pass an offline row is None: the update's current log-probs
    assert [None if t is None else t.tolist() for t in behaviour_log_probs(groups, None)] == [
        [-0.5, -1.5],
        None,
        [-0.25],
    ]
    with pytest.raises(ValueError, match="2 recomputed rows for 3 responses"):
        behaviour_log_probs(groups, recomputed[:2])
    broken = [RolloutGroup(sample_id="c", prompt_token_ids=[1], responses=[online([5, 6], [-0.5])])]
    with pytest.raises(ValueError, match="1 log-probs for 2 tokens"):
        behaviour_log_probs(broken, None)


# ---------------------------------------------------------------------- the settings -----------------


def config(**sections):
    data = {"data": {"train_files": ["t.jsonl"]}, "actor": {"model_path": "m"}}
    for name, values in sections.items():
        data[name] = {**data.get(name, {}), **values}
    return parse_config(data)


OFF = {"off_policy_steps": 1}


@pytest.mark.parametrize(
    ("sections", "message"),
    [
        (
            {"rollout": {"placement": "colocated"}, "trainer": {**OFF, "use_ray": True}},
            "colocated engines sleep through it",
        ),
        ({"rollout": {"engine": {"enable_sleep_mode": True}}, "trainer": OFF}, "enable_sleep_mode"),
        ({"algorithm": {"advantage_estimator": "remax"}, "rollout": {"greedy_baseline": True}, "trainer": OFF},
         "greedy baseline"),
        ({"rollout": {"temperature": 0.7}, "trainer": OFF}, "raw_logprobs are at temperature 1"),
        (
            {"rollout": {"top_p": 0.9, "engine": {"logprobs_mode": "processed_logprobs"}}, "trainer": OFF},
            "renormalised over the kept tokens",
        ),
    ],
)  # fmt: skip
def test_settings_whose_log_probs_or_engines_cannot_serve_the_ratio_are_refused(sections, message) -> None:
    with pytest.raises(ConfigError, match=message):
        config(**sections)


def test_settings_off_policy_runs_with() -> None:
    assert config(trainer=OFF).trainer.off_policy_steps == 1
    assert config().trainer.off_policy_steps == 0
    # the sampled distribution's log-probs at any temperature, without truncation
    config(rollout={"temperature": 0.7, "engine": {"logprobs_mode": "processed_logprobs"}}, trainer=OFF)
    # raw log-probs with top-p: the ratio is over the full softmax on both sides
    config(rollout={"top_p": 0.9}, trainer=OFF)
    config(rollout={"placement": "disaggregated"}, trainer={**OFF, "use_ray": True})
    with pytest.raises(ConfigError, match="off_policy_steps"):
        config(trainer={"off_policy_steps": 2})


def test_a_null_placement_that_resolves_to_colocated_is_refused_off_policy() -> None:
    cfg = config(actor={"world_size": 2}, trainer={**OFF, "use_ray": True})
    with pytest.raises(PlacementError, match=r"resolved to colocated here: trainer\.off_policy_steps=1"):
        resolve(cfg, cuda=True)
    assert resolve(cfg, cuda=False).placement == "disaggregated"


# ---------------------------------------------------------------------- clipping in the real update --


def lagging_update(world, cfg, groups, adv, shifts):
    """One real update on ``groups`` as a lagging batch whose sampled responses' behaviour log-probs
    are the current ones plus ``shifts`` (one per response, None for an offline one): vLLM's report
    when log r = -shift. Returns the weights before and after and the update's metrics."""
    from services.trainer.group import LocalActorGroup
    from services.trainer.update import SequenceTargets
    from tests.trainer.actor_steps import UPDATE

    group = LocalActorGroup(cfg, str(world.model), world.store, cfg.effective_rollout())
    try:
        initial = {k: v.clone() for k, v in group.state_dict().items()}
        group.load_batch(list(world.samples), groups)
        current = group.log_probs(temperature=1.0)
        reported = iter(
            [None if s is None else (c + s).tolist() for c, s in zip(current, shifts, strict=True)]
        )
        lagging = [
            g.model_copy(update={"responses": [r.model_copy(update={"logprobs": next(reported)})
                                               for r in g.responses]})
            for g in groups
        ]  # fmt: skip
        # every shift None: the on-policy step (old = current for every row)
        old = [None] * len(adv) if all(s is None for s in shifts) else behaviour_log_probs(lagging, None)
        metrics = group.update([SequenceTargets(a, o) for a, o in zip(adv, old, strict=True)], **UPDATE)
        return initial, {k: v.clone() for k, v in group.state_dict().items()}, metrics
    finally:
        group.shutdown()


@pytest.mark.integration
def test_a_lagging_ratio_beyond_the_clip_range_moves_no_weight(tmp_path: Path) -> None:
    """Behaviour log-probs that put every token's ratio outside [0.8, 1.2] on the side where PPO clips
    (r = 1.5 where A > 0, r = 0.5 where A < 0): every token's loss is the constant clipped term, so
    the gradient is 0 and AdamW (no weight decay) leaves every weight as it was, with every token
    counted as clipped. Behaviour = current (r = 1) moves them."""
    from tests.trainer.actor_steps import advantages, build_world, make_groups, train_config

    world = build_world(tmp_path, samples=2)
    cfg = train_config(world)
    groups = make_groups(world, cfg.effective_rollout(), [[4, 6], [5, 3]])
    adv = advantages(groups)  # +1.5, -0.5, +1.0, -1.0
    beyond = [-math.log(1.5) if float(a[0]) > 0 else math.log(2.0) for a in adv]

    initial, final, metrics = lagging_update(world, cfg, groups, adv, beyond)
    assert metrics["clipfrac_higher"] + metrics["clipfrac_lower"] == pytest.approx(1.0)
    assert metrics["clipfrac_higher"] > 0 and metrics["clipfrac_lower"] > 0
    assert metrics["ppo_kl"] > 0.05  # the ratio is far from 1
    assert all(torch.equal(initial[k], final[k]) for k in initial)
    initial, final, metrics = lagging_update(world, cfg, groups, adv, [0.0] * len(adv))
    assert metrics["clipfrac_higher"] + metrics["clipfrac_lower"] == 0.0
    assert max(float((initial[k] - final[k]).abs().max()) for k in initial) > 1e-3


@pytest.mark.integration
def test_offline_rows_of_a_lagging_batch_take_the_current_log_probs(tmp_path: Path) -> None:
    """A lagging batch with mix-policy offline responses and r = 1 on its sampled ones is the on-policy
    step: the same weights after it, and ppo_kl ~0 (offline rows taken as 0, not as the current
    log-probs, would count a KL of their whole log-likelihood)."""
    from tests.trainer.actor_steps import advantages, build_world, make_groups, train_config
    from tests.trainer.test_offline_weight import _offline_first

    world = build_world(tmp_path, samples=2)
    cfg = train_config(world)
    groups = _offline_first(make_groups(world, cfg.effective_rollout(), [[4, 6], [5, 3]]))
    adv = advantages(groups)
    shifts = [None if r.offline else 0.0 for g in groups for r in g.responses]
    _, lagging, metrics = lagging_update(world, cfg, groups, adv, shifts)
    _, on_policy, on_metrics = lagging_update(world, cfg, groups, adv, [None] * len(adv))
    gap = max(float((lagging[k] - on_policy[k]).abs().max()) for k in lagging)
    assert gap <= 1e-6, gap
    assert metrics["ppo_kl"] == pytest.approx(on_metrics["ppo_kl"], abs=1e-6)


def test_a_checkpoint_of_one_setting_does_not_resume_the_other() -> None:
    from services.trainer.checkpoints import identity_changes

    run = {"batch_size": 2, "world_size": 1}
    assert identity_changes({**run, "off_policy_steps": 1}, {**run, "off_policy_steps": 0}) == {
        "off_policy_steps": (1, 0)
    }
    assert identity_changes({**run, "off_policy_steps": 0}, {**run, "off_policy_steps": 1}) == {
        "off_policy_steps": (0, 1)
    }
    # written before the setting existed: on-policy, so it resumes on-policy only
    assert identity_changes(run, {**run, "off_policy_steps": 0}) == {}
    assert identity_changes(run, {**run, "off_policy_steps": 1}) == {"off_policy_steps": (0, 1)}
    # an entry only the checkpoint has is compared too
    assert identity_changes({**run, "rollout_n": 4}, run) == {"rollout_n": (4, None)}


def test_a_failed_step_stops_the_engines_before_waiting_for_the_batch_in_flight() -> None:
    """A step that fails while the next batch is being generated: shutdown stops the engines first
    (which ends that generation), waits for it, and lets the output folder go last."""
    from services.trainer.loop import Trainer

    order: list[str] = []
    stopped = threading.Event()

    def generate(step: int):
        if step == 2:  # an engine generates until it is stopped
            assert stopped.wait(WAIT_S)
            order.append("generation ended")
            raise RuntimeError("engine stopped")
        return [sample("a")], [], {}

    class Part:
        def __init__(self, name: str, on_stop=None) -> None:
            self.name, self.on_stop = name, on_stop

        def __call__(self) -> None:
            order.append(self.name)
            if self.on_stop is not None:
                self.on_stop()

    trainer = Trainer.__new__(Trainer)
    trainer.batches = BatchSchedule(generate, off_policy_steps=1, last_step=3)
    trainer.batches.take(1)  # step 1 then fails in its update, with step 2's batch in flight
    trainer.engine = SimpleNamespace(shutdown=Part("engine", stopped.set))
    trainer.group = SimpleNamespace(shutdown=Part("group"))
    trainer.reward_client = SimpleNamespace(close=Part("reward client"))
    trainer._lock = SimpleNamespace(close=Part("lock"))
    trainer.shutdown()
    # the generation ends once the engines stop (when exactly, beside group and reward client, is the
    # scheduler's choice), and the folder is let go only after it
    assert order[0] == "engine" and order[-1] == "lock", order
    assert sorted(order[1:-1]) == ["generation ended", "group", "reward client"], order


def test_closing_drops_any_error_of_the_batch_it_drops() -> None:
    schedule = BatchSchedule(
        failing_ahead(SystemExit("an engine's process exited")), off_policy_steps=1, last_step=3
    )
    schedule.take(1)
    schedule.close()  # no step takes that batch: its error is logged, not raised out of the shutdown


def test_closing_gives_up_on_a_generation_that_does_not_end() -> None:
    release = threading.Event()

    def generate(step: int):
        if step == 2:
            release.wait(WAIT_S)
        return [sample("a")], [], {}

    schedule = BatchSchedule(generate, off_policy_steps=1, last_step=3)
    schedule.take(1)
    began = time.monotonic()
    schedule.close(wait_s=0.2)  # returns; the daemon thread cannot hold the process open
    assert time.monotonic() - began < WAIT_S / 2  # not the generation's end (WAIT_S away)
    assert schedule.pending() is None
    release.set()


def test_an_interrupted_take_still_leaves_the_batch_for_close_to_wait_on() -> None:
    """A wait for the batch generated ahead that is interrupted (Ctrl-C, a task's time limit) leaves
    it in place: the shutdown's close still waits for its generation before the folder is let go."""

    class Interrupted:  # a future whose wait a signal interrupts
        waited = 0

        def result(self, timeout=None):
            raise KeyboardInterrupt

        def exception(self, timeout=None):
            self.waited += 1
            return None

    schedule = BatchSchedule(recording([]), off_policy_steps=1, last_step=3)
    schedule.take(1)
    schedule.settle()
    stand_in = Interrupted()
    schedule._ahead = (2, stand_in)
    with pytest.raises(KeyboardInterrupt):
        schedule.take(2)
    assert schedule._ahead == (2, stand_in)
    schedule.close()
    assert stand_in.waited == 1
