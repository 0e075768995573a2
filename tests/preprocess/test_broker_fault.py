"""What the preprocess job's clip dispatch takes for the broker being away (and retries) rather than a
fault of its own (which fails the job): the kombu race a Redis restart leaves behind, seen in CI as
``AttributeError: 'NoneType' object has no attribute 'client'`` failing a job that should have waited."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from kombu.exceptions import OperationalError
from kombu.transport.redis import Channel

from services.common.celery_app import make_celery
from services.common.settings import Settings
from services.preprocess.dispatch import _send_clip, broker_fault
from services.preprocess.tasks import CLIP_TASK


def _raised(fn) -> BaseException:
    try:
        fn()
    except BaseException as exc:
        return exc
    raise AssertionError("nothing was raised")


def test_a_channel_a_restart_closed_is_the_broker_away_and_our_own_bugs_are_not() -> None:
    closed = Channel.__new__(Channel)  # what kombu leaves: a channel whose connection is gone
    closed.connection = None
    race = _raised(closed._connparams)
    assert isinstance(race, AttributeError) and "'client'" in str(race)
    assert broker_fault(race)
    assert broker_fault(OperationalError("Error 111 connecting to 127.0.0.1:6379"))
    assert broker_fault(ConnectionRefusedError())
    ours = _raised(lambda: None.client)  # the same message, raised by our own code
    assert not broker_fault(ours)
    assert not broker_fault(ValueError("bad clip"))


@pytest.mark.parametrize("fresh", [False, True])
def test_a_clip_sent_on_a_fresh_connection_arrives_like_a_pooled_one(tmp_path: Path, fresh: bool) -> None:
    settings = Settings(home=tmp_path / "home")  # the embedded broker: folders under this test's home
    celery = make_celery(settings)
    _send_clip(celery, "ab" * 32, fresh=fresh)
    (message,) = list((settings.broker_folder / "queue").glob("*"))
    body = json.loads(message.read_text())
    assert body["headers"]["task"] == CLIP_TASK and "ab" * 32 in body["headers"]["argsrepr"]
