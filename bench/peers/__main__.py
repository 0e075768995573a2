"""ReelRL against the GRPO trainers people use today, side by side: the same model, task, samples,
reward and budget, one framework after another on the same 2 cores.

    $VENV/bin/python -m bench.peers [--steps 320] [--val-every 20] [--max-minutes 8] [--allow-load]
        [--frameworks reelrl-video,reelrl-image,trl,trl-vllm,verl] [--work DIR] [--no-record]

The work (bench/peers/task.py):
- model: the tiny random-weight Qwen2.5-VL of ``reelrl make-sample-data`` (build_tiny_model, seed 0);
- task: the direction task of examples/tiny_cpu_rl.yaml (64 training videos, 32 held-out, disjoint),
  pure RL: no correct answer anywhere but in the reward;
- start: from random weights nothing learns, so ReelRL makes the yaml's format warm start ONCE (120
  supervised steps, lr 3e-4, batch 16, on uniformly random answer letters; ``total_steps=0``, saved as an
  HF checkpoint) and every framework's GRPO starts from that same checkpoint;
- input forms: ``video`` (4 frames at 56x56, one video per prompt) and ``image``: the same 4 frames, as
  our pipeline samples them (decode_clip with the yaml's parameters), as 4 PNG images per prompt, images
  before the question in one user turn. TRL 1.16's GRPOTrainer takes images only (its dataset columns
  ``image``/``images``, its vLLM path sends ``multi_modal_data={"image": ...}``; nothing reads a video),
  so ReelRL also trains on the image form and that row is the like-for-like one;
- reward: our reward library (services/reward, in-process), the score ReelRL trains on (``overall``),
  called from TRL's ``reward_funcs`` hook (bench/peers/trl_driver.py) and verl's
  ``custom_reward_function`` (bench/peers/verl_reward.py);
- budget (task.Budget, the yaml's values): GRPO groups of 8 completions, 8 prompts per optimizer step (64
  completions), one update per batch (no mini-batches, no epochs), AdamW lr 3e-4 constant, no lr warm-up,
  betas (0.9, 0.999), eps 1e-8, weight decay 0, grad-norm clip 1.0, advantage (r - mean_group) /
  std_group, no KL (no reference model), token-mean loss over the step's completions, PPO clip 0.2 / 0.28,
  sampling temperature 1.0, top-p 1, no top-k, at most 8 new tokens, fp32 weights and compute, on CPU;
  ``--steps`` optimizer steps or ``--max-minutes`` of training, whichever comes first, for every side;
- held-out accuracy: greedy answers (at most 8 tokens) to the 32 held-out samples, scored by the reward
  library's accuracy, every ``--val-every`` steps and at the end; step 0 before training;
- minutes: training wall time from the first step, validation taken out on every side (bench/peers/
  report.py says how); setup (model load, engine start) and the shared warm start are counted nowhere.

Frameworks (one row each):
- ``reelrl-video``, ``reelrl-image``: ``reelrl train examples/tiny_cpu_rl.yaml`` with the warm start's
  checkpoint as ``actor.model_path``, ``warmup.steps=0`` and the budget as overrides (task.Budget
  reelrl_overrides); vLLM 0.32 rollouts in its own processes, the HF actor, weights pushed every step.
- ``trl``: TRL 1.16.0 (bench/peers/trl-lock.txt) GRPOTrainer, HF ``generate`` for rollouts (its default
  path), configured in bench/peers/trl_driver.py grpo_config: num_generations=8,
  per_device_train_batch_size=64 (completions), gradient_accumulation_steps=1, steps_per_generation=1,
  num_iterations=1, learning_rate=3e-4, lr_scheduler_type="constant" (TRL's default decays linearly),
  warmup_steps=0, weight_decay=0, adam_beta1=0.9, adam_beta2=0.999, adam_epsilon=1e-8, max_grad_norm=1.0,
  optim="adamw_torch" (torch's AdamW, as ours), beta=0 (no reference model), loss_type="dapo" (token-mean
  over the global batch, our token-mean), epsilon=0.2, epsilon_high=0.28, scale_rewards="group",
  importance_sampling_level="token", temperature=1.0, top_p=1.0, top_k=0 (off), max_completion_length=8,
  bf16=False and fp16=False (TRL defaults to bf16), use_cpu=True, gradient_checkpointing=False (TRL's
  default is on; ours off), model_init_kwargs dtype float32, seed 0, shuffle_dataset=True, logging_steps=1,
  save_strategy="no", report_to="none". Left at TRL's defaults because ReelRL has no such knob here:
  disable_dropout=False (both train in train mode), mask_truncated_completions=False, top_entropy_quantile
  =1.0, delta=None (ReelRL's dual clip c=3 only acts on ratios far from 1; with one update per batch the
  ratio is 1 on both sides). Held-out: a TrainerCallback, greedy HF ``generate`` on the trained weights.
- ``trl-vllm``: the same with TRL's vLLM fast path, ``use_vllm=True, vllm_mode="colocate"`` (vLLM in the
  trainer's process, weights loaded into it every step; also its default importance-sampling correction
  of the vLLM/HF log-prob mismatch, ``vllm_importance_sampling_correction=True``), for ``--trl-vllm-steps``
  steps: it starts on the CPU build of vLLM 0.32 (TRL warns it supports vLLM 0.22-0.31). Where it ran,
  its steps were slower than TRL's HF path on these 2 cores; on a CPU whose vLLM backend repacks the
  linear weights (AMX), its per-parameter ``load_weights`` sync fails (docs/benchmarks.md). So the
  ``trl`` row (its faster path here) is the one run to the target, and this row gives its step time
  or its error.
- ``verl``: verl 0.9.1 (bench/peers/verl-lock.txt), ``python -m verl.trainer.main_ppo`` with GRPO, the
  same budget as Hydra overrides (verl_overrides) and ``trainer.device=cpu``, its default trainer and then
  its classic one (``trainer.use_v1=False``), each for at most 3 minutes. Each bench run tries both and
  records the error and version each stops with.

Figures (bench/results.json via bench/results.py; refused on a busy machine without --allow-load):
``peer_trl_step_time_ratio`` (TRL's step seconds ÷ ReelRL's, both on the image form),
``peer_trl_vllm_step_time_ratio``, ``peer_<framework>_minutes_to_09`` (null plus ``..._reason`` when not
reached), ``peer_<framework>_step_s``, ``peer_<framework>_heldout_accuracy``, ``peer_<framework>_steps``
and ``peer_verl_reason``; the table is printed and written to WORK/table.md (the figures to WORK/figures.json), the curves to
docs/peer_curves.png (``--plot``).
"""

from __future__ import annotations

import argparse
import json
import os
import re
import signal
import subprocess
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from bench.bench_learning import RL_CONFIG, ROOT, run_train
from bench.peers import report
from bench.peers.side_env import SideEnvError, side_python
from bench.peers.task import Budget, TaskFiles, driver_spec, form_overrides, prepare, warm_start
from bench.results import LoadWatch, add_load_argument, record

PEERS = Path(__file__).resolve().parent
TRL_LOCK = PEERS / "trl-lock.txt"
VERL_LOCK = PEERS / "verl-lock.txt"


class PeerFailed(RuntimeError):
    """A peer could not run here; the message is the row's reason (the error and the version)."""


@dataclass
class Bench:
    work: Path
    files: TaskFiles
    checkpoint: Path
    budget: Budget
    max_minutes: float | None
    val_limit: int | None
    trl_vllm_steps: int

    def side_env(self) -> dict[str, str]:
        return {
            **os.environ,
            "HF_HUB_OFFLINE": "1",
            "HF_DATASETS_OFFLINE": "1",
            "HF_HOME": str(self.work / "hf"),
            "REELRL_HOME": str(self.work / "home"),
            "VLLM_CPU_KVCACHE_SPACE": "1",  # GiB: on CPU, vLLM's memory fraction would reserve 30 % of RAM
            "VLLM_LOGGING_LEVEL": "WARNING",
            "TOKENIZERS_PARALLELISM": "false",
        }


def run_reelrl(bench: Bench, form: str) -> list[dict]:
    overrides = [
        f"actor.model_path={bench.checkpoint}", "warmup.steps=0", "warmup.files=[]",
        *bench.budget.reelrl_overrides(), *form_overrides(bench.files, form),
    ]  # fmt: skip
    if bench.val_limit:
        overrides.append(f"trainer.val_limit={bench.val_limit}")
    return report.within(run_train(RL_CONFIG, overrides, bench.work, f"reelrl-{form}"), bench.max_minutes)


def run_trl(bench: Bench, generation: str, steps: int) -> list[dict]:
    """TRL's GRPOTrainer in its side env (bench/peers/trl_driver.py) on the image form."""
    name = "trl" if generation == "hf" else "trl-vllm"
    try:
        python = side_python("trl", TRL_LOCK)
    except SideEnvError as exc:
        raise PeerFailed(f"its side environment did not build (trl-lock.txt): {exc}") from exc
    out = bench.work / name
    budget = Budget(
        **{**bench.budget.__dict__, "steps": steps, "val_every": min(bench.budget.val_every, steps)}
    )
    spec = driver_spec(bench.files, bench.checkpoint, budget, "image", out)
    if bench.val_limit:
        spec["val"] = spec["val"][: bench.val_limit]
    out.mkdir(parents=True, exist_ok=True)
    (out / "metrics.jsonl").unlink(missing_ok=True)
    (out / "spec.json").write_text(json.dumps(spec))
    command = [
        str(python),
        "-m",
        "bench.peers.trl_driver",
        "--spec",
        str(out / "spec.json"),
        "--generation",
        generation,
    ]
    if bench.max_minutes is not None:
        command += ["--max-minutes", str(bench.max_minutes)]
    log = bench.work / f"{name}.log"
    print(f"[{name}] {' '.join(command[1:])} (log: {log})", flush=True)
    limit = 600 + 3 * 60 * (bench.max_minutes or 60)
    with log.open("w") as fh:
        try:
            done = subprocess.run(
                command, cwd=ROOT, env=bench.side_env(), stdout=fh, stderr=subprocess.STDOUT, timeout=limit
            )
        except subprocess.TimeoutExpired as exc:
            raise PeerFailed(f"TRL did not finish in {limit} s (log: {log})") from exc
    rows_file = out / "metrics.jsonl"
    if done.returncode or not rows_file.exists():
        raise PeerFailed(f"TRL 1.16.0 ({generation}) exited with {done.returncode}: {last_error(log)}")
    rows = [json.loads(line) for line in rows_file.read_text().splitlines() if line.strip()]
    return report.within(rows, bench.max_minutes)  # the same cut as ReelRL's rows


def last_error(log: Path) -> str:
    """The exception a failed run ended with, in its own words (the last ``SomethingError: ...`` line)."""
    lines = [x.strip() for x in log.read_text(errors="replace").splitlines()]
    found = [x for x in lines if re.match(r"^([\w.]+\.)?\w*(Error|Exception)(\(\w+\))?: ", x)]
    return found[-1] if found else (lines[-1] if lines else "no output")


def verl_overrides(bench: Bench, data: Path) -> list[str]:
    """The budget in verl's Hydra names (verl/trainer/config/ppo_trainer.yaml)."""
    b = bench.budget
    return [
        "algorithm.adv_estimator=grpo", "algorithm.use_kl_in_reward=False", "algorithm.norm_adv_by_std_in_grpo=True",
        f"data.train_files={data / 'train.parquet'}", f"data.val_files={data / 'val.parquet'}",
        f"data.train_batch_size={b.prompts}", "data.max_prompt_length=512", f"data.max_response_length={b.max_tokens}",
        "data.image_key=images", f"actor_rollout_ref.model.path={bench.checkpoint}",
        f"actor_rollout_ref.actor.optim.lr={b.lr}", f"actor_rollout_ref.actor.optim.weight_decay={b.weight_decay}",
        "actor_rollout_ref.actor.optim.lr_warmup_steps=0", f"actor_rollout_ref.actor.grad_clip={b.grad_clip}",
        f"actor_rollout_ref.actor.ppo_mini_batch_size={b.prompts}", "actor_rollout_ref.actor.ppo_epochs=1",
        f"actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu={b.prompts * b.group}",
        f"actor_rollout_ref.rollout.log_prob_micro_batch_size_per_gpu={b.prompts * b.group}",
        f"actor_rollout_ref.actor.clip_ratio_low={b.clip_low}", f"actor_rollout_ref.actor.clip_ratio_high={b.clip_high}",
        "actor_rollout_ref.actor.loss_agg_mode=token-mean", "actor_rollout_ref.actor.use_kl_loss=False",
        "actor_rollout_ref.actor.entropy_coeff=0", "actor_rollout_ref.rollout.name=vllm",
        f"actor_rollout_ref.rollout.n={b.group}", f"actor_rollout_ref.rollout.temperature={b.temperature}",
        "actor_rollout_ref.rollout.top_p=1.0", "actor_rollout_ref.rollout.top_k=-1",
        f"custom_reward_function.path={PEERS / 'verl_reward.py'}", "custom_reward_function.name=compute_score",
        "trainer.device=cpu", "trainer.n_gpus_per_node=1", "trainer.nnodes=1",
        f"trainer.total_training_steps={b.steps}", f"trainer.test_freq={b.val_every}", "trainer.logger=[console]",
        "trainer.save_freq=-1", f"trainer.default_local_dir={bench.work / 'verl' / 'checkpoints'}",
    ]  # fmt: skip


def write_verl_data(bench: Bench, data: Path) -> None:
    """verl's RL dataset form: parquet rows with a chat ``prompt`` (``<image>`` markers before the
    question), ``images`` and the reward library's sample as ``reward_model.ground_truth``."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    data.mkdir(parents=True, exist_ok=True)
    for split in ("train", "val"):
        samples = driver_spec(bench.files, bench.checkpoint, bench.budget, "image", data)[split]
        rows = [
            {
                "data_source": "reelrl_direction",
                "prompt": [{"role": "user", "content": "<image>" * len(s["images"]) + s["prompt"]}],
                "images": [{"image": p} for p in s["images"]],
                "reward_model": {"style": "rule", "ground_truth": json.dumps(s["reward"])},
                "extra_info": {"id": s["id"]},
            }
            for s in samples
        ]
        pq.write_table(pa.Table.from_pylist(rows), data / f"{split}.parquet")


def run_verl(bench: Bench) -> list[dict]:
    """verl's GRPO trainer as its users start it (its default trainer, then its classic one,
    ``trainer.use_v1=False``); on this machine both stop before a first step, and the reasons are raised
    as PeerFailed."""
    try:
        python = side_python("verl", VERL_LOCK)
    except SideEnvError as exc:
        raise PeerFailed(f"its side environment did not build (verl-lock.txt): {exc}") from exc
    data = bench.work / "verl"
    write_verl_data(bench, data)
    reasons = []
    for variant, extra in (("default trainer", []), ("trainer.use_v1=False", ["trainer.use_v1=False"])):
        log = bench.work / f"verl-{len(reasons)}.log"
        command = [str(python), "-m", "verl.trainer.main_ppo", *verl_overrides(bench, data), *extra]
        print(f"[verl] python -m verl.trainer.main_ppo ... {' '.join(extra)} (log: {log})", flush=True)
        code = run_bounded(command, data, bench.side_env(), log, VERL_LIMIT_S)
        if code is None:
            reasons.append(
                f"{variant}: no training step within {VERL_LIMIT_S} s, its last words: {last_words(log)}"
            )
        elif code:
            reasons.append(f"{variant}: exited with {code}: {last_error(log)}")
        else:
            raise PeerFailed(
                f"verl 0.9.1 exited 0, but this bench does not read verl's metrics yet (log: {log})"
            )
    raise PeerFailed("verl 0.9.1 with trainer.device=cpu: " + "; ".join(reasons))


#: how long a verl attempt may run: it starts Ray and its workers in about a minute, then waits for GPUs
VERL_LIMIT_S = 180


def run_bounded(command: list[str], cwd: Path, env: dict[str, str], log: Path, limit_s: float) -> int | None:
    """Run ``command`` with its output in ``log``; past ``limit_s`` interrupt it (SIGINT, so a Ray it
    started is shut down by its own exit handlers), and return None."""
    with log.open("w") as fh:
        proc = subprocess.Popen(command, cwd=cwd, env=env, stdout=fh, stderr=subprocess.STDOUT)
        try:
            return proc.wait(timeout=limit_s)
        except subprocess.TimeoutExpired:
            proc.send_signal(signal.SIGINT)
            try:
                proc.wait(timeout=60)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
            return None


def last_words(log: Path) -> str:
    """The last warning or error line of a run that hung (colour codes and Ray's actor prefix dropped;
    Python's import-time UserWarnings are not its words)."""
    lines = []
    for raw in log.read_text(errors="replace").splitlines():
        line = re.sub(r"\x1b\[[0-9;]*m", "", raw)
        lines.append(re.sub(r"^\(\w+ pid=\d+\)\s*", "", line).strip())
    found = [x for x in lines if re.search(r"WARNING|ERROR|Error", x) and "UserWarning" not in x]
    return found[-1] if found else (lines[-1] if lines else "no output")


@dataclass(frozen=True)
class Framework:
    """One row of the table: the framework as named in results.json keys, its input form, its runner."""

    label: str
    key: str
    form: str
    run: Callable[[Bench], list[dict]]
    note: str = ""


FRAMEWORKS = {
    "reelrl-video": Framework("ReelRL", "reelrl_video", "video", lambda b: run_reelrl(b, "video")),
    "reelrl-image": Framework("ReelRL", "reelrl", "image (4 frames)", lambda b: run_reelrl(b, "image")),
    "trl": Framework(
        "TRL 1.16.0", "trl", "image (4 frames)", lambda b: run_trl(b, "hf", b.budget.steps), "(HF generate)"
    ),
    "trl-vllm": Framework(
        "TRL 1.16.0",
        "trl_vllm",
        "image (4 frames)",
        lambda b: run_trl(b, "vllm", b.trl_vllm_steps),
        "(vLLM colocate)",
    ),
    "verl": Framework("verl 0.9.1", "verl", "image (4 frames)", run_verl),
}


def figures(results: dict[str, report.Summary]) -> dict[str, object]:
    """results.json's keys: per framework its step time, held-out accuracy, steps and minutes to 0.9
    (null with a reason when not reached), or its reason when it could not run; the step-time ratios."""
    out: dict[str, object] = {}
    for name, s in results.items():
        # every key of a framework that ran this time, null where it has no value: a figure of an
        # earlier run must not stay beside this run's reason (results.json merges what it is given)
        key = f"peer_{FRAMEWORKS[name].key}"
        ran = s.reason is None
        out[f"{key}_reason"] = s.reason
        out[f"{key}_step_s"] = None if not ran or s.step_s is None else round(s.step_s, 3)
        out[f"{key}_heldout_accuracy"] = None if not ran or s.accuracy is None else round(s.accuracy, 3)
        out[f"{key}_steps"] = s.steps if ran else None
        reached = ran and s.minutes_to_target is not None
        out[f"{key}_minutes_to_09"] = round(s.minutes_to_target, 2) if reached else None
        out[f"{key}_minutes_to_09_reason"] = (
            None
            if reached
            else f"not reached: held-out {s.accuracy} after {s.steps} steps, {s.minutes:.1f} training minutes"
            if ran
            else f"did not run: {s.reason}"
        )
    ours = results.get("reelrl-image")
    for peer in ("trl", "trl-vllm", "verl"):
        if peer not in results:
            continue
        theirs = results[peer]
        measured = ours is not None and bool(ours.step_s) and theirs.step_s is not None
        out[f"peer_{FRAMEWORKS[peer].key}_step_time_ratio"] = (
            round(theirs.step_s / ours.step_s, 2) if measured else None
        )
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--work", type=Path, default=ROOT / "bench" / ".work" / "peers")
    parser.add_argument(
        "--steps",
        type=int,
        default=320,
        help="optimizer steps of every framework (8 minutes of ReelRL on video at ~1.5 s a step)",
    )
    parser.add_argument("--val-every", type=int, default=20)
    parser.add_argument("--max-minutes", type=float, default=8.0, help="training minutes of every framework")
    parser.add_argument(
        "--trl-vllm-steps", type=int, default=10, help="steps of the trl-vllm row (its step time)"
    )
    parser.add_argument("--frameworks", default=",".join(FRAMEWORKS))
    parser.add_argument(
        "--warmup-steps", type=int, default=None, help="the warm start's steps (default: the yaml's)"
    )
    parser.add_argument("--val-limit", type=int, default=None, help="held-out samples (default: all 32)")
    parser.add_argument("--plot", type=Path, default=ROOT / "docs" / "peer_curves.png")
    parser.add_argument("--no-record", action="store_true", help="print only; leave bench/results.json alone")
    add_load_argument(parser)
    args = parser.parse_args()
    chosen = args.frameworks.split(",")
    unknown = sorted(set(chosen) - set(FRAMEWORKS))
    if unknown:
        parser.error(f"unknown --frameworks {unknown}; known: {', '.join(FRAMEWORKS)}")
    watch = LoadWatch.begin("bench_peers", args.allow_load)

    work = args.work.resolve()
    work.mkdir(parents=True, exist_ok=True)
    files = prepare(work, train_videos=64, val_videos=32)
    checkpoint, warm_rows = warm_start(files, work, args.warmup_steps)
    before = warm_rows[-1].get("val/accuracy") if warm_rows else "not measured"
    print(f"[peers] GRPO starts from {checkpoint} (held-out after the warm start: {before})", flush=True)
    budget = Budget(steps=args.steps, val_every=args.val_every)
    bench = Bench(work, files, checkpoint, budget, args.max_minutes, args.val_limit, args.trl_vllm_steps)

    results: dict[str, report.Summary] = {}
    curves: dict[str, list[tuple[int, float, float]]] = {}
    for name in chosen:
        fw = FRAMEWORKS[name]
        try:
            rows = fw.run(bench)
        except PeerFailed as exc:
            print(f"[{name}] cannot run: {exc}", flush=True)
            results[name] = report.Summary(
                fw.label, fw.form, 0, None, None, None, None, 0.0, fw.note, str(exc)
            )
            continue
        results[name] = report.summarise(fw.label, fw.form, rows, budget.group * budget.prompts, fw.note)
        curves[f"{fw.label} {fw.note} · {fw.form}".replace("  ", " ")] = report.curve(rows)

    table = report.table(list(results.values()))
    (work / "table.md").write_text(table + "\n")
    print(table, flush=True)
    if curves and str(args.plot) != "none":
        report.plot(curves, args.plot)
    found = figures(results)
    (work / "figures.json").write_text(json.dumps(found, indent=2) + "\n")
    print(json.dumps(found, indent=2), flush=True)
    if not args.no_record:
        record(found, watch)


if __name__ == "__main__":
    main()
