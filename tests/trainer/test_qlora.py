"""QLoRA (``actor.lora.quantize: 4bit``, services/trainer/lora.py) on the CPU, where bitsandbytes' NF4
kernels run since 0.49:

- what cannot run is refused with the reason (more than one rank, at load; a device whose NF4 round
  trip fails; bitsandbytes missing);
- the language model's linear layers load in 4-bit, the vision tower, embeddings and head do not; only
  the adapters train, the packed base is bit-identical after a step, the log-probs are finite;
- the push carries every 4-bit weight dequantised under the checkpoint's name with its true shape, an
  adapted one as dequant(W) + scale · B·A (by hand), and a real vLLM engine fed it scores the sampled
  tokens as the QLoRA actor does;
- checkpoints hold the adapters; ``reelrl export --merge`` writes the dequantised, merged model.

bitsandbytes is a pinned dependency of the trainer: imported at the top, so a missing one fails this
module instead of skipping it."""

from __future__ import annotations

import dataclasses
import json
import sys
from pathlib import Path
from typing import Any

import bitsandbytes.functional as bnb
import pytest
import torch
from bitsandbytes.nn import Linear4bit
from pydantic import ValidationError

from services.trainer import checkpoints as ckpt
from services.trainer import lora
from services.trainer.actor import PolicyModel
from services.trainer.config import ActorConfig, LoraConfig, TrainConfig
from services.trainer.export import export_checkpoint
from services.trainer.group import LocalActorGroup
from services.trainer.update import SequenceTargets
from services.trainer.weight_buckets import full
from tests.trainer.actor_steps import UPDATE, World, advantages, build_world, make_groups, train_config

TOLERANCE = 1e-5  # test_lora.py's: the merged view against the adapted model, fp32 both
ENGINE_TOLERANCE = 1e-4  # test_lora_loop.py's: vLLM's log-probs against transformers', fp32 both
QLORA = {"rank": 4, "alpha": 8.0, "quantize": "4bit"}  # scale alpha / rank = 2


# -- refusals ---------------------------------------------------------------------------------------------


def test_qlora_across_ranks_is_refused_at_load_with_the_reason() -> None:
    assert ActorConfig(model_path="m", lora=QLORA).lora.quantize == "4bit"
    with pytest.raises(ValidationError, match=r"runs on one rank \(actor.world_size: 1\), not 2"):
        ActorConfig(model_path="m", lora=QLORA, world_size=2)
    ActorConfig(model_path="m", lora={**QLORA, "quantize": None}, world_size=2)  # plain LoRA shards
    with pytest.raises(ValueError, match="FSDP2 cannot shard bitsandbytes' packed 4-bit weights"):
        lora.check_quantize(LoraConfig(**QLORA), torch.device("cpu"), world_size=2)


def test_qlora_runs_where_bitsandbytes_nf4_runs_and_is_refused_elsewhere(monkeypatch: Any) -> None:
    qlora = LoraConfig(**QLORA)
    lora.check_quantize(qlora, torch.device("cpu"))  # bitsandbytes >= 0.49 quantises on the CPU
    lora.check_quantize(LoraConfig(rank=4), torch.device("meta"))  # plain LoRA: nothing to check
    # the meta device has no data to quantise: the round trip fails, and the reason is passed on
    with pytest.raises(ValueError, match="4-bit NF4 kernels do not run on meta here"):
        lora.check_quantize(qlora, torch.device("meta"))
    monkeypatch.setitem(sys.modules, "bitsandbytes.functional", None)  # as if not installed
    with pytest.raises(ValueError, match="needs bitsandbytes"):
        lora.check_quantize(qlora, torch.device("cpu"))


def test_a_4bit_weight_is_pushed_dequantised_with_its_true_shape() -> None:
    weight = torch.linspace(-1.0, 1.0, 6 * 64).reshape(6, 64)
    packed, state = bnb.quantize_4bit(weight, quant_type="nf4")
    assert tuple(packed.shape) == (6 * 64 // 2, 1)  # two 4-bit codes a byte: the packed shape
    param = torch.nn.Parameter(packed, requires_grad=False)
    param.quant_state = state  # what a Params4bit carries
    view = lora.Dequantized(param)
    assert view.shape == (6, 64) and view.dtype == torch.float32
    unpacked = view.full_tensor()
    # NF4: each block of 64 values is divided by its absmax (≤ 1 here) and rounded to one of 16 levels
    # in [-1, 1], whose widest gap is -1 → -0.696 (0.304): no value moves more than 0.152
    assert unpacked.shape == (6, 64) and 0 < float((unpacked - weight).abs().max()) <= 0.152
    assert torch.equal(unpacked, bnb.dequantize_4bit(packed, state))
    # merged: dequant(W) + scale · B·A
    a, b = torch.ones(1, 64), torch.full((6, 1), 0.5)
    merged = lora.MergedWeight(view, a, b, scale=2.0)
    assert merged.shape == (6, 64)
    assert torch.equal(merged.full_tensor(), unpacked + 1.0)  # 2 · 0.5 · 1


# -- the QLoRA actor --------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def world(tmp_path_factory: pytest.TempPathFactory) -> World:
    return build_world(tmp_path_factory.mktemp("qlora"), samples=2)


def qlora_config(world: World) -> TrainConfig:
    return train_config(world, lora=QLORA)


def _update(group: LocalActorGroup, world: World, config: TrainConfig) -> list[torch.Tensor]:
    groups = make_groups(world, config.effective_rollout(), [[5, 9], [7, 3]])
    group.load_batch(list(world.samples[:2]), groups)
    old = group.log_probs(temperature=1.0)
    every = advantages(groups)
    group.update([SequenceTargets(every[i], o) for i, o in zip(group.share, old, strict=True)], **UPDATE)
    return old


@dataclasses.dataclass
class Trained:
    group: LocalActorGroup
    frozen: dict[str, torch.Tensor]  # every frozen parameter before the update (packed bytes for 4-bit)
    old: list[torch.Tensor]  # the update's old log-probs: the base's (B was zero)


@pytest.fixture(scope="module")
def trained(world: World) -> Trained:
    """A QLoRA actor after one update (its adapters moved)."""
    config = qlora_config(world)
    group = LocalActorGroup(config, str(world.model), world.store, config.effective_rollout())
    frozen = {n: p.detach().clone() for n, p in group.actor.model.named_parameters() if not p.requires_grad}
    return Trained(group, frozen, _update(group, world, config))


@pytest.mark.integration
def test_the_language_model_is_4bit_and_only_the_adapters_train(trained: Trained) -> None:
    group = trained.group
    actor = group.actor
    model = actor.model
    linears = {n: m for n, m in model.named_modules() if isinstance(m, torch.nn.Linear) and ".lora_" not in n}
    language = {n: m for n, m in linears.items() if n.startswith("model.language_model.")}
    # every projection of the language model is a LoRA layer over a 4-bit NF4 base
    assert language and all(isinstance(m, Linear4bit) for m in language.values())
    assert all(n.endswith(".base_layer") for n in language)
    assert {m.weight.quant_state.quant_type for m in language.values()} == {"nf4"}
    # the vision tower and the head stay in the compute dtype (fp32 here), the embeddings too
    rest = [m for n, m in linears.items() if n not in language]
    assert any(n.startswith("model.visual.") for n in linears) and "lm_head" in linears
    assert rest and not any(isinstance(m, Linear4bit) for m in rest)
    assert all(m.weight.dtype == torch.float32 for m in rest)
    assert model.get_input_embeddings().weight.dtype == torch.float32
    # only the adapters train, in fp32, and AdamW holds state for them alone
    trainable = {n for n, p in model.named_parameters() if p.requires_grad}
    assert trainable == set(lora.adapter_names(model))
    assert all(p.dtype == torch.float32 for n, p in model.named_parameters() if n in trainable)
    stepped = [p for p in actor.optimizer.state if actor.optimizer.state[p]]
    assert sum(p.numel() for p in stepped) == sum(p.numel() for p in model.parameters() if p.requires_grad)
    # the step changed the adapters (B left zero) and nothing else: the packed bytes are the same
    assert any(float(p.detach().abs().max()) > 0 for n, p in model.named_parameters() if ".lora_B." in n)
    after = dict(model.named_parameters())
    assert all(torch.equal(after[n].data, v) for n, v in trained.frozen.items())
    # and moved the policy; the log-probs are finite
    moved = group.log_probs(temperature=1.0)
    assert all(bool(torch.isfinite(t).all()) for t in moved)
    assert max(float((a - b).abs().max()) for a, b in zip(moved, trained.old, strict=True)) > 100 * TOLERANCE
    # KL's reference: the 4-bit base with the adapters bypassed, which step 1 scored (B was zero then)
    reference = group.log_probs(temperature=1.0, reference=True)
    assert max(float((a - b).abs().max()) for a, b in zip(reference, trained.old, strict=True)) <= TOLERANCE


@pytest.mark.integration
def test_the_push_is_the_dequantised_base_plus_the_adapters(trained: Trained, world: World) -> None:
    group = trained.group
    actor = group.actor
    state = actor.push_state()
    plain = PolicyModel(ActorConfig(model_path=str(world.model), compute_dtype="float32"), trainable=False)
    expected = plain.push_state()
    # the checkpoint's names and true shapes (no packed bytes, no absmax / quant_map / quant_state)
    assert list(state) == list(expected)
    assert {k: (tuple(v.shape), v.dtype) for k, v in state.items()} == {
        k: (tuple(v.shape), v.dtype) for k, v in expected.items()
    }
    # an adapted layer, by hand: dequant(W) + (alpha / rank) · B·A
    name = "model.language_model.layers.0.self_attn.q_proj"
    module = actor.model.get_submodule(name)
    weight = module.base_layer.weight
    a, b = module.lora_A[lora.ADAPTER].weight, module.lora_B[lora.ADAPTER].weight
    assert module.scaling[lora.ADAPTER] == 2.0 and float(b.detach().abs().max()) > 0
    w = bnb.dequantize_4bit(weight.data, weight.quant_state)
    pushed = full(state[f"{name}.weight"])
    assert pushed.shape == expected[f"{name}.weight"].shape
    assert torch.allclose(pushed, w + 2.0 * (b.detach() @ a.detach()), atol=1e-6, rtol=0)
    # NF4 really rounded the base: close to the fp32 checkpoint's weight but not equal
    original = expected[f"{name}.weight"]
    assert 0 < float((w - original).abs().max()) < 0.2 * float(original.abs().max()) + 1e-3
    # what a push delivers scores as the QLoRA actor does (fp32 both: it computes on dequantised weights)
    whole = group.state_dict()
    assert list(whole) == list(expected)
    plain.model.load_state_dict(whole, strict=False)  # a tied head is the embeddings' tensor
    scored = plain.log_probs(group.sequences, temperature=1.0)
    adapted = group.log_probs(temperature=1.0)
    assert max(float((x - y).abs().max()) for x, y in zip(scored, adapted, strict=True)) <= TOLERANCE


@pytest.mark.integration
@pytest.mark.slow
def test_a_vllm_engine_fed_the_push_scores_like_the_qlora_actor(trained: Trained, world: World) -> None:
    """The bucketed push of the merged, dequantised weights into a real vLLM engine on the CPU: its
    log-probs of the tokens it samples are the QLoRA actor's (the loop's ``rollout_corr``)."""
    from services.rollout.engine import RolloutEngine
    from services.rollout.seeds import SeedKey

    group = trained.group
    rollout = group.config.effective_rollout()
    engine = RolloutEngine(str(world.model), rollout, source=world.store)
    try:
        engine.push_weights(group.weight_buckets(1.0))
        samples = list(world.samples[:2])
        groups = engine.rollout(samples, key=SeedKey(3))
    finally:
        engine.shutdown()
    served = {
        (g.sample_id, tuple(r.token_ids)): torch.tensor(r.logprobs)
        for g in groups
        for r in g.responses
        if not r.offline
    }
    assert served
    group.load_batch(samples, groups)
    actor = group.log_probs(temperature=rollout.temperature)
    gaps = [
        float((served[(s.prompt.sample_id, tuple(s.response_ids))] - mine).abs().max())
        for s, mine in zip(group.sequences, actor, strict=True)
    ]
    assert max(gaps) < ENGINE_TOLERANCE, gaps


def _record_run(folder: Path, config: TrainConfig) -> None:
    """The run identity the loop writes into a checkpoint's state (what export and resume read)."""
    identity = {
        "lora": lora.run_identity(config.actor),
        "model": ckpt.model_identity(config.actor.model_path),
    }
    ckpt.write_state(folder, {"step": 1, "run": identity})


def test_a_qlora_checkpoint_records_the_dtype_its_base_was_quantised_from(tmp_path: Path) -> None:
    """NF4 of a bf16 load and of an fp32 load differ in their last bits: the checkpoint says which, a
    resume in the other is refused, and plain LoRA records no such thing."""
    from services.trainer.config import ActorConfig

    qlora = ActorConfig(model_path="m", compute_dtype="bfloat16", lora=QLORA)
    assert lora.run_identity(qlora)["quantized_from"] == "bfloat16"
    plain = ActorConfig(model_path="m", lora={"rank": 8})
    assert "quantized_from" not in lora.run_identity(plain)
    assert lora.run_identity(ActorConfig(model_path="m")) is None
    ckpt.write_state(tmp_path, {"step": 1, "run": {"lora": lora.run_identity(qlora)}})
    ckpt.check_resume_lora(tmp_path, lora.run_identity(qlora))
    fp32 = ActorConfig(model_path="m", compute_dtype="float32", lora=QLORA)
    with pytest.raises(ckpt.ResumeMismatch, match="quantized_from"):
        ckpt.check_resume_lora(tmp_path, lora.run_identity(fp32))


@pytest.mark.integration
def test_export_quantises_the_base_as_a_bf16_run_loaded_it(world: World, tmp_path: Path) -> None:
    """A QLoRA run computing in bf16 quantised its base from a bf16 load; ``export --merge`` does the same
    (it quantised from fp32 before, and the exported weights differed from the ones trained and served)."""
    from transformers import AutoModelForImageTextToText

    config = train_config(world, lora=QLORA, compute_dtype="bfloat16")
    group = LocalActorGroup(config, str(world.model), world.store, config.effective_rollout())
    try:
        _update(group, world, config)
        folder = tmp_path / "run" / "step_1"
        group.save(folder)
        _record_run(folder, config)
        assert export_checkpoint(folder, tmp_path / "merged", merge=True) == "model"
        state = AutoModelForImageTextToText.from_pretrained(tmp_path / "merged").state_dict()
        for key, value in group.state_dict().items():
            assert torch.equal(state[key], value.to(torch.bfloat16)), key
    finally:
        group.shutdown()


@pytest.mark.integration
def test_export_merges_onto_the_dequantised_base(trained: Trained, tmp_path: Path) -> None:
    """``reelrl export --merge`` of a QLoRA checkpoint (adapters only, as LoRA's): the base loaded in
    NF4 as in training, each weight dequant(W) + scale · B·A rounded once to bf16, and a config that
    announces no quantisation (the weights are plain)."""
    from transformers import AutoModelForImageTextToText

    group = trained.group
    folder = tmp_path / "run" / "step_1"
    group.save(folder)
    assert (
        not (folder / ckpt.MODEL_DIR).exists() and (folder / ckpt.ADAPTER_DIR / lora.ADAPTER_FILE).is_file()
    )
    _record_run(folder, group.config)
    assert export_checkpoint(folder, tmp_path / "merged", merge=True) == "model"
    assert "quantization_config" not in json.loads((tmp_path / "merged" / "config.json").read_text())
    state = AutoModelForImageTextToText.from_pretrained(tmp_path / "merged").state_dict()
    for key, value in group.state_dict().items():
        assert torch.equal(state[key], value.to(torch.bfloat16)), key


@pytest.mark.integration
@pytest.mark.slow
def test_a_qlora_run_samples_its_first_step_from_the_actor_s_rounded_weights(
    reelrl_home: Path, tmp_path: Path
) -> None:
    """The engine starts from the checkpoint's full-precision files, but the QLoRA actor's step-0 policy
    is the NF4-rounded base: the loop pushes the actor's weights before the first rollout, so step 1's
    tokens are scored by the engine as the actor scores them (``rollout_corr/kl`` ≈ 0; without the push
    the two differed by ~0.03 nats a token on this model)."""
    from services.trainer.loop import Trainer
    from tests.trainer.loop_runs import colour_config, colour_task, step_metrics

    data, model = colour_task(tmp_path)
    values = {"actor.lora": "{rank: 8, alpha: 16, quantize: 4bit}", "trainer.total_steps": 1}
    Trainer(colour_config(tmp_path / "run", data, model, **values)).fit()
    first = step_metrics(tmp_path / "run", 1)
    assert abs(first["rollout_corr/kl"]) < 1e-5, first["rollout_corr/kl"]


@pytest.mark.integration
def test_a_parked_qlora_actor_frees_its_constants_too_and_comes_back_bit_for_bit(trained: Trained) -> None:
    """Around a colocated engine's generation the 4-bit weights' absmax and code leave with the packed
    bytes (they are neither parameters nor buffers), and the actor scores as before once back."""
    group = trained.group
    actor = group.actor
    states = [p.quant_state for p in actor.model.parameters() if lora.is_4bit(p)]
    assert states
    before = group.log_probs(temperature=1.0)
    freed = group.offload()
    assert all(st.absmax.untyped_storage().nbytes() == 0 for st in states)
    assert freed["params"] > 0
    group.reload()
    assert all(st.absmax.untyped_storage().nbytes() > 0 for st in states)
    after = group.log_probs(temperature=1.0)
    assert all(torch.equal(a, b) for a, b in zip(before, after, strict=True))
