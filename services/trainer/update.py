"""One policy update over a step's sequences: mini-batches (optimizer steps) of micro-batches (gradient
accumulation), every loss normalised by the mini-batch's global count across micro-batches and ranks."""

from __future__ import annotations

import dataclasses
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass

import torch

from services.trainer.actor import Actor
from services.trainer.algorithms import (
    AlgorithmConfig,
    KLMode,
    aggregate_loss,
    compute_kl_loss,
    compute_policy_loss,
    local_normaliser,
)
from services.trainer.algorithms.rollout_correction import (
    RolloutCorrectionConfig,
    correction,
    mismatch_metrics,
    ratios,
)
from services.trainer.batch import TokenSequence, pad_rows


@dataclass
class SequenceTargets:
    """What the loss needs per sequence, each ``(R_i,)``: advantages and log-probs under the policy
    that produced the rollout (old) and the reference model (None when KL is off).

    ``old_log_probs`` None: the update is the first and only one on these weights (one mini-batch, one
    epoch), so the old log-probs ARE the current ones: the update's own forward supplies them, detached,
    and the separate no-grad pass is skipped (identical numbers, one forward fewer per step). None for
    some rows only: a lagging batch's offline responses, which no rollout policy sampled, beside the
    behaviour log-probs of its sampled ones (services/trainer/ahead.py)."""

    advantages: torch.Tensor
    old_log_probs: torch.Tensor | None
    ref_log_probs: torch.Tensor | None = None


def split(indices: Sequence[int], parts: int) -> list[list[int]]:
    """``indices`` in ``parts`` contiguous, near-equal chunks (empty chunks dropped)."""
    base, extra = divmod(len(indices), parts)
    out, start = [], 0
    for k in range(parts):
        stop = start + base + (1 if k < extra else 0)
        if stop > start:
            out.append(list(indices[start:stop]))
        start = stop
    return out


def update_policy(
    actor: Actor,
    sequences: Sequence[TokenSequence],
    targets: Sequence[SequenceTargets],
    algorithm: AlgorithmConfig,
    *,
    kl_coef: float,
    entropy_coef: float,
    temperature: float,
    offline_term: str,
    offline_weight: float = 1.0,
    behaviour_comparable: bool = False,
) -> dict[str, float]:
    """``actor.config.ppo_epochs`` passes over ``mini_batches`` optimizer steps; returns mean metrics.

    ``offline_term``: ``likelihood`` scores offline responses with ratio exp(logp - sg(logp)) (their
    "old" log-probs are the current ones, so the gradient is the advantage-weighted log-likelihood);
    ``luffy``: LUFFY's shaping for offline tokens (``algorithm.policy_loss`` is luffy).
    ``offline_weight`` multiplies the offline responses' advantages (``mix.offline_weight``).
    ``behaviour_comparable``: the engine's log-probs (``TokenSequence.rollout_logprobs``) are of the
    distribution the actor's forward computes, so ``algorithm.rollout_correction`` may weigh by them and
    its ``rollout_corr/*`` metrics are reported (the trainer's config refuses a correction without it).
    """
    cfg = actor.config
    _, world = actor.rank, actor.world_size
    positions = actor.positions(sequences)
    params = algorithm.policy_loss_params()
    loss_name = algorithm.policy_loss.value
    if offline_term == "likelihood" and loss_name == "luffy":
        loss_name = "ppo"
    if len(sequences) < cfg.mini_batches:
        # every rank must run the same number of optimizer steps, or FSDP's collectives wait forever
        raise ValueError(
            f"rank {actor.rank} holds {len(sequences)} sequence(s) for actor.mini_batches={cfg.mini_batches}: "
            "lower actor.mini_batches or raise data.batch_size x rollout.n"
        )
    sums: dict[str, list[float]] = defaultdict(list)
    empty = 0
    for _ in range(cfg.ppo_epochs):
        for chunk in split(range(len(sequences)), cfg.mini_batches):
            shares: dict[str, list[float]] = defaultdict(list)
            sub = [sequences[i] for i in chunk]
            micro = actor.micro_batches(sub, [positions[i] for i in chunk])
            if behaviour_comparable and algorithm.rollout_correction.needs_old_log_probs:
                # MIS: tokens outside the band leave the loss and its normaliser, fixed before any forward
                micro = [
                    _drop_outside_band(mb, [sequences[chunk[i]] for i in mb.indices],
                                       [targets[chunk[i]] for i in mb.indices], algorithm)
                    for mb in micro
                ]  # fmt: skip
            total = actor.data_parallel_sum(
                sum(local_normaliser(mb.counted_mask, algorithm.loss_agg) for mb in micro).to(torch.float64)
            )
            if float(total) == 0.0:
                # nothing left to learn from (MIS dropped every token of the mini-batch, on every rank:
                # the sum is global, so all ranks skip it together and no collective waits)
                empty += 1
                continue
            for mb in actor.aligned(micro):
                rows = [chunk[i] for i in mb.indices]
                metrics = _micro_step(
                    actor, mb, [sequences[i] for i in rows], [targets[i] for i in rows], algorithm,
                    loss_name=loss_name, params=params, total=total, world=world, kl_coef=kl_coef,
                    entropy_coef=entropy_coef, temperature=temperature, offline_term=offline_term,
                    offline_weight=offline_weight, behaviour_comparable=behaviour_comparable,
                )  # fmt: skip
                for k, v in metrics.items():
                    if not mb.dummy:
                        shares[k].append(v)
            # a mini-batch's loss is the sum of its micro-batch shares; the update reports the mean
            # over mini-batches (and epochs), as every other metric
            for k, v in _reduce(shares).items():
                sums[k].append(v)
            sums["grad_norm"].append(actor.step_optimizer())
    if empty:
        sums["empty_minibatches"].append(float(empty))
    return _reduce(sums, summed=frozenset())  # a mini-batch's loss is already its micro-batches' sum


# Per-micro-batch shares of a mini-batch's loss: their sum is the mini-batch value.
_SUMMED = frozenset({"pg_loss", "kl_loss", "entropy_loss"})
_MAXED = frozenset({"rollout_logprob_diff_max", "rollout_corr/ratio_max", "empty_minibatches"})
_MINNED = frozenset({"rollout_corr/ratio_min"})


def combine_rank_metrics(per_rank: Sequence[dict[str, float]]) -> dict[str, float]:
    """One update's metrics from every rank's :func:`update_policy` result: loss shares are summed (each
    rank's is its part of the global loss), maxima maxed, the rest (means, fractions, the grad norm,
    which every rank computes globally) averaged over the ranks that report them.

    Example: [{"pg_loss": 0.25, "entropy": 1.0}, {"pg_loss": -0.5, "entropy": 3.0}] →
    {"pg_loss": -0.25, "entropy": 2.0}.
    """
    values: dict[str, list[float]] = defaultdict(list)
    for metrics in per_rank:
        for k, v in metrics.items():
            values[k].append(v)
    return _reduce(values)


def _reduce(values: dict[str, list[float]], summed: frozenset[str] = _SUMMED) -> dict[str, float]:
    return {
        k: (sum(v) if k in summed else max(v) if k in _MAXED else min(v) if k in _MINNED else sum(v) / len(v))
        for k, v in values.items()
        if v
    }


def _micro_step(
    actor: Actor,
    mb,
    seqs: Sequence[TokenSequence],
    tg: Sequence[SequenceTargets],
    algorithm: AlgorithmConfig,
    *,
    loss_name: str,
    params: dict,
    total: torch.Tensor,
    world: int,
    kl_coef: float,
    entropy_coef: float,
    temperature: float,
    offline_term: str,
    offline_weight: float,
    behaviour_comparable: bool,
) -> dict[str, float]:
    width = mb.response_mask.shape[1]
    metrics_extra: dict[str, float] = {}
    mask = mb.counted_mask.to(actor.device)  # the tokens the loss counts (MIS may have dropped some)
    log_probs, entropy = actor.forward(mb, temperature=temperature, entropy=True)
    current = log_probs.detach()
    given = torch.tensor([t.old_log_probs is not None for t in tg], device=actor.device)
    offline = torch.tensor([s.offline for s in seqs], device=actor.device)
    if not given.any() and temperature == 1.0:
        metrics_extra = _rollout_gap(current, seqs)
    # Rows whose old log-probs are the current ones: those given none, and offline ones under the
    # likelihood term (ratio exp(logp - sg(logp)) = 1 with the gradient of logp: the advantage-weighted
    # likelihood).
    same = ~given | offline if offline_term == "likelihood" else ~given
    if same.all():
        old = current
    else:
        rows = [t.old_log_probs.tolist() if t.old_log_probs is not None else [] for t in tg]
        old = torch.where(same.unsqueeze(-1), current, pad_rows(rows, width).to(actor.device))
    adv = pad_rows([t.advantages.tolist() for t in tg], width).to(actor.device)
    if offline_weight != 1.0 and offline.any():
        adv = adv * torch.where(offline, offline_weight, 1.0).unsqueeze(-1)
    if behaviour_comparable:
        every = mb.response_mask.to(actor.device)  # the mismatch over every sampled token, dropped too
        weights, corr_metrics = _rollout_weights(old, every, mask, seqs, algorithm.rollout_correction)
        metrics_extra.update(corr_metrics)
        if weights is not None:
            adv = adv * weights  # w >= 0 stop-gradient: loss(w·A) = w·loss(A) token by token
    inputs = dict(params)
    if loss_name == "luffy":
        inputs["offline_mask"] = offline
    loss, metrics = compute_policy_loss(
        loss_name,
        log_probs=log_probs,
        old_log_probs=old,
        advantages=adv,
        response_mask=mask,
        global_normaliser=total,
        **inputs,
    )
    total_loss = loss
    if algorithm.kl.mode is KLMode.LOSS and tg[0].ref_log_probs is not None:
        ref = pad_rows([t.ref_log_probs.tolist() for t in tg], width).to(actor.device)
        kl_loss, kl_metrics = compute_kl_loss(
            log_probs, ref, mask, coef=kl_coef, estimator=algorithm.kl.estimator,
            loss_agg=algorithm.loss_agg, norm_length=algorithm.loss_agg_norm_length, global_normaliser=total,
        )  # fmt: skip
        total_loss = total_loss + kl_loss
        metrics.update(kl_metrics)
    if entropy is not None:
        ent = aggregate_loss(
            entropy,
            mask,
            algorithm.loss_agg,
            norm_length=algorithm.loss_agg_norm_length,
            global_normaliser=total,
        )
        metrics["entropy_loss"] = float(ent.detach())
        metrics["entropy"] = float((entropy.detach() * mask).sum() / mask.sum().clamp(min=1))
        if entropy_coef:
            total_loss = total_loss - entropy_coef * ent
    # FSDP averages gradients over ranks; the losses above are already shares of the global count.
    (total_loss * (0.0 if mb.dummy else world)).backward()
    return {**{k: float(v) for k, v in metrics.items()}, **metrics_extra}


def _behaviour_grid(
    seqs: Sequence[TokenSequence], width: int, device: torch.device
) -> tuple[torch.Tensor, torch.Tensor]:
    """The engine's log-probs (B, R) of the sampled responses, and which rows have them (offline
    responses, which no engine sampled, have none)."""
    has = [bool(s.rollout_logprobs) and not s.offline for s in seqs]
    for s, h in zip(seqs, has, strict=True):
        if h and len(s.rollout_logprobs) != len(s.response_ids):
            raise ValueError(
                f"a response carries {len(s.rollout_logprobs)} engine log-probs for {len(s.response_ids)} "
                "tokens: the engine must report one per token"
            )
    grid = pad_rows([list(s.rollout_logprobs) if h else [] for s, h in zip(seqs, has, strict=True)], width)
    return grid.to(device), torch.tensor(has, device=device)


def _rollout_weights(
    old: torch.Tensor,
    every: torch.Tensor,
    kept: torch.Tensor,
    seqs: Sequence[TokenSequence],
    config: RolloutCorrectionConfig,
) -> tuple[torch.Tensor | None, dict[str, float]]:
    """The rollout correction's token weights over the ``kept`` tokens (None when it is off; 1 on rows
    without engine log-probs) and the mismatch metrics over ``every`` sampled token, so that MIS's
    drops show in its own metrics."""
    behaviour, has = _behaviour_grid(seqs, every.shape[1], old.device)
    sampled = every * has.unsqueeze(-1)
    metrics = mismatch_metrics(old, behaviour, sampled, config)
    if not config.enabled or not has.any():
        return None, metrics
    # the ratio over every sampled token (a sequence's product counts its dropped tokens too); the
    # weight only where the loss counts
    rho = ratios(old, behaviour, sampled, config.level)
    weights, _ = correction(rho, kept * has.unsqueeze(-1), config)
    return torch.where(has.unsqueeze(-1), weights, torch.ones_like(weights)), metrics


def _drop_outside_band(mb, seqs: Sequence[TokenSequence], tg: Sequence[SequenceTargets], algorithm):
    """``mb`` whose ``loss_mask`` leaves out the tokens MIS rejects (the old log-probs come from their
    own pass: ``AlgorithmConfig.needs_old_log_probs``). The forward still scores every response token:
    a packed row's scored positions are fixed by ``response_mask``."""
    width = mb.response_mask.shape[1]
    behaviour, has = _behaviour_grid(seqs, width, mb.response_mask.device)
    missing = [
        i for i, (t, h) in enumerate(zip(tg, has.tolist(), strict=True)) if h and t.old_log_probs is None
    ]
    if missing:
        raise ValueError(
            f"rollout correction (mis) needs old log-probs for rows {missing}: none were computed"
        )
    old = pad_rows(
        [t.old_log_probs.tolist() if h else [] for t, h in zip(tg, has.tolist(), strict=True)], width
    )
    mask = mb.response_mask
    sampled = mask * has.unsqueeze(-1).to(mask.dtype)
    config = algorithm.rollout_correction
    _, keep = correction(ratios(old.to(mask.device), behaviour, sampled, config.level), sampled, config)
    kept = torch.where(has.unsqueeze(-1), keep.to(mask.dtype), mask)
    return dataclasses.replace(mb, loss_mask=mask * kept)


def _rollout_gap(log_probs: torch.Tensor, seqs: Sequence[TokenSequence]) -> dict[str, float]:
    """Largest |actor - rollout| log-prob of a sampled token: train/infer consistency, watched per step."""
    gaps = [
        float(
            (log_probs[row, : len(s.rollout_logprobs)].cpu() - torch.tensor(s.rollout_logprobs)).abs().max()
        )
        for row, s in enumerate(seqs)
        if s.rollout_logprobs
    ]
    return {"rollout_logprob_diff_max": max(gaps)} if gaps else {}
