"""Reading which jobs the broker holds a message for, without consuming: the embedded filesystem
broker, and a Redis of the test's own (waiting messages at any priority, and messages a worker took
but has not acknowledged)."""

from __future__ import annotations

import base64
import json

import pytest
from kombu.exceptions import KombuError
from redis.exceptions import RedisError

from services.common.broker_inbox import job_id_of, waiting_job_ids
from services.common.celery_app import make_celery
from services.common.settings import get_settings, reset_settings_cache
from tests.api.private_redis import PrivateRedis


def _send(app, queue, job_id, **options):
    app.send_task(f"reelrl.{queue}.job", kwargs={"job_id": job_id}, queue=queue, **options)


def test_the_embedded_broker_is_read_per_queue(reelrl_home):
    app = make_celery(get_settings())
    _send(app, "train", "t1")
    _send(app, "eval", "e1")
    app.send_task("reelrl.preprocess.clip", args=["clip-key"], queue="preprocess")  # no job id
    assert waiting_job_ids(app, ["train"]) == {"t1"}
    assert waiting_job_ids(app, ["train", "eval", "preprocess"]) == {"t1", "e1"}
    assert waiting_job_ids(app, ["preprocess-jobs"]) == set()


def test_redis_is_read_at_every_priority_and_with_what_workers_hold(reelrl_home, monkeypatch):
    server = PrivateRedis().start()
    try:
        monkeypatch.setenv("REELRL_BROKER_URL", server.url)
        reset_settings_cache()
        app = make_celery(get_settings())
        _send(app, "train", "plain")
        _send(app, "train", "urgent", priority=9)
        _send(app, "eval", "other-queue")
        assert waiting_job_ids(app, ["train"]) == {"plain", "urgent"}
        with app.connection_for_read() as connection:
            channel = connection.default_channel
            taken = channel.basic_get("eval", no_ack=False)  # as a worker takes it, before it acks
            assert taken is not None
            assert waiting_job_ids(app, ["train"]) == {"plain", "urgent", "other-queue"}
            taken.ack()
        assert waiting_job_ids(app, ["train", "eval"]) == {"plain", "urgent"}
        server.stop()
        with pytest.raises((KombuError, OSError, RedisError)):  # away: nothing can be decided (reap)
            waiting_job_ids(app, ["train"], timeout_s=1)
    finally:
        server.remove()


def test_a_transport_it_cannot_read_is_unknown_not_empty(reelrl_home, monkeypatch):
    monkeypatch.setenv("REELRL_BROKER_URL", "memory://")
    reset_settings_cache()
    assert waiting_job_ids(make_celery(get_settings()), ["train"]) is None


def test_job_ids_come_only_from_well_formed_messages():
    def message(payload, encoded=True):
        body = json.dumps(payload)
        if encoded:
            return {
                "body": base64.b64encode(body.encode()).decode(),
                "properties": {"body_encoding": "base64"},
            }
        return {"body": body, "properties": {}}

    assert job_id_of(message([[], {"job_id": "abc"}, {}])) == "abc"
    assert job_id_of(message([[], {"job_id": "abc"}, {}], encoded=False)) == "abc"
    for bad in ([["abc"], {}, {}], [[], {"job_id": 7}, {}], {"job_id": "abc"}, "text"):
        assert job_id_of(message(bad)) is None
    assert job_id_of({"body": "%%%", "properties": {"body_encoding": "base64"}}) is None
    assert job_id_of("not a message") is None
