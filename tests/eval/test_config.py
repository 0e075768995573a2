"""The run config: eval defaults for a partial rollout section, rejected names and combinations, a run
id that follows the result-deciding fields (and the checkpoint's files), clip parameter layering."""

from __future__ import annotations

import re

import pytest

from services.eval.cli import parse_assignments
from services.eval.clips import clip_params
from services.eval.config import ConfigError, EvalConfig, load_config


def make(tmp_path, **values):
    model = tmp_path / "model"
    if not model.exists():
        model.mkdir()
        (model / "config.json").write_text("{}")
    return load_config(
        {"model": str(model), "benchmarks": "mvbench,vsibench", "data_root": str(tmp_path), **values}
    )


def test_partial_rollout_keeps_eval_defaults(tmp_path):
    config = make(
        tmp_path, **parse_assignments(["rollout.temperature=0.7", "rollout.engine.max_model_len=8192"])
    )
    assert config.rollout.n == 1 and config.rollout.temperature == 0.7
    assert config.rollout.max_tokens == 1024 and config.rollout.engine.enable_chunked_prefill is True
    assert config.rollout.engine.max_model_len == 8192
    assert config.benchmarks == ["mvbench", "vsibench"]
    # the API validates job configs with the model itself: the same defaults apply there
    api = EvalConfig.model_validate(
        {"model": "/m", "benchmarks": ["mvbench"], "data_root": "/d", "rollout": {"top_p": 0.9}}
    )
    assert api.rollout.n == 1 and api.rollout.temperature == 0.0


def test_rejections_name_the_field(tmp_path):
    with pytest.raises(ConfigError, match=r"unknown benchmark\(s\) \['videome'\]"):
        make(tmp_path, benchmarks="videome")
    with pytest.raises(ConfigError, match=r"rollout\.n must be 1"):
        make(tmp_path, rollout={"n": 4})
    with pytest.raises(ConfigError, match="concurency: Extra inputs are not permitted"):
        make(tmp_path, concurency=3)
    with pytest.raises(ConfigError, match="benchmark 'mvbench' has no folder"):
        load_config({"model": "/m", "benchmarks": "mvbench"})


def test_run_id_follows_results_not_throughput(tmp_path):
    base = make(tmp_path).resolved_run_id()
    assert make(tmp_path, limit=5, concurrency=2, output_dir=str(tmp_path / "o")).resolved_run_id() == base
    assert make(tmp_path, thinking=True).resolved_run_id() != base
    assert make(tmp_path, video={"nframes": 8}).resolved_run_id() != base
    (tmp_path / "model" / "model.safetensors").write_bytes(b"new weights")
    assert make(tmp_path).resolved_run_id() != base  # same path, other weights: a new run
    assert make(tmp_path, run_id="mine").resolved_run_id() == "mine"


def test_run_id_is_a_plain_name(tmp_path, monkeypatch):
    """The run id names the output folder under <REELRL_HOME>/eval: no path may hide in it."""
    from pydantic import ValidationError

    from services.common.settings import reset_settings_cache
    from services.eval.config import EvalJobConfig

    for bad in ["../../../tmp/x", "/tmp/x", "a/b", "..", ".", ".hidden", "", "x" * 129, "a b", "a\\b"]:
        with pytest.raises(ConfigError, match=r"run_id: run_id .* is not a plain name"):
            make(tmp_path, run_id=bad)
    assert make(tmp_path, run_id="exp-1.v2_a").resolved_run_id() == "exp-1.v2_a"
    monkeypatch.setenv("REELRL_DATA_ROOTS", str(tmp_path))
    reset_settings_cache()
    try:
        job = {"model": "model", "benchmarks": "mlvu", "data_root": "bench"}
        with pytest.raises(ValidationError, match=r"run_id .* is not a plain name"):
            EvalJobConfig.model_validate({**job, "run_id": "../../../tmp/x"})
        assert EvalJobConfig.model_validate({**job, "run_id": "r1"}).run_id == "r1"
    finally:
        reset_settings_cache()


def test_clip_params_layers():
    # MVBench's 16 frames, overridden by a global fps (which clears nframes), then a per-benchmark cap
    params = clip_params("qwen3_vl", {"fps": None, "nframes": 16}, {"fps": 1.0}, {"max_frames": 8})
    assert (params.fps, params.nframes, params.max_frames) == (1.0, None, 8)
    params = clip_params("qwen2_5_vl", {"fps": 2.0, "max_frames": 512}, {"nframes": 4})
    assert (params.fps, params.nframes) == (None, 4)


def test_overrides_parse_yaml_values():
    assert parse_assignments(["a.b=1", "a.c=true", "d=[1, 2]", "e=x,y"]) == {
        "a": {"b": 1, "c": True}, "d": [1, 2], "e": "x,y",
    }  # fmt: skip


def test_an_eval_job_may_only_name_files_inside_the_data_roots(tmp_path, monkeypatch):
    """Over the API (EvalJobConfig) every path must resolve inside REELRL_DATA_ROOTS; the error names
    the field. Relative paths are taken under the first root and stored resolved."""
    from pydantic import ValidationError

    from services.common.settings import reset_settings_cache
    from services.eval.config import EvalJobConfig

    job = {"model": "models/tiny", "benchmarks": "mlvu", "data_root": "bench", "judge": {"model": "self"}}
    monkeypatch.delenv("REELRL_DATA_ROOTS", raising=False)
    reset_settings_cache()
    with pytest.raises(ValidationError, match="no data roots are configured"):
        EvalJobConfig.model_validate(job)
    monkeypatch.setenv("REELRL_DATA_ROOTS", str(tmp_path))
    reset_settings_cache()
    try:
        ok = EvalJobConfig.model_validate(
            {**job, "output_dir": "runs/e1", "bench": {"mlvu": {"annotations": "bench/mlvu/json"}}}
        )
        assert (ok.model, ok.data_root, ok.output_dir) == (
            tmp_path / "models" / "tiny", tmp_path / "bench", tmp_path / "runs" / "e1",
        )  # fmt: skip
        assert ok.bench["mlvu"].annotations == tmp_path / "bench" / "mlvu" / "json"
        assert ok.judge.model == "self"
        # what the worker re-reads from the stored job config is the same resolved tree
        assert EvalConfig.model_validate(ok.model_dump(mode="json")).model == tmp_path / "models" / "tiny"
        outside = {
            "model": {"model": "/etc"},
            "data_root": {"data_root": "../elsewhere"},
            "output_dir": {"output_dir": "/tmp/out"},
            "judge.model": {"judge": {"model": "/opt/judge"}},
            "bench.mlvu.video_root": {"bench": {"mlvu": {"video_root": "/srv/videos"}}},
            "bench.mlvu.root": {"bench": {"mlvu": {"root": "../../x"}}},
        }
        for field, change in outside.items():
            with pytest.raises(ValidationError, match=rf"{re.escape(field)}=.*outside the data roots"):
                EvalJobConfig.model_validate({**job, **change})
        # checked per field: reported beside other problems (here the missing benchmarks)
        with pytest.raises(ValidationError) as caught:
            EvalJobConfig.model_validate({"model": "/etc"})
        assert {e["loc"][0] for e in caught.value.errors()} == {"model", "benchmarks"}
    finally:
        reset_settings_cache()
