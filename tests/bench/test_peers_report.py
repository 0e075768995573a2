"""The peer bench's pure parts (bench/peers/report.py and the harness's figures): the training-minutes
axis with validation taken out, the budget cut, the table rows and the results.json keys."""

from __future__ import annotations

from pathlib import Path

import pytest

from bench.peers.__main__ import PeerFailed, figures, last_error
from bench.peers.report import Summary, curve, summarise, train_seconds, within
from bench.peers.task import Budget

# ReelRL-shaped rows: perf/elapsed_s includes validation. Steps 1, 2, 4 take 1.0 s plus 0.1 s of
# overhead; step 3 also validates: its gap is 3.0 - 1.0 (step) - 0.1 (overhead) = 0.9 s of validation.
REELRL = [
    {"step": 0, "val/accuracy": 0.25},
    {"step": 1, "timing/step_s": 1.0, "perf/elapsed_s": 1.1, "response_length/mean": 4.0},
    {"step": 2, "timing/step_s": 1.0, "perf/elapsed_s": 2.2, "response_length/mean": 4.0},
    {
        "step": 3,
        "timing/step_s": 1.0,
        "perf/elapsed_s": 4.2,
        "response_length/mean": 6.0,
        "val/accuracy": 0.5,
    },
    {
        "step": 4,
        "timing/step_s": 2.0,
        "perf/elapsed_s": 6.3,
        "response_length/mean": 8.0,
        "val/accuracy": 0.95,
    },
]


def test_reelrl_validation_time_is_estimated_from_the_gaps_and_taken_out() -> None:
    seconds = train_seconds(REELRL)
    # step 3: 4.2 - 0.9 = 3.3; step 4: gap 2.1 - step 2.0 - overhead 0.1 = 0 more validation: 6.3 - 0.9
    assert seconds == pytest.approx({1: 1.1, 2: 2.2, 3: 3.3, 4: 5.4})


def test_a_driver_s_own_training_seconds_are_used_as_they_are() -> None:
    rows = [
        {"step": 1, "timing/step_s": 1.0, "perf/elapsed_s": 9.0, "perf/train_s": 1.2, "val/accuracy": 0.5}
    ]
    assert train_seconds(rows) == {1: 1.2}


def test_the_curve_starts_at_minute_zero_and_reads_minutes() -> None:
    steps, minutes, accuracy = zip(*curve(REELRL), strict=True)
    assert (steps, accuracy) == ((0, 3, 4), (0.25, 0.5, 0.95))
    assert minutes == pytest.approx((0.0, 3.3 / 60, 5.4 / 60))


def test_the_budget_cut_keeps_the_rows_within_the_training_minutes() -> None:
    assert [r["step"] for r in within(REELRL, 4.0 / 60)] == [0, 1, 2, 3]
    assert within(REELRL, None) == REELRL


def test_the_summary_skips_two_steps_and_counts_generated_tokens() -> None:
    s = summarise("ReelRL", "image", REELRL, completions=64)
    assert s.steps == 4
    assert s.step_s == pytest.approx(1.5)  # steps 3 and 4
    assert s.gen_tokens_per_s == pytest.approx((6 * 64 / 1.0 + 8 * 64 / 2.0) / 2)  # 320
    assert s.accuracy == 0.95
    assert s.minutes_to_target == pytest.approx(5.4 / 60)
    assert "**0.09**" in s.markdown()


def test_a_run_that_never_reaches_the_target_says_so_in_the_row_and_the_figures() -> None:
    low = [dict(r, **{"val/accuracy": 0.5}) if "val/accuracy" in r else r for r in REELRL]
    s = summarise("TRL 1.16.0", "image", low, completions=64)
    assert s.minutes_to_target is None
    assert "not reached (0.1 min, 4 steps)" in s.markdown()
    found = figures({"trl": s})
    assert found["peer_trl_minutes_to_09"] is None
    assert found["peer_trl_minutes_to_09_reason"].startswith("not reached: held-out 0.5 after 4 steps")


def test_figures_give_the_step_time_ratio_and_a_peer_s_reason() -> None:
    ours = summarise("ReelRL", "image", REELRL, completions=64)
    theirs = Summary("TRL 1.16.0", "image", 4, 3.0, 100.0, 0.5, None, 1.0)
    failed = Summary("verl 0.9.1", "image", 0, None, None, None, None, 0.0, reason="ValueError: no GPU")
    found = figures({"reelrl-image": ours, "trl": theirs, "verl": failed})
    assert found["peer_trl_step_time_ratio"] == 2.0  # 3.0 / 1.5
    assert found["peer_verl_reason"] == "ValueError: no GPU"
    # every key of each framework that ran is written, null where there is no value, so results.json
    # (which merges) keeps no figure of an earlier run beside this run's reason
    assert found["peer_verl_step_time_ratio"] is None and found["peer_verl_minutes_to_09"] is None
    assert found["peer_verl_minutes_to_09_reason"] == "did not run: ValueError: no GPU"
    assert found["peer_trl_reason"] is None and found["peer_trl_minutes_to_09"] is None
    assert found["peer_trl_minutes_to_09_reason"].startswith("not reached: held-out 0.5 after 4 steps")
    assert "peer_trl_vllm_step_time_ratio" not in found  # not run this time: left as it was
    assert "cannot run: ValueError: no GPU" in failed.markdown()
    # a row that cannot run still names the path it tried (two TRL rows differ only by it)
    trl_vllm = Summary(
        "TRL 1.16.0", "image (4 frames)", 0, None, None, None, None, 0.0, "(vLLM colocate)", "boom"
    )
    assert trl_vllm.markdown().startswith("| TRL 1.16.0 (vLLM colocate) | image (4 frames) | – |")


def test_the_last_error_of_a_log_is_the_exception_line(tmp_path: Path) -> None:
    log = tmp_path / "verl.log"
    log.write_text(
        "Traceback (most recent call last):\n  File x\nray.exceptions.RayTaskError(ValueError): [36mray::TaskRunner\n"
        "    raise ValueError(\nValueError: Total available GPUs 0 is less than total desired GPUs 1\n"
        "Set the environment variable HYDRA_FULL_ERROR=1 for a complete stack trace.\n"
    )
    assert last_error(log) == "ValueError: Total available GPUs 0 is less than total desired GPUs 1"
    assert issubclass(PeerFailed, RuntimeError)


def test_the_budget_names_the_yaml_s_values_as_reelrl_overrides() -> None:
    over = Budget(steps=400, val_every=20).reelrl_overrides()
    for item in ("rollout.n=8", "data.batch_size=8", "actor.optim.lr=0.0003", "rollout.max_tokens=8",
                 "actor.optim.schedule=constant", "trainer.total_steps=400", "trainer.val_freq=20"):  # fmt: skip
        assert item in over
