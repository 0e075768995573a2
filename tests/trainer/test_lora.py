"""LoRA adapters on the actor (``actor.lora``, services/trainer/lora.py), without a rollout engine:

- the merge rule by hand, the adapters' file names, what is adapted (the language model's projections;
  the vision tower's blocks only when asked; never the head or the merger);
- only the adapters train (the base is bit-identical after a step) and AdamW holds state for them alone;
- the merged view the engine and ``model/`` get equals the adapted model's own forward;
- KL's reference with the adapters bypassed is a separate frozen copy of the base, log-prob for log-prob;
- a resume from the adapters and the optimizer state repeats the uninterrupted step exactly;
- two FSDP ranks make the step of one rank (adapters sharded with their layers), padded and packed;
- ``reelrl export``: a full-tuning checkpoint as a bf16 HF model; a LoRA one as a peft adapter folder that
  peft loads onto the base, or merged into a bf16 HF model: the two give the same logits;
- what cannot run is refused by name (LoRA + warm start + KL, a checkpoint of the other kind).

QLoRA (``quantize: 4bit``): tests/trainer/test_qlora.py."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import torch
from pydantic import ValidationError

from services.trainer import checkpoints as ckpt
from services.trainer import lora
from services.trainer.actor import Actor, PolicyModel
from services.trainer.config import ActorConfig, TrainConfig
from services.trainer.export import ExportError, export_checkpoint
from services.trainer.group import LocalActorGroup
from services.trainer.update import SequenceTargets
from tests.trainer.actor_steps import (
    UPDATE,
    World,
    advantages,
    build_world,
    free_port,
    fsdp_rank,
    in_step_order,
    make_groups,
    run_step,
    spawn_ranks,
    train_config,
)

TOLERANCE = 1e-5
RANKS_TIMEOUT_S = 300.0
LORA = {"rank": 4, "alpha": 8.0}


# -- pure pieces ----------------------------------------------------------------------------------------


def test_a_merged_weight_is_the_base_plus_the_scaled_product() -> None:
    base = torch.tensor([[1.0, 2.0, 3.0], [4.0, 5.0, 6.0]])
    a = torch.tensor([[1.0, 0.0, -1.0]])  # (r=1, in=3)
    b = torch.tensor([[2.0], [0.5]])  # (out=2, r=1)
    # B·A = [[2, 0, -2], [0.5, 0, -0.5]]; scale 2 → [[4, 0, -4], [1, 0, -1]]
    merged = lora.MergedWeight(base, a, b, scale=2.0)
    assert merged.shape == (2, 3) and merged.dtype == torch.float32
    assert merged.full_tensor().tolist() == [[5.0, 2.0, -1.0], [5.0, 5.0, 5.0]]
    # in bf16 the product is formed in fp32 and rounded once
    half = lora.MergedWeight(base.bfloat16(), a.bfloat16(), b.bfloat16(), scale=2.0).full_tensor()
    assert half.dtype == torch.bfloat16 and half.float().tolist() == [[5.0, 2.0, -1.0], [5.0, 5.0, 5.0]]


def test_adapter_names_as_peft_files_and_checkpoints_spell_them() -> None:
    key = "model.language_model.layers.0.self_attn.q_proj.lora_A.default.weight"
    assert (
        lora.file_key(key) == "base_model.model.model.language_model.layers.0.self_attn.q_proj.lora_A.weight"
    )
    assert lora.original_name("model.language_model.layers.0.mlp.up_proj.base_layer.weight") == (
        "model.language_model.layers.0.mlp.up_proj.weight"
    )


def test_the_config_refuses_what_cannot_run(tmp_path: Path) -> None:
    assert ActorConfig(model_path="m", lora=LORA).lora.target_modules[0] == "q_proj"
    with pytest.raises(ValidationError, match="rank"):
        ActorConfig(model_path="m", lora={"rank": 0})
    with pytest.raises(ValidationError, match="quantize"):
        ActorConfig(model_path="m", lora={"quantize": "8bit"})
    data = {"train_files": ["t.jsonl"], "batch_size": 2}
    warm = {"files": ["w.jsonl"], "steps": 2}
    kl = {"kl": {"mode": "loss", "coef": 0.1}}
    with pytest.raises(ValidationError, match="KL would anchor to the base model"):
        TrainConfig.model_validate(
            {"data": data, "actor": {"model_path": "m", "lora": LORA}, "warmup": warm, "algorithm": kl}
        )
    # either alone is fine (KL is on by default)
    off = {"kl": {"mode": "off"}}
    TrainConfig.model_validate(
        {"data": data, "actor": {"model_path": "m", "lora": LORA}, "warmup": warm, "algorithm": off}
    )
    TrainConfig.model_validate({"data": data, "actor": {"model_path": "m", "lora": LORA}, "algorithm": kl})


def test_a_resume_with_another_lora_is_refused_before_anything_loads(tmp_path: Path) -> None:
    folder = tmp_path / "step_1"
    folder.mkdir()
    written = ActorConfig(model_path="m", lora=LORA).lora.model_dump(mode="json")
    ckpt.write_state(folder, {"step": 1, "run": {"lora": written}})
    ckpt.check_resume_lora(folder, written)
    with pytest.raises(ckpt.ResumeMismatch, match=r"trained with actor\.lora="):
        ckpt.check_resume_lora(folder, {**written, "rank": 8})
    with pytest.raises(ckpt.ResumeMismatch, match=r"this run has actor\.lora=None"):
        ckpt.check_resume_lora(folder, None)
    old = tmp_path / "old"  # written before LoRA existed: full tuning
    old.mkdir()
    ckpt.write_state(old, {"step": 1, "run": {}})
    ckpt.check_resume_lora(old, None)


def test_a_checkpoint_of_the_other_kind_is_refused_by_name(tmp_path: Path) -> None:
    full, adapters = tmp_path / "full", tmp_path / "adapters"
    (full / ckpt.MODEL_DIR).mkdir(parents=True)
    (adapters / ckpt.ADAPTER_DIR).mkdir(parents=True)
    assert ckpt.start_weights(None, "base", lora=True) == ("base", None)
    assert ckpt.start_weights(full, "base", lora=False) == (str(full / ckpt.MODEL_DIR), None)
    assert ckpt.start_weights(adapters, "base", lora=True) == ("base", str(adapters / ckpt.ADAPTER_DIR))
    with pytest.raises(ckpt.ResumeMismatch, match="holds a full-tuning model/"):
        ckpt.start_weights(full, "base", lora=True)
    with pytest.raises(ckpt.ResumeMismatch, match="holds LoRA adapters"):
        ckpt.start_weights(adapters, "base", lora=False)


# -- one rank ---------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def world(tmp_path_factory: pytest.TempPathFactory) -> World:
    return build_world(tmp_path_factory.mktemp("lora"), samples=3)


def lora_config(world: World, **actor: Any) -> TrainConfig:
    return train_config(world, lora={**LORA, **actor.pop("lora", {})}, **actor)


@pytest.mark.integration
@pytest.mark.parametrize("family", ["qwen2_vl", "qwen2_5_vl", "qwen3_vl", "qwen3_5"])
def test_every_family_adapts_every_projection_and_with_vision_every_block_linear(
    family: str, tmp_path: Path
) -> None:
    """The default targets cover each family's language model (Qwen3.5's linear-attention layers too),
    and ``vision`` every linear layer of the tower's blocks, whatever the family names its MLP."""
    from services.common.tiny_models import build_tiny_model

    model = build_tiny_model(family, tmp_path / family)
    config = ActorConfig(model_path=str(model), compute_dtype="float32", lora={**LORA, "vision": True})
    actor = Actor(config, total_steps=1)
    adapted = {n for n, _ in lora.lora_layers(actor.model)}
    small = ("in_proj_a", "in_proj_b")  # Qwen3.5's per-head gates (a handful of outputs): left alone
    for prefix in ("model.language_model.layers.", "model.visual.blocks."):
        # every linear layer of the scope, by its own path (an adapted one is its LoRA layer's base_layer)
        linears = {
            n.removesuffix(".base_layer") for n, m in actor.model.named_modules()
            if n.startswith(prefix) and isinstance(m, torch.nn.Linear) and ".lora_" not in n
        }  # fmt: skip
        linears = {n for n in linears if not n.endswith(small)}
        assert linears and linears == {n for n in adapted if n.startswith(prefix)}, (family, prefix)
    assert all(n.startswith(("model.language_model.layers.", "model.visual.blocks.")) for n in adapted)


@pytest.mark.integration
def test_what_is_adapted(world: World) -> None:
    text = Actor(lora_config(world).actor, total_steps=1)
    names = [n for n, _ in lora.lora_layers(text.model)]
    layers = text.hf_config.text_config.num_hidden_layers
    assert len(names) == 7 * layers  # q, k, v, o, gate, up, down of every decoder layer
    assert all(n.startswith("model.language_model.layers.") for n in names)
    both = Actor(lora_config(world, lora={"vision": True}).actor, total_steps=1)
    tower = [n for n, _ in lora.lora_layers(both.model) if n.startswith("model.visual.")]
    blocks = len(both.model.model.visual.blocks)
    # each block's attention (qkv, proj) and MLP (gate, up, down); never the merger or the head
    assert len(tower) == 5 * blocks and all(n.startswith("model.visual.blocks.") for n in tower)
    assert len(lora.lora_layers(both.model)) == 7 * layers + 5 * blocks
    assert not any("merger" in n or "lm_head" in n for n, _ in lora.lora_layers(both.model))
    # freeze_vision does not freeze the tower's adapters: actor.lora.vision decides
    frozen = Actor(lora_config(world, lora={"vision": True}, freeze_vision=True).actor, total_steps=1)
    assert any(p.requires_grad for n, p in frozen.model.named_parameters() if n.startswith("model.visual."))
    with pytest.raises(ValueError, match="matched no linear layer"):
        Actor(lora_config(world, lora={"target_modules": ["nothing_here"]}).actor, total_steps=1)


@pytest.mark.integration
def test_only_the_adapters_train_and_the_merged_view_is_the_adapted_model(world: World) -> None:
    config = lora_config(world)
    group = LocalActorGroup(config, str(world.model), world.store, config.effective_rollout())
    actor = group.actor
    trainable = {n for n, p in actor.model.named_parameters() if p.requires_grad}
    assert trainable and all(".lora_" in n for n in trainable)
    assert trainable == set(lora.adapter_names(actor.model))
    everything = sum(p.numel() for p in actor.model.parameters())
    adapters = sum(p.numel() for p in actor.model.parameters() if p.requires_grad)
    assert adapters < 0.2 * everything
    # fresh adapters change nothing: B is zero, so the merged view is the base itself
    merged = {k: v.clone() for k, v in group.state_dict().items()}
    base = PolicyModel(ActorConfig(model_path=str(world.model), compute_dtype="float32"), trainable=False)
    assert merged.keys() == base.model.state_dict().keys()
    assert all(torch.equal(merged[k], v) for k, v in base.model.state_dict().items())
    frozen = {n: p.detach().clone() for n, p in actor.model.named_parameters() if not p.requires_grad}

    groups = make_groups(world, config.effective_rollout(), [[5, 9], [7, 3]])
    group.load_batch(list(world.samples[:2]), groups)
    old = group.log_probs(temperature=1.0)
    every = advantages(groups)
    group.update([SequenceTargets(every[i], o) for i, o in zip(group.share, old, strict=True)], **UPDATE)
    # the base is bit-identical; AdamW holds moments for the adapters alone
    assert all(torch.equal(p, frozen[n]) for n, p in actor.model.named_parameters() if n in frozen)
    stepped = [p for p in actor.optimizer.state if actor.optimizer.state[p]]
    assert stepped and all(p.requires_grad for p in stepped)
    assert sum(p.numel() for p in stepped) == adapters
    # the adapters moved the policy, and the merged weights score the way the adapted model does
    after = group.log_probs(temperature=1.0)
    assert max(float((a - b).abs().max()) for a, b in zip(after, old, strict=True)) > 100 * TOLERANCE
    moved = group.state_dict()
    assert max(float((moved[k] - merged[k]).abs().max()) for k in merged) > 100 * TOLERANCE
    base.model.load_state_dict(moved)
    plain = base.log_probs(group.sequences, temperature=1.0)
    assert max(float((a - b).abs().max()) for a, b in zip(plain, after, strict=True)) <= TOLERANCE


@pytest.mark.integration
def test_the_reference_is_the_base_with_the_adapters_bypassed(world: World) -> None:
    """KL's reference under LoRA: the same model, adapters off; equal to a separate frozen copy of the
    base, also after the adapters moved (and the actor itself no longer scores like the base)."""
    config = lora_config(world)
    assert config.algorithm.needs_reference_model  # KL is on by default
    group = LocalActorGroup(config, str(world.model), world.store, config.effective_rollout())
    assert group.reference is None  # no second copy in memory
    groups = make_groups(world, config.effective_rollout(), [[5, 9], [7, 3]])
    group.load_batch(list(world.samples[:2]), groups)
    old = group.log_probs(temperature=1.0)
    every = advantages(groups)
    group.update([SequenceTargets(every[i], o) for i, o in zip(group.share, old, strict=True)], **UPDATE)
    reference = group.log_probs(temperature=1.0, reference=True)
    separate = PolicyModel(ActorConfig(model_path=str(world.model), compute_dtype="float32"), trainable=False)
    copy = separate.log_probs(group.sequences, temperature=1.0)
    assert max(float((a - b).abs().max()) for a, b in zip(reference, copy, strict=True)) <= TOLERANCE
    # the switch is restored: the actor scores with its adapters again
    adapted = group.log_probs(temperature=1.0)
    assert max(float((a - b).abs().max()) for a, b in zip(adapted, copy, strict=True)) > 100 * TOLERANCE


def _step(group: LocalActorGroup, world: World, config: TrainConfig, lengths: list[list[int]]) -> list:
    groups = make_groups(world, config.effective_rollout(), lengths)
    group.load_batch(list(world.samples[: len(lengths)]), groups)
    old = group.log_probs(temperature=1.0)
    every = advantages(groups)
    group.update([SequenceTargets(every[i], o) for i, o in zip(group.share, old, strict=True)], **UPDATE)
    group.scheduler_step()
    return old


@pytest.mark.integration
def test_a_resume_from_the_adapters_repeats_the_step(world: World, tmp_path: Path) -> None:
    config = lora_config(world)
    rollout = config.effective_rollout()
    whole = LocalActorGroup(config, str(world.model), world.store, rollout)
    _step(whole, world, config, [[5, 9], [7, 3]])
    folder = tmp_path / "step_1"
    whole.save(folder)
    # the adapters alone, in peft's format: a small fraction of the model, no model/
    assert not (folder / ckpt.MODEL_DIR).exists()
    saved = json.loads((folder / ckpt.ADAPTER_DIR / lora.CONFIG_FILE).read_text())
    assert saved["r"] == LORA["rank"] and saved["base_model_name_or_path"] == str(world.model)
    size = (folder / ckpt.ADAPTER_DIR / lora.ADAPTER_FILE).stat().st_size
    assert size < 0.3 * sum(f.stat().st_size for f in world.model.glob("*.safetensors"))
    second = _step(whole, world, config, [[4, 6], [8, 2]])

    resumed = LocalActorGroup(
        config, str(world.model), world.store, rollout, adapter_path=str(folder / ckpt.ADAPTER_DIR)
    )
    resumed.load_optimizer(folder)
    repeated = _step(resumed, world, config, [[4, 6], [8, 2]])
    assert all(torch.equal(a, b) for a, b in zip(repeated, second, strict=True))  # the same old log-probs
    after, expected = resumed.state_dict(), whole.state_dict()
    assert all(torch.equal(after[k], expected[k]) for k in expected)


# -- two ranks --------------------------------------------------------------------------------------------


@pytest.mark.slow
@pytest.mark.integration
def test_two_fsdp_ranks_train_the_adapters_like_one(world: World, tmp_path: Path) -> None:
    """Adapters sharded with their layers (FSDP2): initialised alike on every rank count, their
    gradients reduced with the rest; the merged weights gathered tensor by tensor."""
    rollout = lora_config(world).effective_rollout()
    even = make_groups(world, rollout, [[5, 9], [7, 3]])
    cases = {
        "lora": (lora_config(world), even),
        "lora_packed": (lora_config(world, padding_free=True), even),
        "lora_vision": (lora_config(world, lora={"vision": True}), even),
    }
    single = {name: run_step(world, *case) for name, case in cases.items()}
    out = tmp_path / "ranks"
    out.mkdir()
    spawn_ranks(fsdp_rank, (2, free_port(), world, cases, out), 2, RANKS_TIMEOUT_S, "the FSDP ranks")
    for name in cases:
        one = single[name]
        rank0, rank1 = (torch.load(out / f"{name}-rank{r}.pt") for r in range(2))
        assert rank1["final"] == {}
        assert rank0["local_params"] < one["local_params"]  # each rank holds a shard
        gap = max(float((one["final"][k] - one["initial"][k]).abs().max()) for k in one["final"])
        assert gap > 100 * TOLERANCE, name  # the step moved the merged weights
        assert max(float((rank0["final"][k] - v).abs().max()) for k, v in one["final"].items()) <= TOLERANCE
        old = in_step_order(rank0, rank1)
        assert max(float((a - b).abs().max()) for a, b in zip(old, one["old"], strict=True)) <= TOLERANCE
        assert rank0["metrics"]["grad_norm"] == pytest.approx(one["metrics"]["grad_norm"], rel=TOLERANCE)


# -- export -----------------------------------------------------------------------------------------------


def _checkpoint(group: LocalActorGroup, folder: Path, config: TrainConfig) -> Path:
    group.save(folder)
    identity = {
        "lora": config.actor.lora.model_dump(mode="json") if config.actor.lora else None,
        "model": ckpt.model_identity(config.actor.model_path),
    }
    ckpt.write_state(folder, {"step": 1, "run": identity})
    return folder


def _logits(model: Any, ids: torch.Tensor) -> torch.Tensor:
    with torch.no_grad():
        return model(input_ids=ids).logits.float()


@pytest.mark.integration
def test_export_writes_models_transformers_and_peft_load(world: World, tmp_path: Path) -> None:
    from peft import PeftModel
    from transformers import AutoModelForImageTextToText

    ids = torch.tensor([[5, 17, 42, 9, 3, 77]])
    # LoRA: train a step so the adapters are not zero, then export both ways
    config = lora_config(world)
    group = LocalActorGroup(config, str(world.model), world.store, config.effective_rollout())
    _step(group, world, config, [[5, 9], [7, 3]])
    trained = group.state_dict()  # the merged weights in fp32, as the engine receives them
    folder = _checkpoint(group, tmp_path / "lora" / "step_1", config)
    with pytest.raises(ExportError, match="not an empty folder"):
        export_checkpoint(folder, world.model)
    with pytest.raises(ExportError, match="is not a folder"):  # under a file: refused before any work
        export_checkpoint(folder, world.model / "config.json" / "out")
    assert export_checkpoint(folder, tmp_path / "adapter") == "adapter"
    assert export_checkpoint(folder, tmp_path / "merged", merge=True) == "model"

    merged = AutoModelForImageTextToText.from_pretrained(tmp_path / "merged")
    assert merged.dtype == torch.bfloat16
    assert json.loads((tmp_path / "merged" / "config.json").read_text())["dtype"] == "bfloat16"
    state = merged.state_dict()
    for key, value in trained.items():  # each merged weight rounded once to bf16
        assert torch.equal(state[key], value.to(torch.bfloat16)), key
    base = AutoModelForImageTextToText.from_pretrained(world.model, dtype=torch.float32).eval()
    before = _logits(base, ids)
    adapted = PeftModel.from_pretrained(base, tmp_path / "adapter").eval()  # wraps base in place
    fp32_merged = AutoModelForImageTextToText.from_pretrained(tmp_path / "merged", dtype=torch.float32)
    want, got = _logits(adapted, ids), _logits(fp32_merged.eval(), ids)
    assert (want - before).abs().max() > 1e-3  # peft applied the trained adapters
    # exactly the trainer's adapted model (its merged fp32 weights), and the bf16 merge to its rounding
    exact = AutoModelForImageTextToText.from_pretrained(world.model, dtype=torch.float32).eval()
    exact.load_state_dict(trained)
    assert (want - _logits(exact, ids)).abs().max() <= TOLERANCE
    assert (want - got).abs().max() <= 0.02 * want.abs().max()

    # full tuning: the fp32 master as bf16
    full = train_config(world)
    plain = LocalActorGroup(full, str(world.model), world.store, full.effective_rollout())
    _step(plain, world, full, [[5, 9], [7, 3]])
    master = plain.state_dict()
    folder = _checkpoint(plain, tmp_path / "full" / "step_1", full)
    assert export_checkpoint(folder, tmp_path / "full-bf16", merge=True) == "model"
    exported = AutoModelForImageTextToText.from_pretrained(tmp_path / "full-bf16")
    assert exported.dtype == torch.bfloat16
    state = exported.state_dict()
    assert all(torch.equal(state[k], v.to(torch.bfloat16)) for k, v in master.items())
    with pytest.raises(ExportError, match="not a complete checkpoint"):
        export_checkpoint(tmp_path / "full", tmp_path / "nowhere")


@pytest.mark.integration
def test_a_merge_onto_a_changed_base_is_refused(world: World, tmp_path: Path) -> None:
    import shutil

    base = tmp_path / "base"
    shutil.copytree(world.model, base)
    config = train_config(World(base, world.frames, world.samples, world.output), lora=LORA)
    group = LocalActorGroup(config, str(base), world.store, config.effective_rollout())
    folder = _checkpoint(group, tmp_path / "run" / "step_1", config)
    saved = json.loads((folder / ckpt.ADAPTER_DIR / lora.CONFIG_FILE).read_text())
    assert saved["base_model_name_or_path"] == str(base.resolve())  # absolute, wherever export runs
    settings = json.loads((base / "config.json").read_text())
    settings["text_config"]["rms_norm_eps"] = 1e-3  # another model under the same path
    (base / "config.json").write_text(json.dumps(settings))
    with pytest.raises(ExportError, match="not the model"):
        export_checkpoint(folder, tmp_path / "merged", merge=True)
    assert not (tmp_path / "merged").exists()


@pytest.mark.slow
@pytest.mark.integration
def test_the_exported_adapter_folder_serves_in_vllm_as_peft_applies_it(world: World, tmp_path: Path) -> None:
    """``reelrl export`` without ``--merge``: vLLM's LoRA serving loads the folder onto the base and its
    log-probs of a greedy response are those of peft's model (fp32 both), and differ from the base's."""
    from peft import PeftModel
    from transformers import AutoModelForImageTextToText
    from vllm import LLM, SamplingParams
    from vllm.lora.request import LoRARequest

    from services.rollout.vllm_bridge import engine_kwargs

    config = lora_config(world)
    group = LocalActorGroup(config, str(world.model), world.store, config.effective_rollout())
    with torch.no_grad():  # trained adapters: B no longer zero
        generator = torch.Generator().manual_seed(3)
        for name, param in group.actor.model.named_parameters():
            if ".lora_B." in name:
                param.copy_(0.2 * torch.randn(param.shape, generator=generator))
    folder = _checkpoint(group, tmp_path / "run" / "step_1", config)
    assert export_checkpoint(folder, tmp_path / "adapter") == "adapter"

    kwargs = engine_kwargs(str(world.model), config.effective_rollout())
    kwargs.pop("worker_extension_cls")
    llm = LLM(**{**kwargs, "distributed_executor_backend": "uni"}, enable_lora=True, max_lora_rank=8)
    try:
        prompt = [11, 42, 7, 99, 5, 23]
        params = SamplingParams(max_tokens=6, temperature=0.0, logprobs=0, ignore_eos=True)
        request = LoRARequest("exported", 1, str(tmp_path / "adapter"))
        (output,) = llm.generate([{"prompt_token_ids": prompt}], params, lora_request=request, use_tqdm=False)
    finally:  # the engine core's process and its renderer, as RolloutEngine.shutdown stops them
        if (renderer := getattr(llm.llm_engine, "renderer", None)) is not None:
            renderer.shutdown()
        llm.llm_engine.engine_core.shutdown()
    completion = output.outputs[0]
    ids = list(completion.token_ids)
    served = torch.tensor([float(pos[t].logprob) for pos, t in zip(completion.logprobs, ids, strict=True)])

    def scored(model: Any) -> torch.Tensor:
        full = torch.tensor([prompt + ids])
        with torch.no_grad():
            logits = model(input_ids=full).logits[0, len(prompt) - 1 : -1].float()
        return logits.log_softmax(-1).gather(1, torch.tensor(ids)[:, None])[:, 0]

    base = AutoModelForImageTextToText.from_pretrained(world.model, dtype=torch.float32).eval()
    plain = scored(base)
    adapted = scored(PeftModel.from_pretrained(base, tmp_path / "adapter").eval())
    assert (adapted - served).abs().max() < 1e-4
    assert (plain - served).abs().max() > 1e-3
