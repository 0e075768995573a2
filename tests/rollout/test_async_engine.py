"""The streaming engine (AsyncLLM): deltas, concurrent rollouts matching the HF model, and a weight
push while requests are in flight (paused with the requests kept, then resumed)."""

from __future__ import annotations

import asyncio
import copy

import pytest
import torch

from services.rollout.async_engine import collect_responses

pytestmark = [pytest.mark.integration, pytest.mark.slow]
TOLERANCE = 1e-5


def gap(expected: torch.Tensor, got: list[float]) -> float:
    return (expected - torch.tensor(got)).abs().max().item()


def test_stream_yields_deltas_that_add_up_to_whole_responses(async_engine, loop_thread, video_sample):
    sample = video_sample("qwen2_5_vl", "tall_in_time", "stream")

    async def collect():
        return [delta async for delta in async_engine.stream(sample, n=2)]

    deltas = loop_thread.run(collect())
    assert {d.sample_id for d in deltas} == {"stream"}
    for index in (0, 1):
        mine = [d for d in deltas if d.index == index]
        assert len(mine) > 1  # streamed, not delivered whole
        tokens = [t for d in mine for t in d.token_ids]
        assert 0 < len(tokens) <= async_engine.config.max_tokens
        assert sum(len(d.logprobs) for d in mine) == len(tokens)
        assert [d.finish_reason is not None for d in mine] == [False] * (len(mine) - 1) + [True]


def test_concurrent_rollouts_match_the_hf_model(
    async_engine, loop_thread, video_sample, tiny_models, hf_model, hf_logprobs
):
    samples = [
        video_sample("qwen2_5_vl", clip, f"async-{i}")
        for i, clip in enumerate(["tall_in_time", "wide", "wide"])
    ]
    groups = loop_thread.run(async_engine.rollout(samples))
    hf = hf_model(tiny_models["qwen2_5_vl"])
    assert [g.sample_id for g in groups] == ["async-0", "async-1", "async-2"]
    for sample, group in zip(samples, groups, strict=True):
        assert len(group.responses) == 4
        for response in group.responses[:2]:
            assert (
                gap(hf_logprobs(async_engine, hf, sample, response.token_ids), response.logprobs) < TOLERANCE
            )


def test_weights_pushed_mid_stream_keep_requests_alive(
    async_engine, loop_thread, video_sample, tiny_models, hf_model, hf_logprobs, monkeypatch
):
    old = hf_model(tiny_models["qwen2_5_vl"])
    new = copy.deepcopy(old)
    generator = torch.Generator().manual_seed(3)
    with torch.no_grad():
        for p in new.parameters():
            p.add_(0.05 * torch.randn(p.shape, generator=generator))
    samples = [video_sample("qwen2_5_vl", "wide", f"inflight-{i}") for i in range(3)]
    max_tokens = 160
    received = [[0, 0] for _ in samples]  # tokens so far per (sample, response index)
    at_pause: list[list[list[int]]] = []
    pause = async_engine.engine.pause_generation

    async def recording_pause(*args, **kwargs):
        at_pause.append(copy.deepcopy(received))
        return await pause(*args, **kwargs)

    monkeypatch.setattr(async_engine.engine, "pause_generation", recording_pause)

    async def scenario():
        started = [asyncio.Event() for _ in samples]
        results: list[list] = [[] for _ in samples]

        async def consume(i):
            async for delta in async_engine.stream(samples[i], n=2, max_tokens=max_tokens, ignore_eos=True):
                results[i].append(delta)
                received[i][delta.index] += len(delta.token_ids)
                started[i].set()

        tasks = [asyncio.create_task(consume(i)) for i in range(len(samples))]
        await asyncio.gather(*(e.wait() for e in started))
        await async_engine.push_weights(new.state_dict())
        await asyncio.gather(*tasks)
        after = await async_engine.rollout([samples[0]], n=2)
        return results, after

    start = async_engine.weight_version  # the shared engine may have seen pushes already
    try:
        results, after = loop_thread.run(scenario())
        # the pause found requests half done: some tokens streamed, more to come
        (counts,) = at_pause
        assert any(0 < c < max_tokens for pair in counts for c in pair), counts
        spanning = 0
        for sample, deltas in zip(samples, results, strict=True):
            for index in (0, 1):
                mine = [d for d in deltas if d.index == index]
                # every request ran to its full length after the pause, none was aborted
                assert sum(len(d.token_ids) for d in mine) == max_tokens
                assert mine[-1].finish_reason == "length"
            for response in collect_responses(deltas, 2):
                # tokens [0, b) came from the old weights, [b, end) from the new ones (the request was
                # recomputed after the pause): each range matches its own model's teacher-forced logprobs
                spans = response.weight_versions
                assert response.weight_version == start
                assert [v for _, v in spans] in ([start], [start, start + 1]), spans
                ends = [b for b, _ in spans[1:]] + [max_tokens]
                for (begin, version), end in zip(spans, ends, strict=True):
                    model = old if version == start else new
                    expected = hf_logprobs(async_engine, model, sample, response.token_ids)[begin:end]
                    assert gap(expected, response.logprobs[begin:end]) < TOLERANCE, (spans, version)
                if len(spans) == 2:
                    spanning += 1
                    boundary = spans[1][0]
                    assert response.token_weight_versions() == [start] * boundary + [start + 1] * (
                        max_tokens - boundary
                    )
                    # the first token sampled under the new weights is not the old model's
                    first = hf_logprobs(async_engine, old, sample, response.token_ids)[boundary]
                    assert abs(first.item() - response.logprobs[boundary]) > 1e-3
        assert spanning > 0, "no response was in flight when the push landed"
        for response in after[0].responses:
            assert (response.weight_version, response.weight_versions) == (start + 1, ((0, start + 1),))
            assert (
                gap(hf_logprobs(async_engine, new, samples[0], response.token_ids), response.logprobs)
                < TOLERANCE
            )
    finally:
        monkeypatch.undo()
        loop_thread.run(async_engine.push_weights(old.state_dict(), transport="bytes"))
    restored = loop_thread.run(async_engine.rollout([samples[0]], n=1))[0].responses[0]
    assert gap(hf_logprobs(async_engine, old, samples[0], restored.token_ids), restored.logprobs) < TOLERANCE
    assert restored.weight_versions == ((0, start + 2),)


def test_a_refused_push_leaves_generation_running(
    async_engine, loop_thread, video_sample, tiny_models, hf_model
):
    state = hf_model(tiny_models["qwen2_5_vl"]).state_dict()
    partial = {k: v for k, v in state.items() if not k.startswith("model.visual.")}
    with pytest.raises(ValueError, match="missing"):
        loop_thread.run(async_engine.push_weights(partial))
    sample = video_sample("qwen2_5_vl", "wide", "after-refusal")
    (group,) = loop_thread.run(async_engine.rollout([sample], n=1))  # not left paused
    assert len(group.responses[0].token_ids) > 0


def test_sleep_on_cpu_is_a_no_op_that_says_so(async_engine, loop_thread, video_sample, caplog):
    with caplog.at_level("WARNING", logger="services.rollout.engine_base"):
        assert loop_thread.run(async_engine.sleep(2)) is False
    assert "sleep(level=2) is a no-op: vLLM's CPU backend cannot release" in caplog.text
    assert not async_engine.sleeping and loop_thread.run(async_engine.wake_up()) is False
    sample = video_sample("qwen2_5_vl", "wide", "async-after-sleep")
    (group,) = loop_thread.run(async_engine.rollout([sample], n=1))
    assert len(group.responses[0].token_ids) > 0


def test_generate_answers_an_input_prepared_elsewhere(async_engine, loop_thread, video_sample):
    """``generate`` takes an input prepared outside the engine (as eval's IO pool does) and returns the
    same greedy tokens and prompt ids as ``rollout`` of the same sample."""
    from services.rollout.prompts import prepare_inputs

    sample = video_sample("qwen2_5_vl", "wide", "prepared")
    (item,) = prepare_inputs([sample], async_engine.checkpoint, async_engine.source, async_engine.config)
    prompt_ids, (response,) = loop_thread.run(async_engine.generate(item, 1, temperature=0.0))
    (group,) = loop_thread.run(async_engine.rollout([sample], n=1, temperature=0.0))
    assert prompt_ids == group.prompt_token_ids
    assert prompt_ids.count(async_engine.checkpoint.video_token_id) == item.video_tokens > 0
    assert response.token_ids == group.responses[0].token_ids and len(response.token_ids) > 0
    assert response.weight_version == async_engine.weight_version
    _, sampled = loop_thread.run(async_engine.generate(item))  # n defaults to config.n
    assert len(sampled) == async_engine.config.n


def test_assistant_prefix_is_prompted_and_read_back(async_engine, loop_thread, video_sample):
    """The prefix follows the chat template's generation prompt in the engine's prompt tokens, and the
    eval scorer reads the letter the model wrote after it (MLVU's "Best Option: (")."""
    from services.common.samples import Sample
    from services.eval.benchmarks import get_benchmark
    from services.eval.scoring import score_one
    from services.rollout.prompts import prepare_inputs

    prefix = "Best Option: ("
    question = "Question: What moves?\nOptions:\n(A) a square\n(B) a circle\nOnly give the best option."
    plain = video_sample("qwen2_5_vl", "wide", "no-prefix", prompt=question)
    prefixed = video_sample("qwen2_5_vl", "wide", "prefix", prompt=question, assistant_prefix=prefix)
    inputs = prepare_inputs(
        [plain, prefixed], async_engine.checkpoint, async_engine.source, async_engine.config
    )
    assert inputs[1].prompt["prompt"] == inputs[0].prompt["prompt"] + prefix
    tokenizer = async_engine.checkpoint.processor.tokenizer
    (letter_a,) = tokenizer.encode("A", add_special_tokens=False)
    # one allowed token: the tiny random model answers "A" whatever it would have preferred
    (plain_ids, _), (prompt_ids, (response,)) = [
        loop_thread.run(async_engine.generate(item, 1, max_tokens=1, allowed_token_ids=[letter_a]))
        for item in inputs
    ]
    assert prompt_ids == plain_ids + tokenizer.encode(prefix, add_special_tokens=False)
    assert response.text == "A"
    sample = Sample(
        id="q", problem="What moves?", problem_type="multiple choice",
        options=["A. a square", "B. a circle"], answer="A",
    )  # fmt: skip
    scored = score_one(get_benchmark("mlvu"), sample, response.text, "qwen2_5_vl", assistant_prefix=prefix)
    assert (scored.extracted, scored.accuracy, scored.response) == ("A", 1.0, "A")


def test_eval_rubric_questions_go_to_the_judge_engine(async_engine, loop_thread, monkeypatch):
    """The eval pipeline asks a benchmark's rubric questions on the judge engine, each with its system
    turn and ``max(judge max_tokens, rubric_max_tokens)`` reply tokens; the replies come back by name.
    A judge prompt the engine refuses is that sample's error, not the run's."""
    from services.common.samples import Sample
    from services.eval.benchmarks.base import Benchmark, JudgeQuestion
    from services.eval.clips import PlannedSample
    from services.eval.pipeline import Pipeline, Task

    class Graded(Benchmark):
        name, title, annotations = "graded", "graded", ()
        rubric_max_tokens = 3

        def rubric_questions(self, sample, response):
            return {
                "style": JudgeQuestion(f"Rate the style of: {response}", system="You grade style."),
                "facts": JudgeQuestion(f"Rate the facts of: {response}"),
            }

    seen: list[tuple[str, int]] = []
    generate = async_engine.generate

    async def recording(item, n=None, **overrides):
        seen.append((item.prompt["prompt"], overrides["max_tokens"]))
        return await generate(item, n, **overrides)

    monkeypatch.setattr(async_engine, "generate", recording)
    sample = Sample(id="g1", problem="Describe it.", problem_type="open-ended", answer="a square")
    task = Task("graded", Graded(), PlannedSample(sample))
    pipeline = Pipeline(
        async_engine, run_id="unused", run_manifest={}, family="qwen2_5_vl", thinking=False,
        concurrency=1, io_threads=1, queue_size=1, judge_engine=async_engine, judge_max_tokens=2,
    )  # fmt: skip
    replies = loop_thread.run(pipeline._rubric(task, "A square moves."))
    assert set(replies) == {"style", "facts"} and all(isinstance(r, str) for r in replies.values())
    prompts = {p.split("Rate the ")[1].split(" of")[0]: (p, tokens) for p, tokens in seen}
    assert "You grade style." in prompts["style"][0] and "You grade style." not in prompts["facts"][0]
    assert {tokens for _, tokens in seen} == {3}

    class TooLong(Graded):
        def rubric_questions(self, sample, response):
            return {"long": JudgeQuestion("word " * 3000)}  # beyond max_model_len (2048): refused

    with pytest.raises(
        ValueError,
        match=r"sample .graded/g1#long.: the engine refused its input: .*maximum context length is 2048",
    ):
        loop_thread.run(pipeline._rubric(Task("graded", TooLong(), PlannedSample(sample)), "A square moves."))
