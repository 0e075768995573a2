"""The training config tree: YAML + dotted overrides, unknown keys by full path, cross-section checks,
and every shipped config in examples/ loads and validates."""

from __future__ import annotations

from pathlib import Path

import pytest

from services.trainer.config import ConfigError, TrainConfig, dump_config, load_config, parse_config

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"
MINIMAL = {"data": {"train_files": ["t.jsonl"]}, "actor": {"model_path": "m"}}


@pytest.mark.parametrize("path", sorted(EXAMPLES.glob("*.yaml")), ids=lambda p: p.name)
def test_every_shipped_config_loads(path: Path) -> None:
    config = load_config(path)
    assert isinstance(config, TrainConfig)
    # The resolved tree round-trips: what --print-config shows is itself a valid config.
    again = parse_config(__import__("yaml").safe_load(dump_config(config)))
    assert again == config


def test_gpu_recipes_decode_with_cuda_graphs() -> None:
    """``enforce_eager`` defaults to true for CPU engines (vLLM's CPU backend has no CUDA graphs); a
    recipe for GPUs turns graphs on, unless a reason to stay eager is written beside the setting (and
    its file is named here)."""
    eager_with_a_reason: set[str] = set()
    gpu = [p for p in sorted(EXAMPLES.glob("*.yaml")) if not p.name.startswith("tiny_cpu")]
    assert len(gpu) >= 4
    for path in gpu:
        assert load_config(path).rollout.engine.enforce_eager is (path.name in eager_with_a_reason), path.name


def test_seed_paper_recipe() -> None:
    c = load_config(EXAMPLES / "qwen3_vl_8b_grpo.yaml")
    assert (c.algorithm.clip_ratios, c.algorithm.kl.mode.value, c.rollout.n) == ((0.2, 0.28), "off", 8)
    assert (c.data.batch_size, c.actor.optim.lr, c.data.video_fps, c.data.video_max_frames) == (
        256,
        1e-6,
        2.0,
        128,
    )
    assert (c.data.video_max_pixels, c.data.image_max_pixels, c.rollout.max_tokens) == (262144, 1048576, 4096)


def test_overrides_and_defaults(tmp_path: Path) -> None:
    path = tmp_path / "c.yaml"
    path.write_text("data: {train_files: [a.jsonl]}\nactor: {model_path: m}\n")
    c = load_config(path, ["trainer.total_steps=7", "rollout.n=4", "data.train_files=[x.jsonl,y.jsonl]"])
    assert (c.trainer.total_steps, c.rollout.n, c.data.train_files) == (7, 4, ["x.jsonl", "y.jsonl"])
    assert c.algorithm.advantage_estimator.value == "grpo" and c.reward.w_acc == 0.9  # embedded defaults


@pytest.mark.parametrize(
    ("override", "message"),
    [
        ("actor.optim.lrr=1", "unknown key 'actor.optim.lrr'"),
        ("rollout.engine.dtpye=float32", "unknown key 'rollout.engine.dtpye'"),
        ("algorithm.kl.coeff=0.1", "unknown key 'algorithm.kl.coeff'"),
        ("rollout.n=1", "rollout.n >= 2"),  # validate_algorithm runs at load: GRPO needs a group
        ("algorithm.policy_loss=luffy", "mix.offline_term=luffy or schedule"),
        ("algorithm.policy_loss=luffy mix.offline_term=luffy", "set rollout.mix_policy=true"),
        ("mix.offline_term=luffy", "algorithm.policy_loss=luffy"),
        ("warmup.steps=5", "warmup.files"),
        ("trainer.total_steps", "key=value"),
        ("data.batch_size=0", "data.batch_size"),
    ],
)
def test_bad_configs_name_the_key(tmp_path: Path, override: str, message: str) -> None:
    path = tmp_path / "c.yaml"
    path.write_text("data: {train_files: [a.jsonl]}\nactor: {model_path: m}\n")
    with pytest.raises(ConfigError, match=message.replace("(", r"\(").replace(")", r"\)")):
        load_config(path, override.split())


def test_missing_sections_and_bad_yaml(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="data: Field required"):
        parse_config({"actor": {"model_path": "m"}})
    path = tmp_path / "bad.yaml"
    path.write_text("data: [unclosed\n")
    with pytest.raises(ConfigError, match=r"bad.yaml:2:1: malformed YAML"):
        load_config(path)


def test_data_budgets_reach_the_rollout_engine() -> None:
    c = parse_config({**MINIMAL, "data": {"train_files": ["t"], "image_max_pixels": 50176}})
    assert c.effective_rollout().image_max_pixels == 50176
    params = c.data.video_params("qwen3_vl")
    assert (params.fps, params.max_frames, params.family.value) == (2.0, 128, "qwen3_vl")
    c = parse_config({**MINIMAL, "data": {"train_files": ["t"], "video_nframes": 4}})
    assert c.data.video_params("qwen2_5_vl").fps is None


def test_prompt_budget_must_leave_room_for_the_answer() -> None:
    with pytest.raises(ConfigError, match=r"lower data\.max_prompt_tokens to 3584"):
        parse_config({**MINIMAL, "data": {"train_files": ["t"], "max_prompt_tokens": 4000}})
    with pytest.raises(ConfigError, match=r"algorithm\.dynamic_sampling\.metric"):
        parse_config({**MINIMAL, "algorithm": {"dynamic_sampling": {"enabled": True, "metric": "acc"}}})


def test_a_train_job_may_only_name_files_inside_the_data_roots(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from services.common.settings import reset_settings_cache
    from services.trainer.config import TrainJobConfig

    job = {
        "data": {"train_files": ["d/t.jsonl"]},
        "actor": {"model_path": "m"},
        "trainer": {"output_dir": "runs/a"},
    }
    monkeypatch.delenv("REELRL_DATA_ROOTS", raising=False)
    reset_settings_cache()
    with pytest.raises(ValueError, match="no data roots are configured"):
        TrainJobConfig.model_validate(job)
    monkeypatch.setenv("REELRL_DATA_ROOTS", str(tmp_path))
    reset_settings_cache()
    (tmp_path / "m").mkdir()
    (tmp_path / "m" / "config.json").write_text("{}")  # a job's model must exist (tests/api/test_edges.py)
    try:
        ok = TrainJobConfig.model_validate(job)
        assert ok.data.train_files == [str(tmp_path / "d" / "t.jsonl")]
        assert ok.trainer.output_dir == str(tmp_path / "runs" / "a")
        for key, value in (("actor", {"model_path": "/etc"}), ("trainer", {"output_dir": "../../x"})):
            with pytest.raises(ValueError, match="outside the data roots"):
                TrainJobConfig.model_validate({**job, key: value})
    finally:
        reset_settings_cache()


def test_the_weight_group_must_give_up_before_the_fleet_does() -> None:
    base = {"data": {"train_files": ["a.jsonl"]}, "actor": {"model_path": "m"}}
    rollout = TrainConfig.model_validate(base).rollout
    assert rollout.weight_transport is None and rollout.weight_group_timeout_s < rollout.engine_timeout_s
    with pytest.raises(ValueError, match=r"weight_group_timeout_s .* must be below"):
        TrainConfig.model_validate(
            {**base, "rollout": {"engine_timeout_s": 300, "weight_group_timeout_s": 300}}
        )
    TrainConfig.model_validate(
        {**base, "rollout": {"engine_timeout_s": None, "weight_group_timeout_s": 5000}}
    )
    # unset, it follows a short fleet limit instead of refusing a config that never asked for a group
    short = TrainConfig.model_validate({**base, "rollout": {"engine_timeout_s": 300}})
    assert short.rollout.weight_group_timeout_s == 150 and rollout.weight_group_timeout_s == 600
    with pytest.raises(ValueError, match="weight_transport"):
        TrainConfig.model_validate({**base, "rollout": {"weight_transport": "carrier_pigeon"}})


def test_the_weight_transport_follows_rank_0_s_device_unless_asked() -> None:
    from services.trainer.placement import weight_transport

    assert weight_transport(None, "cpu") == "broadcast"
    assert weight_transport(None, "cuda:0") == "object_store"  # the NCCL group has not run on a GPU yet
    assert weight_transport("broadcast", "cuda:0") == "broadcast"
    assert weight_transport("object_store", "cpu") == "object_store"
