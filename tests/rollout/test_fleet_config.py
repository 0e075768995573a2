"""The fleet's settings: checked statically when the config loads, against the hardware at start."""

from __future__ import annotations

import pytest

from services.rollout.config import EngineConfig, sleep_level
from services.trainer.config import ConfigError, parse_config
from services.trainer.placement import Layout, PlacementError, check_hardware, resolve, start_colocated


def config(**sections):
    data = {"data": {"train_files": ["t.jsonl"]}, "actor": {"model_path": "m"}}
    for name, values in sections.items():
        data[name] = {**data.get(name, {}), **values}
    return parse_config(data)


def test_colocated_engines_follow_from_the_ranks() -> None:
    cfg = config(
        actor={"world_size": 8},
        rollout={"placement": "colocated", "engine": {"tensor_parallel_size": 2}},
        trainer={"use_ray": True},
    )
    assert resolve(cfg, cuda=True) == Layout("colocated", 4, 2)
    same = config(
        actor={"world_size": 8},
        rollout={"placement": "colocated", "engines": 4, "engine": {"tensor_parallel_size": 2}},
        trainer={"use_ray": True},
    )
    assert resolve(same, cuda=True).engines == 4


def test_a_contradicting_engine_count_is_refused() -> None:
    with pytest.raises(
        ConfigError, match=r"rollout.engines=3 contradicts rollout.placement=colocated.*8 / 2 = 4"
    ):
        config(
            actor={"world_size": 8},
            rollout={"placement": "colocated", "engines": 3, "engine": {"tensor_parallel_size": 2}},
        )
    with pytest.raises(ConfigError, match=r"actor.world_size=6 must be a multiple of it"):
        config(
            actor={"world_size": 6}, rollout={"placement": "colocated", "engine": {"tensor_parallel_size": 4}}
        )


def test_a_null_placement_resolved_to_colocated_gets_the_same_checks() -> None:
    on_ray = {"use_ray": True}
    cfg = config(actor={"world_size": 8}, rollout={"engines": 3, "engine": {"tensor_parallel_size": 2}},
                 trainer=on_ray)  # fmt: skip
    with pytest.raises(PlacementError, match=r"resolved to colocated here: rollout.engines=3 contradicts"):
        resolve(cfg, cuda=True)
    odd = config(actor={"world_size": 6}, rollout={"engine": {"tensor_parallel_size": 4}}, trainer=on_ray,
                 data={"batch_size": 12})  # fmt: skip
    with pytest.raises(PlacementError, match=r"actor.world_size=6 must be a multiple of it"):
        resolve(odd, cuda=True)
    assert resolve(cfg, cuda=False) == Layout("disaggregated", 3, 2)  # no GPU: engines of their own


def test_disaggregated_engines_need_ray() -> None:
    with pytest.raises(ConfigError, match=r"set trainer.use_ray=true"):
        config(rollout={"placement": "disaggregated", "engines": 2})
    cfg = config(rollout={"placement": "disaggregated", "engines": 2}, trainer={"use_ray": True})
    assert resolve(cfg, cuda=False) == Layout("disaggregated", 2, 1)


def test_other_placements_default_to_one_engine_and_null_picks_by_hardware() -> None:
    assert resolve(config(), cuda=False) == Layout("driver", 1, 1)
    # colocated shards live in the Ray ranks: a GPU run without Ray (one GPU) keeps the engine in the driver
    assert resolve(config(trainer={"use_ray": True}), cuda=True).placement == "colocated"
    assert resolve(config(), cuda=True).placement == "driver"
    assert resolve(config(trainer={"use_ray": True}), cuda=False).placement == "disaggregated"
    on_ray_driver = config(trainer={"use_ray": True, "rollout_on_ray": False})
    assert resolve(on_ray_driver, cuda=False).placement == "driver"
    assert resolve(config(rollout={"placement": "driver", "engines": 2}), cuda=False).engines == 2


def test_hardware_that_cannot_hold_the_placement_is_refused_naming_the_way_out() -> None:
    # colocated shards on CPU share the Ray ranks' memory (no sleep mode): nothing to refuse
    colocated = config(actor={"world_size": 2}, rollout={"placement": "colocated"}, trainer={"use_ray": True})
    check_hardware(colocated, resolve(colocated, cuda=False), cuda=False, ray_resources=None)
    cfg = config(rollout={"placement": "disaggregated", "engines": 4, "engine": {"tensor_parallel_size": 2}},
                 trainer={"use_ray": True})  # fmt: skip
    layout = resolve(cfg, cuda=True)
    with pytest.raises(
        PlacementError, match=r"4 engine\(s\) x 2 GPU\(s\) = 8 GPU\(s\) needed.*6 free.*colocated"
    ):
        check_hardware(cfg, layout, cuda=True, ray_resources={"GPU": 6.0, "GPU_total": 8, "CPU": 64})
    check_hardware(cfg, layout, cuda=True, ray_resources={"GPU": 8.0, "GPU_total": 8, "CPU": 64})
    with pytest.raises(PlacementError, match=r"4 CPU\(s\) needed, the cluster has 3 free"):
        check_hardware(cfg, layout, cuda=False, ray_resources={"CPU": 3.0})


def test_colocated_needs_the_ranks_on_ray() -> None:
    with pytest.raises(
        ConfigError, match=r"inside the actor ranks, which run as Ray actors: set trainer.use_ray"
    ):
        config(actor={"world_size": 2}, rollout={"placement": "colocated"})
    # and at start, for a group that is not on Ray whatever the config says
    cfg = config(actor={"world_size": 2}, rollout={"placement": "colocated"}, trainer={"use_ray": True})
    with pytest.raises(PlacementError, match=r"needs the actor ranks' Ray group"):
        start_colocated(cfg, resolve(cfg, cuda=True), "m", cfg.effective_rollout(), group=None)
    # one rank may go without Ray: its engine lives in the trainer's process (tests/trainer/test_colocated.py)
    alone = config(rollout={"placement": "colocated"})
    assert resolve(alone, cuda=True) == Layout("colocated", 1, 1)
    with pytest.raises(ValueError, match=r"needs the trainer's one local actor rank"):
        start_colocated(alone, resolve(alone, cuda=True), "m", alone.effective_rollout(), group=None)


def test_colocated_engines_must_sleep_and_sleep_at_level_2_unless_told() -> None:
    with pytest.raises(
        ConfigError, match=r"enable_sleep_mode=false: the engines would keep .* \(or leave it null\)"
    ):
        config(
            rollout={"placement": "colocated", "engine": {"enable_sleep_mode": False}},
            trainer={"use_ray": True},
        )
    with pytest.raises(ConfigError, match=r"sleep_level=2 with enable_sleep_mode: false"):
        config(rollout={"engine": {"enable_sleep_mode": False, "sleep_level": 2}})
    with pytest.raises(ConfigError, match=r"sleep_level"):
        config(rollout={"engine": {"sleep_level": 3}})
    # a level where nothing sleeps would be ignored without a word
    with pytest.raises(
        ConfigError, match=r"sleep_level=2 with rollout.placement=driver: .*enable_sleep_mode: true"
    ):
        config(rollout={"placement": "driver", "engine": {"sleep_level": 2}})
    config(rollout={"placement": "driver", "engine": {"sleep_level": 2, "enable_sleep_mode": True}})
    engine = EngineConfig()
    assert engine.enable_sleep_mode is None and engine.sleep_level is None
    # colocated: the push replaces every weight, so nothing is kept (2); elsewhere a sleeping engine
    # keeps its weights (1) and one without sleep mode does not sleep
    assert sleep_level(engine, "colocated") == 2
    assert sleep_level(EngineConfig(sleep_level=1), "colocated") == 1
    assert sleep_level(engine, "driver") is None and sleep_level(engine, "disaggregated") is None
    assert sleep_level(EngineConfig(enable_sleep_mode=True), "driver") == 1
    assert sleep_level(EngineConfig(enable_sleep_mode=True, sleep_level=2), "disaggregated") == 2


def test_every_contradiction_is_named_at_once() -> None:
    with pytest.raises(ConfigError) as refused:
        config(
            actor={"world_size": 8},
            rollout={"placement": "colocated", "engines": 3, "engine": {"tensor_parallel_size": 2}},
        )
    message = str(refused.value)
    assert "rollout.engines=3 contradicts" in message and "set trainer.use_ray=true" in message
    with pytest.raises(
        ConfigError, match=r"trainer.rollout_on_ray=false .* contradicts rollout.placement=disagg"
    ):
        config(rollout={"placement": "disaggregated"}, trainer={"use_ray": True, "rollout_on_ray": False})
    config(rollout={"placement": "disaggregated"}, trainer={"use_ray": True, "rollout_on_ray": True})


def test_engines_in_the_driver_must_fit_its_gpus() -> None:
    wide = config(rollout={"placement": "driver", "engine": {"tensor_parallel_size": 2}})
    with pytest.raises(PlacementError, match=r"tensor_parallel_size=2 needs 2 GPU\(s\), this machine has 1"):
        check_hardware(wide, resolve(wide, cuda=True), cuda=True, ray_resources=None, gpus=1)
    check_hardware(wide, resolve(wide, cuda=True), cuda=True, ray_resources=None, gpus=2)
    check_hardware(wide, resolve(wide, cuda=False), cuda=False, ray_resources=None)  # CPU: no GPUs asked
    two = config(rollout={"placement": "driver", "engines": 2, "engine": {"kv_cache_gib": None}})
    with pytest.raises(PlacementError, match=r"2 engines share .*=0.6 of their memory, 1.2 in all"):
        check_hardware(two, resolve(two, cuda=True), cuda=True, ray_resources=None, gpus=1)
    small = config(rollout={"placement": "driver", "engines": 2,
                            "engine": {"kv_cache_gib": None, "gpu_memory_utilization": 0.3}})  # fmt: skip
    check_hardware(small, resolve(small, cuda=True), cuda=True, ray_resources=None, gpus=1)


@pytest.mark.parametrize("name", ["qwen2_5_vl_7b_dapo", "qwen2_5_vl_7b_luffy", "qwen3_vl_8b_grpo"])
def test_the_large_recipes_use_the_seed_s_layout(name: str) -> None:
    from pathlib import Path

    from services.trainer.config import load_config

    cfg = load_config(Path(__file__).resolve().parents[2] / "examples" / f"{name}.yaml")
    # 4 engines of tensor parallel 2 on the 8 ranks' GPUs, asleep during the update
    assert resolve(cfg, cuda=True) == Layout("colocated", 4, 2)
    assert cfg.rollout.engine.enable_sleep_mode
