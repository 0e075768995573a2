"""Evaluation on video benchmarks (SPEC §6, docs/evaluation.md).

``benchmarks`` (one registered adapter per benchmark: official files → Samples, prompts, aggregation)
→ ``clips`` (protocol clip parameters, missing clips preprocessed) → ``pipeline`` (IO pool, bounded
queue, ``AsyncRolloutEngine``, judge) → ``scoring`` (the reward library) → ``store`` (a row per scored
sample) → ``outputs``; ``runner`` ties a run together, ``tasks`` is the ``eval`` job kind, ``cli`` the
``reelrl eval`` commands.
"""
