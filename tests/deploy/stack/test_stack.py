"""The docker-compose stack for real (docs/deploy.md): the images built as a user builds them, `docker
compose up -d --wait` on the test's own daemon, jobs submitted with `reelrl submit` through the API's port
published on 127.0.0.1, the workers' /metrics through ports published on 127.0.0.1, then `down -v`.

Never a container's or a compose network's address: only ports published on 127.0.0.1 (docs/deploy.md).
"""

from __future__ import annotations

import json
import os
import secrets
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest

from tests.deploy.stack.dockerd import ROOT, Docker, install_tools, private_dockerd
from tests.deploy.stack.images import base_image, reelrl_image, standin_image
from tests.servers import free_port

# The first test waits for the images (minutes on a cold machine, twice that when CI runs at half speed).
pytestmark = [pytest.mark.deploy, pytest.mark.slow, pytest.mark.integration, pytest.mark.timeout(2700)]

CACHE = Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache")) / "reelrl" / "deploy"
# The workers' exporters, published on 127.0.0.1 at ports Docker picks (found with `docker compose port`).
METRICS_OVERRIDE = """services:
  preprocess: {ports: ["127.0.0.1::9100"]}
  preprocess-jobs: {ports: ["127.0.0.1::9100"]}
  eval: {ports: ["127.0.0.1::9100"]}
  train-worker: {ports: ["127.0.0.1::9100"]}
"""


@dataclass
class Compose:
    docker: Docker
    project: str
    files: list[Path]
    env_file: Path
    api_url: str
    data: Path

    def __call__(self, *args: str, timeout: float = 600) -> str:
        argv = ["compose", "--project-name", self.project, "--env-file", str(self.env_file)]
        for file in self.files:
            argv += ["--file", str(file)]
        return self.docker(*argv, *args, timeout=timeout, cwd=ROOT)

    def published(self, service: str, port: int) -> str:
        """``http://127.0.0.1:PORT`` where ``service``'s ``port`` is published."""
        address = self("port", service, str(port)).strip()
        host, _, published = address.rpartition(":")
        assert host == "127.0.0.1", f"{service}:{port} is published on {address}, not on loopback only"
        return f"http://127.0.0.1:{published}"

    def logs(self) -> str:
        try:
            return self("logs", "--no-color", "--tail", "60", timeout=60)[-20000:]
        except (RuntimeError, subprocess.TimeoutExpired) as exc:
            return f"(no logs: {exc})"


@pytest.fixture(scope="module")
def docker(tmp_path_factory) -> Iterator[Docker]:
    compose_bin = install_tools(CACHE)
    with private_dockerd(tmp_path_factory.mktemp("dockerd"), compose_bin) as docker:
        yield docker


@pytest.fixture(scope="module")
def images(docker) -> dict[str, str]:
    base = base_image(docker, CACHE)
    python = standin_image(docker, CACHE, "python", base)
    return {
        "IMAGE": reelrl_image(docker, CACHE, python),
        "PYTHON_IMAGE": python,
        "POSTGRES_IMAGE": standin_image(docker, CACHE, "postgres", base),
        "REDIS_IMAGE": standin_image(docker, CACHE, "redis", base),
    }


@pytest.fixture(scope="module")
def stack_home(tmp_path_factory) -> Path:
    return tmp_path_factory.mktemp("stack")


@pytest.fixture(scope="module")
def train_files(stack_home) -> dict[str, str]:
    """The synthetic task datasets in the data folder (mounted at /data), as the containers name them."""
    from services.common.synthetic_tasks import make_task_datasets

    files = make_task_datasets(stack_home / "data", train_videos=8, val_videos=4)
    return {name: f"/data/{path.name}" for name, path in files.items()}


@pytest.fixture(scope="module")
def tiny_model(stack_home) -> str:
    """A random-weight Qwen2.5-VL in the models folder (mounted at /models)."""
    from services.common.tiny_models import build_tiny_model

    build_tiny_model("qwen2_5_vl", stack_home / "models" / "tiny-qwen2_5_vl", seed=0)
    return "/models/tiny-qwen2_5_vl"


@pytest.fixture(scope="module")
def stack(docker, images, stack_home, video_dir) -> Iterator[Compose]:
    home = stack_home
    data, models = home / "data", home / "models"
    (data / "videos").mkdir(parents=True, exist_ok=True)
    models.mkdir(exist_ok=True)
    rows = []
    for i, name in enumerate(("short.mp4", "wide.mp4", "tall.mp4")):
        (data / "videos" / name).write_bytes((video_dir / name).read_bytes())
        rows.append({"id": f"s{i}", "problem": "what happens?", "videos": [f"/data/videos/{name}"]})
    (data / "train.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    override = home / "metrics.override.yml"
    override.write_text(METRICS_OVERRIDE)
    api_port = free_port()
    settings = {
        **images,
        "POSTGRES_PASSWORD": secrets.token_hex(12),
        "API_PORT": str(api_port),
        "RAY_DASHBOARD_PORT": str(free_port()),
        "PUBLISH_ADDRESS": "127.0.0.1",
        "DATA_DIR": str(data),
        "MODELS_DIR": str(models),
        "REWARD_REPLICAS": "1",
        "REWARD_WORKERS": "1",
        "PREPROCESS_CONCURRENCY": "1",
        "SHM_SIZE": "512mb",
    }
    env_file = home / "stack.env"
    env_file.write_text("".join(f"{k}={v}\n" for k, v in settings.items()))
    project = f"reelrl-test-{secrets.token_hex(4)}"
    compose = Compose(
        docker,
        project,
        [ROOT / "docker-compose.yml", override],
        env_file,
        f"http://127.0.0.1:{api_port}",
        data,
    )
    try:
        try:
            compose("up", "--detach", "--wait", "--no-build", timeout=900)
        except RuntimeError as exc:
            pytest.fail(f"{exc}\n{compose.logs()}")
        yield compose
    finally:
        compose("down", "--volumes", "--remove-orphans", "--timeout", "20", timeout=300)


def _token(stack: Compose, name: str) -> str:
    out = stack("exec", "-T", "api", "reelrl", "token", "create", "--scopes", "admin", "--name", name)
    return out.strip().splitlines()[-1].strip()


def _cli(stack: Compose, token: str, *args: str, timeout: float = 600) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "REELRL_API_URL": stack.api_url, "REELRL_API_TOKEN": token}
    return subprocess.run(
        [sys.executable, "-m", "services.cli", *args],
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout,
    )


def test_a_preprocess_job_submitted_through_the_published_port_succeeds(stack, tmp_path):
    token = _token(stack, "preprocess")
    config = tmp_path / "preprocess.yaml"
    config.write_text(
        "dataset: /data/train.jsonl\nout: /var/lib/reelrl/runs/pre/train.clips.jsonl\n"
        "video_params:\n  max_frames: 8\n  fps: 1.0\n"
    )
    done = _cli(stack, token, "submit", "preprocess", str(config), "--follow")
    assert done.returncode == 0, done.stdout + done.stderr + stack.logs()
    job_id = done.stdout.strip().splitlines()[0]
    with httpx.Client(
        base_url=stack.api_url, headers={"Authorization": f"Bearer {token}"}, timeout=30
    ) as http:
        job = http.get(f"/v1/jobs/{job_id}").json()
    assert job["state"] == "succeeded", job
    assert (job["result"]["succeeded"], job["result"]["failed"]) == (3, 0), job


def test_the_workers_metrics_answer_on_published_ports(stack):
    for service in ("preprocess", "preprocess-jobs", "eval", "train-worker"):
        url = stack.published(service, 9100)
        deadline = time.monotonic() + 60
        while True:
            try:
                response = httpx.get(f"{url}/metrics", timeout=10)
                break
            except httpx.TransportError:
                if time.monotonic() > deadline:
                    raise
                time.sleep(1)
        assert response.status_code == 200, (service, response.text[:500])
    # The clip worker has decoded the first test's clips: its exporter shows what its pool ran (an idle
    # worker's may still be empty).
    assert "# TYPE" in httpx.get(f"{stack.published('preprocess', 9100)}/metrics", timeout=10).text


def _job(stack: Compose, token: str, job_id: str) -> dict:
    with httpx.Client(
        base_url=stack.api_url, headers={"Authorization": f"Bearer {token}"}, timeout=30
    ) as http:
        return http.get(f"/v1/jobs/{job_id}").json()


def _wait(what: str, check, timeout: float, stack: Compose):
    deadline = time.monotonic() + timeout
    while not (value := check()):
        if time.monotonic() > deadline:
            pytest.fail(f"{what}: not within {timeout:g} s\n{stack.logs()}")
        time.sleep(1)
    return value


def test_a_3_step_train_job_succeeds(stack, tiny_model, train_files):
    token = _token(stack, "train")
    overrides = [
        f"data.train_files=[{train_files['colour_mix']}]", f"data.val_files=[{train_files['colour_val']}]",
        "data.batch_size=4", "rollout.n=4", f"actor.model_path={tiny_model}",
        "trainer.output_dir=/var/lib/reelrl/runs/train-3", "trainer.total_steps=3", "trainer.val_freq=0",
        "trainer.val_before_train=false", "trainer.loggers=[jsonl]",
    ]  # fmt: skip
    config = str(ROOT / "examples" / "tiny_cpu.yaml")
    done = _cli(stack, token, "submit", "train", config, *overrides, "--follow", timeout=1200)
    assert done.returncode == 0, done.stdout + done.stderr + stack.logs()
    job = _job(stack, token, done.stdout.strip().splitlines()[0])
    assert job["state"] == "succeeded" and job["result"]["steps"] == 3, job


def test_a_preprocess_job_survives_its_worker_restarting(stack, tmp_path):
    """The clip worker is away when the job starts and is restarted while the job waits on its clips:
    the job still succeeds, every row done (nothing lost)."""
    token = _token(stack, "restart")
    config = tmp_path / "preprocess.yaml"
    config.write_text(
        "dataset: /data/train.jsonl\nout: /var/lib/reelrl/runs/restart/train.clips.jsonl\n"
        "video_params:\n  max_frames: 6\n  fps: 0.5\n"  # parameters of its own: nothing cached
    )
    stack("stop", "preprocess")
    submitted = _cli(stack, token, "submit", "preprocess", str(config))
    assert submitted.returncode == 0, submitted.stderr
    job_id = submitted.stdout.strip().splitlines()[0]
    _wait("running", lambda: _job(stack, token, job_id)["state"] == "running", 120, stack)
    stack("restart", "preprocess")
    job = _wait("ended", lambda: (j := _job(stack, token, job_id))["state"] not in ("queued", "running") and j,
                300, stack)  # fmt: skip
    assert job["state"] == "succeeded", (job, stack.logs())
    assert (job["result"]["succeeded"], job["result"]["failed"]) == (3, 0), job


def test_the_api_answers_503_while_postgres_is_away_then_recovers(stack):
    token = _token(stack, "db")
    headers = {"Authorization": f"Bearer {token}"}
    with httpx.Client(base_url=stack.api_url, headers=headers, timeout=30) as http:
        assert http.get("/v1/jobs").status_code == 200
        stack("stop", "postgres")
        try:
            away = http.get("/v1/jobs")
            assert away.status_code == 503, away.text
        finally:
            stack("start", "postgres")
        _wait("served again", lambda: http.get("/v1/jobs").status_code == 200, 120, stack)


def test_down_leaves_no_container_network_or_volume_of_the_project(docker, stack):
    stack("down", "--volumes", "--remove-orphans", "--timeout", "20", timeout=300)
    label = f"label=com.docker.compose.project={stack.project}"
    assert docker("ps", "--all", "--quiet", "--filter", label).split() == []
    assert docker("network", "ls", "--quiet", "--filter", label).split() == []
    assert docker("volume", "ls", "--quiet", "--filter", label).split() == []
