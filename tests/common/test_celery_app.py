"""The shared Celery app: knows no service, writes nothing on import, routes tasks by name."""

import json
import subprocess
import sys

import pytest

from services.common import celery_app
from services.common.celery_app import get_celery, queue_for
from services.common.settings import get_settings, reset_settings_cache


def test_importing_writes_nothing_and_loads_no_service(tmp_path):
    home = tmp_path / "home"
    code = (
        "import json, sys; import services.common.celery_app; "
        "print(json.dumps(sorted(m for m in sys.modules if m.startswith('services.'))))"
    )
    done = subprocess.run(
        [sys.executable, "-c", code],
        env={"REELRL_HOME": str(home), "PATH": ""},
        capture_output=True,
        text=True,
    )
    assert done.returncode == 0, done.stderr
    loaded = json.loads(done.stdout)
    assert "services.common.celery_app" in loaded
    assert [m for m in loaded if m.split(".")[1] != "common"] == []
    assert not home.exists()


@pytest.mark.parametrize(
    ("name", "queue"),
    [("reelrl.preprocess.clip", "preprocess"), ("reelrl.train.step", "train"), ("reelrl.eval.run", "eval")],
)
def test_tasks_are_routed_by_name(name, queue):
    assert queue_for(name) == queue


@pytest.mark.parametrize("name", ["reelrl.deploy.x", "preprocess.clip", "reelrl.train", "other.train.x"])
def test_names_outside_the_queues_are_refused(name):
    with pytest.raises(ValueError, match=r"is not reelrl\.<queue>\.<name> with a queue among"):
        queue_for(name)


def test_the_app_is_built_on_first_use_and_follows_the_settings(reelrl_home):
    broker = get_settings().broker_folder
    assert not broker.exists()
    app = get_celery()
    assert all((broker / sub).is_dir() for sub in ("queue", "processed", "control"))
    assert get_celery() is app and celery_app.app is app  # cached; `app` kept for older callers
    assert app.conf.task_routes["reelrl.train.*"] == {"queue": "train"}
    reset_settings_cache()
    assert get_celery() is not app


def test_a_service_registers_its_tasks_by_importing_its_module(reelrl_home):
    from services.preprocess.tasks import CLIP_TASK

    assert CLIP_TASK in get_celery().tasks
