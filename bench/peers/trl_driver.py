"""TRL's GRPOTrainer on the peer bench's spec (bench/peers/task.py ``driver_spec``), run with the TRL side
env's python by ``python -m bench.peers`` (``-m bench.peers.trl_driver --spec SPEC``, from the repository
root). It imports TRL, datasets and the product's reward library (the side env reaches the product venv
through its .pth), nothing of the bench itself: the spec is plain JSON.

Writes, beside the spec's ``out``: ``metrics.jsonl`` (one row per optimizer step, ReelRL's metric names
where the meaning is the same: ``timing/step_s``, ``perf/elapsed_s``, ``perf/train_s``, ``val/accuracy``,
``response_length/mean``, ``reward/accuracy``) and ``run.json`` (versions and every GRPOConfig value).
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path
from typing import Any

import torch


def grpo_config(budget: dict[str, Any], out: Path, generation: str):
    """GRPOConfig with every knob that decides the work set to ReelRL's (bench/peers/__main__.py says
    why each value)."""
    from trl import GRPOConfig

    completions = budget["group"] * budget["prompts"]
    vllm = (
        {"use_vllm": True, "vllm_mode": "colocate", "vllm_max_model_length": 1024}
        if generation == "vllm"
        else {}
    )
    return GRPOConfig(
        output_dir=str(out / "trl-output"),
        # one optimizer step = 8 prompts x 8 completions, generated once and used once
        num_generations=budget["group"],
        per_device_train_batch_size=completions,
        gradient_accumulation_steps=1,
        steps_per_generation=1,
        num_iterations=1,
        max_steps=budget["steps"],
        # optimizer: AdamW (torch's, not fused), constant lr, no warm-up, no decay, clip at 1.0
        learning_rate=budget["lr"],
        lr_scheduler_type="constant",
        warmup_steps=0,
        weight_decay=budget["weight_decay"],
        adam_beta1=budget["betas"][0],
        adam_beta2=budget["betas"][1],
        adam_epsilon=budget["adam_eps"],
        max_grad_norm=budget["grad_clip"],
        optim="adamw_torch",
        # loss: no KL (no reference model), token-mean over the step's completions (DAPO), PPO clip
        beta=0.0,
        loss_type="dapo",
        epsilon=budget["clip_low"],
        epsilon_high=budget["clip_high"],
        scale_rewards="group",
        importance_sampling_level="token",
        # sampling
        temperature=budget["temperature"],
        top_p=1.0,
        top_k=0,
        max_completion_length=budget["max_tokens"],
        # precision and device: fp32 on the CPU, no gradient checkpointing (TRL defaults to bf16 and on)
        bf16=False,
        fp16=False,
        use_cpu=True,
        gradient_checkpointing=False,
        model_init_kwargs={"dtype": "float32"},
        seed=budget["seed"],
        shuffle_dataset=True,
        remove_unused_columns=False,
        logging_steps=1,
        save_strategy="no",
        report_to="none",
        disable_tqdm=True,
        dataloader_num_workers=0,
        **vllm,
    )


def completion_text(completion: Any) -> str:
    """A completion as TRL hands it to a reward function: a string, or chat messages whose content is a
    string or a list of parts."""
    if isinstance(completion, str):
        return completion
    content = completion[-1]["content"]
    if isinstance(content, str):
        return content
    return "".join(part.get("text", "") for part in content if part.get("type") == "text")


class ReelRLReward:
    """TRL's reward-function hook calling the product's reward library: the score ReelRL trains on
    (``overall``) for each completion; the step's accuracy is kept for the metrics."""

    def __init__(self) -> None:
        from services.reward import make_reward_client

        self.client = make_reward_client()  # in-process, as ReelRL's trainer by default
        self.__name__ = "reelrl_reward"
        self.accuracy: list[float] = []

    def score(self, specs: list[dict[str, Any]], texts: list[str]):
        return self.client.score_batch(list(zip(specs, texts, strict=True)))

    def __call__(self, prompts, completions, reward, **kwargs) -> list[float]:
        results = self.score([json.loads(r) for r in reward], [completion_text(c) for c in completions])
        self.accuracy = [r.accuracy for r in results]
        return [r.overall for r in results]


def messages(prompt: str, images: int) -> list[dict[str, Any]]:
    """One user turn, the images first and then the question: how ReelRL's rollout builds it
    (services/rollout/prompts.py chat_messages)."""
    return [
        {
            "role": "user",
            "content": [*({"type": "image"} for _ in range(images)), {"type": "text", "text": prompt}],
        }
    ]


def held_out(model, processor, samples: list[dict[str, Any]], reward: ReelRLReward, max_tokens: int) -> float:
    """Greedy answers to every held-out sample (HF generate on the trained weights, one prompt at a time),
    scored by the reward library: the accuracy ReelRL's validation reports."""
    from PIL import Image

    was_training = model.training
    model.eval()
    texts = []
    with torch.no_grad():
        for s in samples:
            images = [Image.open(p).convert("RGB") for p in s["images"]]
            prompt = processor.apply_chat_template(
                messages(s["prompt"], len(images)), tokenize=False, add_generation_prompt=True
            )
            inputs = processor(text=[prompt], images=images or None, return_tensors="pt")
            out = model.generate(**inputs, do_sample=False, max_new_tokens=max_tokens)
            new = out[0, inputs["input_ids"].shape[1] :]
            texts.append(processor.decode(new, skip_special_tokens=True))
    if was_training:
        model.train()
    results = reward.score([s["reward"] for s in samples], texts)
    return sum(r.accuracy for r in results) / len(results)


def make_callback(
    trainer_ref: dict, spec: dict[str, Any], reward: ReelRLReward, rows: Path, max_minutes: float | None
):
    from transformers import TrainerCallback

    budget = spec["budget"]

    class HeldOut(TrainerCallback):
        """Times each optimizer step (``on_step_begin`` → ``on_step_end``: generation, reward, loss,
        backward, optimizer step), validates every ``val_every`` steps and at the end, and writes one
        row per step; validation time is kept out of ``perf/train_s``. Past ``max_minutes`` of training
        it validates and stops the run (the bench's wall-clock budget)."""

        def __init__(self) -> None:
            self.started = self.step_began = 0.0
            self.val_s = 0.0
            self.pending: dict[str, Any] = {}

        def validate(self, step: int) -> dict[str, float]:
            trainer = trainer_ref["trainer"]
            began = time.perf_counter()
            accuracy = held_out(
                trainer.model, trainer.processing_class, spec["val"], reward, budget["max_tokens"]
            )
            self.val_s += time.perf_counter() - began
            return {"val/accuracy": accuracy}

        def on_train_begin(self, args, state, control, **kwargs):
            rows.write_text(json.dumps({"step": 0, **self.validate(0)}) + "\n")
            self.started = time.perf_counter()
            self.val_s = 0.0  # step 0's validation is before the clock starts (as ReelRL's)

        def on_step_begin(self, args, state, control, **kwargs):
            self.step_began = time.perf_counter()

        def on_step_end(self, args, state, control, **kwargs):
            row: dict[str, Any] = {
                "step": state.global_step,
                "timing/step_s": time.perf_counter() - self.step_began,
            }
            row["reward/accuracy"] = sum(reward.accuracy) / max(len(reward.accuracy), 1)
            over = (
                max_minutes is not None and time.perf_counter() - self.started - self.val_s > max_minutes * 60
            )
            if over:
                control.should_training_stop = True
            if over or state.global_step % budget["val_every"] == 0 or state.global_step == budget["steps"]:
                row.update(self.validate(state.global_step))
            row["perf/elapsed_s"] = time.perf_counter() - self.started
            row["perf/train_s"] = row["perf/elapsed_s"] - self.val_s
            self.pending = row

        def on_log(self, args, state, control, logs=None, **kwargs):
            if not self.pending or "train_runtime" in (logs or {}):
                return
            logs = logs or {}
            row = self.pending
            if "completions/mean_length" in logs:
                row["response_length/mean"] = logs["completions/mean_length"]
            row["trl/" + "loss"] = logs.get("loss")
            with rows.open("a") as fh:
                fh.write(json.dumps(row) + "\n")
            self.pending = {}

    return HeldOut()


def dataset(samples: list[dict[str, Any]]):
    """TRL's conversational VLM form: ``prompt`` (the question as a user turn; TRL puts the ``images``
    before it in that turn) and ``images`` (PIL), plus the reward library's sample as JSON for the hook."""
    from datasets import Dataset
    from PIL import Image

    return Dataset.from_list(
        [
            {
                "prompt": [{"role": "user", "content": s["prompt"]}],
                "images": [Image.open(p).convert("RGB") for p in s["images"]],
                "reward": json.dumps(s["reward"]),
            }
            for s in samples
        ]
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--spec", type=Path, required=True)
    parser.add_argument("--generation", choices=["vllm", "hf"], default="vllm")
    parser.add_argument("--max-minutes", type=float, default=None, help="stop after this much training")
    args = parser.parse_args()
    spec = json.loads(args.spec.read_text())
    if spec["form"] != "image":
        raise SystemExit(f"TRL's GRPOTrainer takes images, not {spec['form']} (bench/peers/__main__.py)")
    import accelerate
    import datasets
    import transformers
    import trl
    import vllm
    from trl import GRPOTrainer

    out = Path(spec["out"])
    out.mkdir(parents=True, exist_ok=True)
    torch.manual_seed(spec["budget"]["seed"])
    config = grpo_config(spec["budget"], out, args.generation)
    versions = {m.__name__: m.__version__ for m in (trl, transformers, accelerate, datasets, torch, vllm)}
    (out / "run.json").write_text(
        json.dumps(
            {"generation": args.generation, "versions": versions, "config": config.to_dict()}, default=str
        )
    )
    reward = ReelRLReward()
    ref: dict = {}
    callback = make_callback(ref, spec, reward, out / "metrics.jsonl", args.max_minutes)
    trainer = GRPOTrainer(
        model=spec["model"], reward_funcs=[reward], args=config, train_dataset=dataset(spec["train"]),
        callbacks=[callback],
    )  # fmt: skip
    ref["trainer"] = trainer
    trainer.train()


if __name__ == "__main__":
    main()
