"""Log-probs and entropy in chunks of tokens (services/trainer/logprobs.py): the same values and
gradients as the full ``[tokens, vocab]`` computation, by hand on a 3-token vocabulary, against the full
computation on random ones, through the actor's forward on the tiny Qwen2.5-VL (untied and tied head),
and with at least the full fp32 logits' size less peak memory."""

from __future__ import annotations

import json
import math
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from services.common.tiny_models import build_tiny_model
from services.rollout.checkpoint import Checkpoint
from services.trainer.actor import PolicyModel
from services.trainer.algorithms import entropy_from_logits
from services.trainer.batch import PromptInputs, TokenSequence
from services.trainer.config import ActorConfig
from services.trainer.logprobs import chunked_log_probs
from services.trainer.sequences import prompt_inputs
from tests.trainer.actor_steps import World, build_world, train_config

ROOT = Path(__file__).resolve().parents[2]


def full_log_probs(
    hidden: torch.Tensor,
    weight: torch.Tensor,
    targets: torch.Tensor,
    bias: torch.Tensor | None,
    temperature: float,
) -> tuple[torch.Tensor, torch.Tensor]:
    """The computation the chunks replace (the actor's forward before them): fp32 logits of every row."""
    logits = hidden @ weight.T
    if bias is not None:
        logits = logits + bias
    logits = logits.to(torch.promote_types(logits.dtype, torch.float32)) / temperature
    logp = torch.log_softmax(logits, dim=-1).gather(-1, targets.unsqueeze(-1)).squeeze(-1)
    return logp, entropy_from_logits(logits)


def test_hand_computed_log_probs_entropy_and_gradients() -> None:
    # V = 3, H = 2; head rows w0 = w1 = (0, 0), w2 = (0, 2)
    weight = torch.tensor([[0.0, 0.0], [0.0, 0.0], [0.0, 2.0]], requires_grad=True)
    # row 0: h = (1, 0) → logits (0, 0, 0), target 1; row 1: h = (0, 1) → logits (0, 0, 2), target 2
    hidden = torch.tensor([[1.0, 0.0], [0.0, 1.0]], requires_grad=True)
    targets = torch.tensor([1, 2])
    logp, ent = chunked_log_probs(hidden, weight, targets, chunk_tokens=1, entropy=True)
    e2 = math.exp(2.0)
    # row 0 uniform: log p = -ln 3, H = ln 3
    # row 1: p = (1, 1, e²) / (2 + e²): log p_2 = 2 - ln(2 + e²), H = ln(2 + e²) - 2 e² / (2 + e²)
    torch.testing.assert_close(logp, torch.tensor([-math.log(3.0), 2.0 - math.log(2.0 + e2)]))
    torch.testing.assert_close(ent, torch.tensor([math.log(3.0), math.log(2.0 + e2) - 2.0 * e2 / (2.0 + e2)]))

    # d log p_t / d z = onehot(t) - p: row 0 (-1/3, 2/3, -1/3); row 1 (-q, -q, 2q) with q = 1 / (2 + e²)
    logp.sum().backward()
    q = 1.0 / (2.0 + e2)
    # dW_v = sum_i dz_iv h_i: w0 (-1/3, -q), w1 (2/3, -q), w2 (-1/3, 2q)
    torch.testing.assert_close(weight.grad, torch.tensor([[-1 / 3, -q], [2 / 3, -q], [-1 / 3, 2 * q]]))
    # dh_i = sum_v dz_iv w_v = dz_i2 · (0, 2): row 0 (0, -2/3), row 1 (0, 4q)
    torch.testing.assert_close(hidden.grad, torch.tensor([[0.0, -2 / 3], [0.0, 4 * q]]))

    # temperature 2: row 1's logits (0, 0, 1): log p_2 = 1 - ln(2 + e), H = ln(2 + e) - e / (2 + e)
    logp, ent = chunked_log_probs(hidden, weight, targets, temperature=2.0, chunk_tokens=5, entropy=True)
    e1 = math.e
    torch.testing.assert_close(logp[1], torch.tensor(1.0 - math.log(2.0 + e1)))
    torch.testing.assert_close(ent[1], torch.tensor(math.log(2.0 + e1) - e1 / (2.0 + e1)))

    # the entropy is largest at the uniform row 0: its gradient there is 0 (dH/dz = -p (log p + H) = 0)
    hidden.grad = None
    weight.grad = None
    logp, ent = chunked_log_probs(hidden, weight, targets, chunk_tokens=2, entropy=True)
    ent[0].backward()
    torch.testing.assert_close(hidden.grad, torch.zeros(2, 2))
    torch.testing.assert_close(weight.grad, torch.zeros(3, 2))


@pytest.mark.parametrize("chunk", [1, 3, 4, 10, 64])
@pytest.mark.parametrize("temperature", [1.0, 0.7])
@pytest.mark.parametrize("entropy", [False, True])
@pytest.mark.parametrize("bias", [False, True])
def test_chunks_match_the_full_computation(chunk: int, temperature: float, entropy: bool, bias: bool) -> None:
    """N = 10 rows (chunks of 3 and 4 do not divide it), H = 6, V = 13: the log-probs, the entropies and
    the gradients of hidden, weight and bias through both outputs (per-token loss weights a and c).

    In fp64 the two are the same maths: equal to 1e-12. In fp32 each rounds on its own: measured over
    these cases, each is within 6e-6 of the fp64 values (relative to the tensor's largest element, at
    least 1), the entropy's gradients being the least exact in both; so fp32 is held to 1e-5 of that."""
    gen = torch.Generator().manual_seed(chunk)
    hidden = torch.randn(10, 6, generator=gen, dtype=torch.float64)
    weight = torch.randn(13, 6, generator=gen, dtype=torch.float64)
    b = torch.randn(13, generator=gen, dtype=torch.float64) if bias else None
    targets = torch.randint(13, (10,), generator=gen)
    a = torch.randn(10, generator=gen, dtype=torch.float64)
    c = torch.randn(10, generator=gen, dtype=torch.float64)

    def run(fn, dtype: torch.dtype) -> list[torch.Tensor]:
        leaves = [
            t.detach().to(dtype, copy=True).requires_grad_() for t in (hidden, weight, *([b] if bias else []))
        ]
        logp, ent = fn(*leaves)
        loss = (logp * a.to(dtype)).sum() + ((ent * c.to(dtype)).sum() if entropy else 0.0)
        return [logp.detach(), *([ent.detach()] if entropy else []), *torch.autograd.grad(loss, leaves)]

    def full(h: torch.Tensor, w: torch.Tensor, *rest: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        return full_log_probs(h, w, targets, rest[0] if rest else None, temperature)

    def chunked(h: torch.Tensor, w: torch.Tensor, *rest: torch.Tensor) -> tuple:
        return chunked_log_probs(
            h, w, targets, bias=rest[0] if rest else None, temperature=temperature, chunk_tokens=chunk,
            entropy=entropy,
        )  # fmt: skip

    for dtype, tolerance in ((torch.float64, 1e-12), (torch.float32, 1e-5)):
        for mine, theirs in zip(run(chunked, dtype), run(full, dtype), strict=True):
            assert mine.dtype == dtype
            scale = max(1.0, theirs.abs().max().item())
            torch.testing.assert_close(mine, theirs, rtol=0, atol=tolerance * scale)
    if not entropy:
        assert chunked(hidden, weight, *([b] if bias else []))[1] is None


def test_an_output_the_loss_leaves_out_gets_no_backward_term() -> None:
    """The entropy is computed for the metrics but, at entropy_coef 0, not in the loss: its gradient
    arrives as None and its term is skipped; the log-prob gradients equal a run without entropy, and
    a loss of the entropy alone still differentiates."""
    gen = torch.Generator().manual_seed(3)
    hidden, weight = torch.randn(7, 4, generator=gen), torch.randn(11, 4, generator=gen)
    targets = torch.randint(0, 11, (7,), generator=gen)
    grads = []
    for entropy in (True, False):
        h, w = hidden.clone().requires_grad_(), weight.clone().requires_grad_()
        logp, _ = chunked_log_probs(h, w, targets, chunk_tokens=3, entropy=entropy)
        logp.sum().backward()
        grads.append((h.grad, w.grad))
    assert torch.equal(grads[0][0], grads[1][0]) and torch.equal(grads[0][1], grads[1][1])
    h = hidden.clone().requires_grad_()
    _, ent = chunked_log_probs(h, weight, targets, chunk_tokens=3, entropy=True)
    ent.sum().backward()
    logits = hidden.clone().requires_grad_()
    entropy_from_logits(logits @ weight.T).sum().backward()
    torch.testing.assert_close(h.grad, logits.grad, rtol=1e-5, atol=1e-6)


def test_the_gradient_is_the_derivative_in_fp64() -> None:
    gen = torch.Generator().manual_seed(0)
    inputs = tuple(
        torch.randn(*shape, generator=gen, dtype=torch.float64, requires_grad=True)
        for shape in ((5, 3), (7, 3), (7,))
    )
    targets = torch.randint(7, (5,), generator=gen)
    assert torch.autograd.gradcheck(
        lambda h, w, b: chunked_log_probs(
            h, w, targets, bias=b, temperature=0.7, chunk_tokens=2, entropy=True
        ),
        inputs,
    )


def test_bf16_logits_are_cast_per_chunk_like_the_full_logits() -> None:
    """bf16 hidden states and head: the matmul in bf16, softmax in fp32, as ``logits.float()`` did."""
    gen = torch.Generator().manual_seed(1)
    hidden = torch.randn(9, 16, generator=gen).bfloat16()
    weight = (torch.randn(50, 16, generator=gen) * 0.3).bfloat16()
    targets = torch.randint(50, (9,), generator=gen)
    full = full_log_probs(hidden, weight, targets, None, 0.9)
    logp, ent = chunked_log_probs(hidden, weight, targets, temperature=0.9, chunk_tokens=4, entropy=True)
    assert logp.dtype == ent.dtype == torch.float32
    torch.testing.assert_close(logp, full[0], rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(ent, full[1], rtol=1e-5, atol=1e-5)


def test_no_rows_give_empty_scores_and_a_zero_head_gradient() -> None:
    """A micro-batch of padding only: nothing to score, but the head still gets a (zero) gradient, as
    the full logits gave it (an FSDP rank whose head had none would reduce nothing while others do)."""
    weight = torch.randn(5, 3, requires_grad=True)
    hidden = torch.zeros(0, 3, requires_grad=True)
    logp, ent = chunked_log_probs(
        hidden, weight, torch.zeros(0, dtype=torch.long), chunk_tokens=4, entropy=True
    )
    assert logp.shape == ent.shape == (0,)
    (logp.sum() + ent.sum()).backward()
    assert torch.equal(weight.grad, torch.zeros(5, 3))


def test_mismatched_inputs_are_refused_by_name() -> None:
    with pytest.raises(ValueError, match="one dtype"):
        chunked_log_probs(
            torch.zeros(2, 3), torch.zeros(4, 3).bfloat16(), torch.zeros(2, dtype=torch.long), chunk_tokens=1
        )
    with pytest.raises(ValueError, match="targets"):
        chunked_log_probs(
            torch.zeros(2, 3), torch.zeros(4, 3), torch.zeros(3, dtype=torch.long), chunk_tokens=1
        )
    with pytest.raises(ValueError, match="chunk_tokens"):
        chunked_log_probs(
            torch.zeros(2, 3), torch.zeros(4, 3), torch.zeros(2, dtype=torch.long), chunk_tokens=0
        )


# -- through the actor ----------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def world(tmp_path_factory: pytest.TempPathFactory) -> World:
    return build_world(tmp_path_factory.mktemp("logprobs"), samples=2)


def tied_copy(model: Path, folder: Path) -> Path:
    """``model`` with its LM head tied to the input embeddings (as small Qwen-VL checkpoints are): the
    config says so and the weights hold no head of their own."""
    from safetensors.torch import load_file, save_file

    shutil.copytree(model, folder)
    config = json.loads((folder / "config.json").read_text())
    config["tie_word_embeddings"] = True
    config.setdefault("text_config", {})["tie_word_embeddings"] = True
    (folder / "config.json").write_text(json.dumps(config))
    (weights,) = folder.glob("*.safetensors")  # the tiny checkpoint is one file
    tensors = load_file(weights)
    del tensors["lm_head.weight"]
    save_file(tensors, weights, metadata={"format": "pt"})
    return folder


def scored(policy: PolicyModel, sequences: list[TokenSequence], weights: torch.Tensor) -> dict:
    """Log-probs, entropy and every parameter's gradient of one forward at temperature 0.8, and the
    shape of what the LM head returned."""
    (mb,) = policy.micro_batches(sequences, policy.positions(sequences))
    policy.model.zero_grad(set_to_none=True)
    shapes: list[tuple[int, ...]] = []
    hook = policy.model.get_output_embeddings().register_forward_hook(
        lambda _m, _args, out: shapes.append(tuple(out.shape))
    )
    try:
        logp, ent = policy.forward(mb, temperature=0.8, entropy=True)
    finally:
        hook.remove()
    (logp.sum(dim=1) * weights).sum().backward(retain_graph=True)
    (ent.sum(dim=1) * weights.flip(0)).sum().backward()
    grads = {n: p.grad.clone() for n, p in policy.model.named_parameters() if p.grad is not None}
    return {"logp": logp.detach(), "ent": ent.detach(), "grads": grads, "head": shapes}


@pytest.mark.slow
@pytest.mark.parametrize(
    ("compute_dtype", "tied"), [("float32", False), ("float32", True), ("bfloat16", False)]
)
def test_the_actor_scores_in_chunks_as_it_did_whole(
    world: World, tmp_path: Path, compute_dtype: str, tied: bool
) -> None:
    """The tiny Qwen2.5-VL, two responses per clip (the shared vision pass), padding, temperature 0.8:
    log-probs, entropy and every parameter's gradient with chunks of 3 tokens equal the full logits'.
    fp32: to fp32 rounding. bf16 compute (autocast over the fp32 master): both head matmuls run in bf16;
    the full path sums the head's gradient in one bf16 matmul, the chunks in fp32 over per-chunk bf16
    products, so the gradients agree to bf16's resolution (2^-8)."""
    model = tied_copy(world.model, tmp_path / "tied") if tied else world.model
    base = train_config(world, compute_dtype=compute_dtype).actor.model_copy(
        update={"model_path": str(model)}
    )
    checkpoint = Checkpoint.load(model)
    config = train_config(world).effective_rollout()
    prompts = [prompt_inputs(s, checkpoint, world.store, config) for s in world.samples]
    # responses of unequal lengths (padding), 13 scored tokens in all: chunks of 3 do not divide them
    responses = [[11, 12, 13, 14], [15, 16], [17, 18, 19, 20, 21], [22, 23]]
    sequences = [TokenSequence(prompts[i // 2], r) for i, r in enumerate(responses)]
    weights = torch.tensor([1.5, -0.5, 1.0, -1.0])

    runs = {}
    for chunk in (None, 3):
        policy = PolicyModel(
            base.model_copy(update={"logprob_chunk_tokens": chunk}), trainable=True, device="cpu"
        )
        head = policy.model.get_output_embeddings().weight
        assert (head is policy.model.get_input_embeddings().weight) == tied
        runs[chunk] = scored(policy, sequences, weights)
        vocab = head.shape[0]
    full, chunked = runs[None], runs[3]
    assert full["head"] == [(4, 5, vocab)] and chunked["head"] == [(4, 5, 2)]  # no (B, R, V) logits
    mask = torch.tensor([[1.0] * len(r) + [0.0] * (5 - len(r)) for r in responses])
    assert (chunked["logp"][mask == 0] == 0).all() and (chunked["ent"][mask == 0] == 0).all()
    values, grads = (1e-5, 1e-4) if compute_dtype == "float32" else (1e-5, 2e-2)
    torch.testing.assert_close(chunked["logp"], full["logp"], rtol=values, atol=values)
    torch.testing.assert_close(chunked["ent"], full["ent"], rtol=values, atol=values)
    assert set(chunked["grads"]) == set(full["grads"])
    head_name = "lm_head.weight" if not tied else next(n for n in full["grads"] if "embed_tokens" in n)
    assert chunked["grads"][head_name].abs().sum() > 0
    # bf16: the head's gradient into the hidden states differs by bf16 rounding between the two sums,
    # and that difference reaches every layer below; how much depends on the matmul's blocking (the
    # thread count), measured up to 2^-7 of a tensor's largest entry. So each tensor is compared to a
    # slice of its own scale and as a whole (relative norm); a real chunking fault is off by O(1).
    share, whole = (1e-5, 1e-5) if compute_dtype == "float32" else (2**-5, 2**-6)
    for name, grad in chunked["grads"].items():
        expected = full["grads"][name]
        scale = expected.abs().max().item()
        torch.testing.assert_close(
            grad, expected, rtol=grads, atol=share * max(scale, 1e-3), msg=lambda m, name=name: f"{name}: {m}",
        )  # fmt: skip
        relative = ((grad - expected).norm() / expected.norm().clamp_min(1e-30)).item()
        assert relative <= whole, (name, relative)


@pytest.mark.parametrize("family", ["qwen2_vl", "qwen3_vl", "qwen3_5"])
def test_every_family_scores_through_its_head_in_chunks(family: str, tmp_path: Path) -> None:
    """The other families' heads (text-only prompts, padding): log-probs and the head's gradient."""
    model = build_tiny_model(family, tmp_path / "model", seed=0)
    responses = [[11, 12, 13], [14, 15, 16, 17, 18], [19]]
    sequences = [TokenSequence(PromptInputs(f"t{i}", [20 + i] * (3 + i)), r) for i, r in enumerate(responses)]
    weights = torch.tensor([1.0, -0.5, 2.0])
    runs = {}
    for chunk in (None, 2):
        config = ActorConfig(model_path=str(model), logprob_chunk_tokens=chunk)
        runs[chunk] = scored(PolicyModel(config, trainable=True, device="cpu"), sequences, weights)
    full, chunked = runs[None], runs[2]
    assert chunked["head"] == [(3, 5, 2)]
    torch.testing.assert_close(chunked["logp"], full["logp"], rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(chunked["ent"], full["ent"], rtol=1e-5, atol=1e-5)
    for name in ("lm_head.weight", next(n for n in full["grads"] if n.endswith("embed_tokens.weight"))):
        scale = full["grads"][name].abs().max().item()
        torch.testing.assert_close(chunked["grads"][name], full["grads"][name], rtol=1e-4, atol=1e-5 * scale)


# -- memory -----------------------------------------------------------------------------------------------

#: 2,048 response tokens × Qwen's 152,064-token vocabulary: full fp32 logits of 2048 × 152064 × 4 B ≈ 1.25 GB.
#: Scaled down from the issue's 16,384 tokens (≈ 10 GB of logits) to fit a CI machine and a minute: the
#: full path's peak grows with the tokens (≈ 9.9 GB above its start at 4,096 tokens, measured), the
#: chunked one's does not (≈ 2 chunks' logits, ≈ 1.2 GB at 1,024 rows). H = 64 keeps the head at
#: 152064 × 64 × 4 B ≈ 39 MB.
TOKENS, VOCAB, HIDDEN, CHUNK = 2048, 152_064, 64, 1024
PROBE = """
import sys, torch
from services.trainer.logprobs import chunked_log_probs

def peak():  # the process's peak resident set (bytes): torch's CPU allocator is invisible to tracemalloc
    for line in open("/proc/self/status"):
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) * 1024

chunk, tokens, vocab, hidden = sys.argv[1], *map(int, sys.argv[2:])
torch.set_num_threads(2)
gen = torch.Generator().manual_seed(0)
h = torch.randn(tokens, hidden, generator=gen).requires_grad_()
w = (torch.randn(vocab, hidden, generator=gen) * 0.05).requires_grad_()
targets = torch.randint(vocab, (tokens,), generator=gen)
small = chunked_log_probs(h[:2], w[:8], targets[:2] % 8, chunk_tokens=1)[0]  # load the kernels
small.sum().backward()
h.grad = w.grad = None
before = peak()
if chunk == "full":  # the actor's forward before the chunks
    logits = (h @ w.T).float() / 1.3
    logp = torch.log_softmax(logits, dim=-1).gather(-1, targets[:, None]).squeeze(-1)
else:
    logp, _ = chunked_log_probs(h, w, targets, temperature=1.3, chunk_tokens=int(chunk))
logp.sum().backward()
print(peak() - before)
"""


def peak_bytes(chunk: int | None) -> int:
    """Peak RSS growth of a log-prob forward + backward, in its own process (a peak cannot be reset)."""
    args = ["full" if chunk is None else str(chunk), str(TOKENS), str(VOCAB), str(HIDDEN)]
    done = subprocess.run(
        [sys.executable, "-c", PROBE, *args], cwd=ROOT, capture_output=True, text=True, timeout=300
    )
    assert done.returncode == 0, done.stderr
    return int(done.stdout.split()[-1])


@pytest.mark.slow
def test_chunks_save_at_least_the_full_logits_of_peak_memory() -> None:
    logits = TOKENS * VOCAB * 4
    full, chunked = peak_bytes(None), peak_bytes(CHUNK)
    print(f"peak RSS growth: full {full / 1e9:.2f} GB, chunks of {CHUNK} {chunked / 1e9:.2f} GB")
    assert chunked <= full - logits, (full, chunked, logits)
    # and the chunked peak is bounded by a few chunks' logits, not by the tokens
    assert chunked <= 3 * CHUNK * VOCAB * 4
