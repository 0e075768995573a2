"""``reelrl train``: load and validate the config tree, print it, or run the loop with a progress bar."""

from __future__ import annotations

import logging
import os
import signal
import sys
from pathlib import Path

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeRemainingColumn

from services.common.text import plain
from services.trainer.config import ConfigError, dump_config, load_config

console = Console(stderr=True)


def train_command(config: Path, overrides: list[str], print_config: bool) -> int:
    """Exit status: 0 finished (or stopped on request), 2 invalid config or data, 1 the run failed."""
    try:
        cfg = load_config(config, overrides)
    except (ConfigError, OSError) as exc:
        console.print(f"[red]error:[/red] {plain(exc)}", soft_wrap=True)
        return 2
    if print_config:
        sys.stdout.write(dump_config(cfg))
        return 0
    from services.common.trackers import TrackerNotInstalled, require

    try:
        require(cfg.trainer.loggers)  # a missing extra is a config error, before anything loads
    except TrackerNotInstalled as exc:
        console.print(f"[red]error:[/red] {plain(exc)}", soft_wrap=True)
        return 2
    # vLLM's per-request INFO lines would bury the progress bar; an exported level still wins.
    os.environ.setdefault("VLLM_LOGGING_LEVEL", "WARNING")
    # SIGTERM (a scheduler, `kill`) unwinds like Ctrl-C: the loop's cleanup stops vLLM's processes,
    # which would otherwise outlive the trainer holding their memory.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    from services.common.outputs import OutputTaken
    from services.common.samples import SampleError
    from services.rollout.checkpoint import ModelFolderError
    from services.trainer.checkpoints import OutputDirBusy, ResumeMismatch
    from services.trainer.data import DataError
    from services.trainer.loop import Hooks, run

    with Progress(
        TextColumn("[bold]train"), BarColumn(), MofNCompleteColumn(), TextColumn("{task.fields[info]}"),
        TimeRemainingColumn(), console=console, transient=False,
    ) as progress:  # fmt: skip
        task = progress.add_task("train", total=cfg.trainer.total_steps, info="")

        def on_step(step: int, metrics: dict) -> None:
            shown = [f"{k.split('/')[-1] if k.startswith('reward') else k}={metrics[k]:.3f}"
                     for k in ("reward/accuracy", "val/accuracy") if metrics.get(k) is not None]  # fmt: skip
            progress.update(task, completed=step, info=" ".join(shown))

        try:
            result = run(cfg, hooks=Hooks(on_step=[on_step]))
        # the user's inputs (data, model folder, checkpoint, output folder): a message, not a traceback
        except (
            DataError, SampleError, ModelFolderError, ConfigError, ResumeMismatch, OutputDirBusy, OutputTaken,
        ) as exc:  # fmt: skip
            console.print(f"[red]error:[/red] {plain(exc)}", soft_wrap=True)
            return 2
    console.print(
        f"{'stopped' if result.stopped else 'finished'} after step {result.steps}: "
        f"{plain(result.output_dir / 'metrics.jsonl')}"
    )
    return 0
