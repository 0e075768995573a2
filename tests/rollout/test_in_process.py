"""In-process engines (``engine.in_process``): vLLM's engine core and worker in the calling process.

On the CPU the trainer runs one driver engine this way, and each disaggregated engine inside its actor
(services/trainer/placement.py, services/rollout/worker.py): no processes to start, none polling their
queues beside the update. Checked here with real engines: it starts no process, samples the tokens of
an engine with processes of its own for the same seeded request, and gives a video's logprobs as the HF
model computes them; a push through a file leaves its model config alone (the next request still
finds the processor); this process keeps its own torch thread setting; a second in-process engine beside
a running one is refused by name (vLLM keeps one engine's state in module globals: started anyway, the
second corrupted the heap), one after another is fine; the streaming engine refuses the setting.
"""

from __future__ import annotations

from pathlib import Path

import psutil
import pytest
import torch

from services.rollout.config import EngineConfig, RolloutConfig
from services.rollout.seeds import SeedKey
from tests.rollout.conftest import small_config

pytestmark = [pytest.mark.integration]
FAMILY = "qwen2_5_vl"


def in_process() -> RolloutConfig:
    config = small_config()
    return config.model_copy(update={"engine": config.engine.model_copy(update={"in_process": True})})


def children() -> set[int]:
    return {p.pid for p in psutil.Process().children(recursive=True)}


@pytest.mark.slow
def test_an_in_process_engine_starts_no_process_and_samples_what_a_separate_one_does(
    tiny_models, clips, rollout_engine, video_sample, hf_model, hf_logprobs
) -> None:
    from services.rollout.engine import RolloutEngine

    separate = rollout_engine(FAMILY)  # the session's engine, in processes of its own
    sample = video_sample(FAMILY, "wide", "in-process")
    expected = separate.rollout([sample], key=SeedKey(7))
    threads = torch.get_num_threads()
    before = children()
    engine = RolloutEngine(tiny_models[FAMILY], in_process(), source=clips.store)
    try:
        assert children() - before == set() and engine.footprint.processes == []
        (group,) = engine.rollout([sample], key=SeedKey(7))
        assert [r.token_ids for r in group.responses] == [r.token_ids for r in expected[0].responses]
        model = hf_model(tiny_models[FAMILY])
        for response in group.responses:
            hf = hf_logprobs(engine, model, sample, response.token_ids)
            assert (hf - torch.tensor(response.logprobs)).abs().max().item() < 1e-5
        # vLLM's CPU worker made torch.set_num_threads a no-op in its process; this one keeps its own
        torch.set_num_threads(1)
        assert torch.get_num_threads() == 1

        # a push through a file leaves the engine's model where it was: the next request still finds
        # the checkpoint's processor (vLLM's reload_weights(weights_path=...) had pointed it at the file)
        engine.push_weights(model.state_dict(), transport="file")
        config = engine.llm.llm_engine.model_config
        assert config.model == str(tiny_models[FAMILY])
        (pushed,) = engine.rollout([video_sample(FAMILY, "tall_in_time", "after-push")], key=SeedKey(8))
        assert pushed.responses and engine.weight_version == 1

        with pytest.raises(RuntimeError, match="already runs in this process"):
            RolloutEngine(tiny_models[FAMILY], in_process(), source=clips.store)
    finally:
        torch.set_num_threads(threads)
        engine.shutdown()
    # one after another: the next in-process engine starts and generates the same
    again = RolloutEngine(tiny_models[FAMILY], in_process(), source=clips.store)
    try:
        (group,) = again.rollout([sample], key=SeedKey(7))
        assert [r.token_ids for r in group.responses] == [r.token_ids for r in expected[0].responses]
    finally:
        again.shutdown()


def test_the_streaming_engine_refuses_in_process(tiny_models, clips) -> None:
    from services.rollout.async_engine import AsyncRolloutEngine

    with pytest.raises(ValueError, match="streaming engine"):
        AsyncRolloutEngine(tiny_models[FAMILY], in_process(), source=clips.store)


@pytest.mark.parametrize(
    ("settings", "message"),
    [
        ({"in_process": True, "tensor_parallel_size": 2}, "one process per rank"),
        ({"in_process": True, "distributed_executor_backend": "mp"}, "contradicts"),
    ],
)
def test_in_process_settings_that_cannot_hold_are_refused(settings: dict, message: str) -> None:
    from pydantic import ValidationError

    with pytest.raises(ValidationError, match=message):
        EngineConfig(**settings)
    EngineConfig(in_process=False, tensor_parallel_size=2)  # processes of their own: fine


def test_in_process_engines_are_asked_of_vllm_with_its_single_process_executor() -> None:
    from services.rollout.vllm_bridge import engine_kwargs

    kwargs = engine_kwargs(str(Path("model")), in_process())
    assert kwargs["distributed_executor_backend"] == "uni"
    assert "distributed_executor_backend" not in engine_kwargs("model", small_config())
