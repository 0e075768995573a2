"""Rollouts with vLLM: samples whose media are frame-store keys in, groups of responses out.

Data path: ``samples`` (RolloutSample) → ``media`` (frames + metadata from the store, checked against
the family) → ``prompts`` (chat prompt, processor arguments) → ``engine`` / ``async_engine`` (vLLM
``LLM`` / ``AsyncLLM``) → ``groups`` (mix-policy gate, RolloutGroup). ``weight_sync`` pushes trainer
weights into a running engine, ``worker`` wraps the engine as a Ray actor, and ``mrope`` /
``consistency`` give the HF side the same inputs and positions vLLM uses. See docs/rollout.md.
"""
