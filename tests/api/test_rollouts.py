"""The rollout log routes in process: a train job's logged steps, one step's groups, and frame thumbnails
read from a real frame store (tests/api/rollout_log.py writes the run as the trainer does)."""

from __future__ import annotations

import io
import json

import pytest
from PIL import Image

from services.api import thumbnails
from services.api.thumbnails import CACHE_CONTROL, ThumbnailCache
from services.api.tokens import Scope, create_token
from services.common.frames.store import FrameStore
from services.common.jobs import create_job
from tests.api.rollout_log import (
    FRAME_H,
    FRAME_W,
    IMAGE_KEY,
    XSS,
    left_colour,
    right_colour,
    store_clip,
    write_run,
    write_step,
)


@pytest.fixture
def run(data_root):
    """A train job whose trainer.output_dir holds a rollout log of steps 3 and 6, clips in the store."""
    folder = data_root / "runs" / "r1"
    keys = write_run(folder, FrameStore.from_settings())
    job_id = create_job("train", {"trainer": {"output_dir": str(folder)}})
    return job_id, folder, keys


def jpeg(response):
    assert response.status_code == 200, response.text
    assert response.headers["content-type"] == "image/jpeg"
    return Image.open(io.BytesIO(response.content)).convert("RGB")


def near(pixel, colour, tolerance=24):
    return all(abs(a - b) <= tolerance for a, b in zip(pixel, colour, strict=True))


def test_lists_logged_steps_and_reads_one(client, run):
    job_id, folder, keys = run
    (folder / "rollouts" / "notes.txt").write_text("not a step")
    (folder / "rollouts" / ".step_000009.jsonl.tmp").write_text("{}")  # a writer's temp file
    assert client.get(f"/v1/jobs/{job_id}/rollouts").json() == {"job_id": job_id, "steps": [3, 6]}

    body = client.get(f"/v1/jobs/{job_id}/rollouts/6").json()
    assert body["step"] == 6 and [g["group"] for g in body["groups"]] == [0, 1]
    first = body["groups"][0]
    assert first["clips"] == [{"key": keys["b"], "timestamps": [0.0, 0.5, 1.0]}]
    assert first["answer"] == {"choice": "A", "note": "<i>json</i>"}
    # The reward's named parts beyond overall/accuracy/format come through, as floats.
    assert first["responses"][0]["reward"] == {
        "overall": 1.0, "accuracy": 1.0, "format": 1.0, "builtin": 1.0, "brevity": 0.4,
    }  # fmt: skip
    xss = first["responses"][1]
    assert xss["text"] == XSS and xss["offline"] is True and xss["engine"] is None
    assert xss["advantage"] == -0.58


def test_a_run_without_rollouts_and_a_missing_step_are_named(client, run, data_root):
    job_id, folder, _ = run
    missing = client.get(f"/v1/jobs/{job_id}/rollouts/4")
    assert missing.status_code == 404
    detail = missing.json()["detail"]
    assert "no rollouts at step 4" in detail and "logged steps: 3, 6" in detail

    quiet = create_job("train", {"trainer": {"output_dir": str(data_root / "runs" / "quiet")}})
    assert client.get(f"/v1/jobs/{quiet}/rollouts").json()["steps"] == []
    detail = client.get(f"/v1/jobs/{quiet}/rollouts/1").json()["detail"]
    assert "logged no rollouts" in detail and "trainer.rollout_log" in detail

    no_dir = create_job("train", {"trainer": {"total_steps": 2}})
    assert client.get(f"/v1/jobs/{no_dir}/rollouts").json()["detail"].endswith("names no trainer.output_dir")
    evaluation = create_job("eval", {"output_dir": str(folder)})
    response = client.get(f"/v1/jobs/{evaluation}/rollouts")
    assert response.status_code == 404 and "only train jobs log rollouts" in response.json()["detail"]
    assert client.get(f"/v1/jobs/{'0' * 32}/rollouts").status_code == 404
    assert client.get(f"/v1/jobs/{job_id}/rollouts/-1").status_code == 422
    assert client.get(f"/v1/jobs/{job_id}/rollouts/../../etc").status_code == 404  # no such route


@pytest.mark.parametrize(
    ("line", "says"),
    [
        ("{not json", ":2: invalid JSON"),
        (json.dumps({"step": 6, "group": 1}), ":2: sample_id: Field required"),
        ("__GROUP__reward.overall=bad", ":2: responses.0.reward.overall: Input should be a valid number"),
        ("__GROUP__reward.extra=bad", ":2: responses.0.reward.brevity: Input should be a valid number"),
        ("__GROUP__step=7", ":2: says step 7, in the file of step 6"),
        ("__GROUP__key=../../etc", ":2: clips.0.key: String should match pattern"),
    ],
)
def test_a_bad_line_is_422_naming_file_line_and_field(client, run, line, says):
    job_id, folder, _ = run
    path = folder / "rollouts" / "step_000006.jsonl"
    good, *_ = path.read_text().splitlines()
    if line.startswith("__GROUP__"):
        record = json.loads(good)
        what = line.removeprefix("__GROUP__")
        if what == "reward.overall=bad":
            record["responses"][0]["reward"]["overall"] = "bad"
        elif what == "reward.extra=bad":
            record["responses"][0]["reward"]["brevity"] = "bad"
        elif what == "step=7":
            record["step"] = 7
        else:
            record["clips"][0]["key"] = "../../etc"
        line = json.dumps(record)
    path.write_text(good + "\n" + line + "\n")
    response = client.get(f"/v1/jobs/{job_id}/rollouts/6")
    assert response.status_code == 422, response.text
    detail = response.json()["detail"]
    assert detail.startswith(str(path)) and says in detail, detail


def test_line_breaks_inside_strings_stay_in_their_line(client, run):
    job_id, folder, _ = run
    path = folder / "rollouts" / "step_000006.jsonl"
    record = json.loads(path.read_text().splitlines()[0])
    record["responses"][0]["text"] = "one\u2028two\rthree\x85four"  # written raw (ensure_ascii=False)
    path.write_text(json.dumps(record, ensure_ascii=False) + "\n")
    body = client.get(f"/v1/jobs/{job_id}/rollouts/6").json()
    assert [g["responses"][0]["text"] for g in body["groups"]] == ["one\u2028two\rthree\x85four"]


def test_thumbnail_is_the_stored_frame_downscaled(client, run):
    job_id, _, keys = run
    url = f"/v1/jobs/{job_id}/rollouts/6/frames/{keys['b']}"
    for index in range(3):
        response = client.get(f"{url}/{index}")
        image = jpeg(response)
        assert response.headers["cache-control"] == CACHE_CONTROL
        # 200x120 shrunk to 160 on the longest side, the aspect kept
        assert image.size == (160, round(160 * FRAME_H / FRAME_W))
        # clip b starts at colour 4: left and right halves as stored
        assert near(image.getpixel((20, 48)), left_colour(4 + index)), image.getpixel((20, 48))
        assert near(image.getpixel((140, 48)), right_colour(4 + index)), image.getpixel((140, 48))
    assert jpeg(client.get(f"{url}/0?size=64")).size == (64, round(64 * FRAME_H / FRAME_W))
    assert jpeg(client.get(f"{url}/0?size=640")).size == (FRAME_W, FRAME_H)  # never enlarged


def test_thumbnail_reads_only_clips_the_step_logged(client, run):
    job_id, _, keys = run
    other = store_clip(FrameStore.from_settings(), "not-logged", 2)  # in the store, in no log
    base = f"/v1/jobs/{job_id}/rollouts"
    refused = client.get(f"{base}/6/frames/{other}/0")
    assert refused.status_code == 404 and f"logged no clip {other} at step 6" in refused.json()["detail"]
    # Clip a is logged at step 3, not step 6.
    assert client.get(f"{base}/6/frames/{keys['a']}/0").status_code == 404
    assert client.get(f"{base}/3/frames/{keys['a']}/0").status_code == 200
    beyond = client.get(f"{base}/6/frames/{keys['b']}/3")
    assert beyond.status_code == 404 and "has 3 frames" in beyond.json()["detail"]
    assert client.get(f"{base}/5/frames/{keys['b']}/0").status_code == 404  # no such step
    # A still image is logged without frames: nothing of it is read.
    assert "has 0 frames" in client.get(f"{base}/6/frames/{IMAGE_KEY}/0").json()["detail"]
    assert client.get(f"{base}/6/frames/.hidden/0").status_code == 422
    assert client.get(f"{base}/6/frames/{keys['b']}/0?size=4000").status_code == 422


def test_rollouts_need_a_read_token_like_every_read(make_client, run):
    job_id, _, keys = run
    client = make_client(auth="required")
    base = f"/v1/jobs/{job_id}/rollouts"
    urls = (base, f"{base}/6", f"{base}/6/frames/{keys['b']}/0")
    assert [client.get(url).status_code for url in urls] == [401, 401, 401]
    viewer = {"Authorization": f"Bearer {create_token('viewer', [Scope.read])}"}
    assert [client.get(url, headers=viewer).status_code for url in urls] == [200, 200, 200]


def test_a_logged_clip_gone_from_the_store_is_404(client, run):
    job_id, _, keys = run
    FrameStore.from_settings().remove(keys["c"])
    response = client.get(f"/v1/jobs/{job_id}/rollouts/6/frames/{keys['c']}/0")
    assert response.status_code == 404 and "not in the frame store" in response.json()["detail"]


def test_a_second_request_is_served_from_the_cache(client, run, monkeypatch):
    job_id, _, keys = run
    reads = []
    real_read = thumbnails.read_frame

    def counted(store, key, index):
        reads.append((key, index))
        return real_read(store, key, index)

    monkeypatch.setattr(thumbnails, "read_frame", counted)
    url = f"/v1/jobs/{job_id}/rollouts/6/frames/{keys['b']}/1"
    first = client.get(url).content
    assert reads == [(keys["b"], 1)]
    assert client.get(url).content == first
    assert reads == [(keys["b"], 1)]  # not read nor decoded again
    cache = client.app.state.thumbnails
    assert (cache.hits, cache.misses) == (1, 1)
    client.get(f"{url}?size=80")  # another size is another thumbnail
    assert reads == [(keys["b"], 1), (keys["b"], 1)]


def test_cache_drops_the_least_recently_used_past_its_budget(tmp_path):
    store = FrameStore(tmp_path / "frames")
    key = store_clip(store, "clip", 3)
    one = len(thumbnails.render_thumbnail(store.load(key)[0][0].numpy(), 160))
    cache = ThumbnailCache(max_bytes=int(one * 2.5))  # room for two
    for index in (0, 1, 0, 2):  # 0 is used again before 2 arrives: 1 is the one dropped
        cache.get(store, key, index, 160)
    assert len(cache) == 2 and (cache.hits, cache.misses) == (1, 3)
    cache.get(store, key, 0, 160)
    assert cache.hits == 2
    cache.get(store, key, 1, 160)
    assert cache.misses == 4


def test_numbers_written_as_null_or_nan_are_served_as_null(client, run):
    """The trainer writes a non-finite number as null; a NaN (Python's json writes one) reads as null too."""
    job_id, folder, _ = run
    record = json.loads((folder / "rollouts" / "step_000003.jsonl").read_text())
    record["step"] = 8
    record["responses"][0]["advantage"] = None
    record["responses"][0]["reward"]["overall"] = None
    record["responses"][1]["advantage"] = float("nan")
    record["responses"][1]["reward"]["judge"] = None
    write_step(folder, 8, [record])
    response = client.get(f"/v1/jobs/{job_id}/rollouts/8")
    assert response.status_code == 200, response.text
    first, second = response.json()["groups"][0]["responses"]
    assert first["advantage"] is None and first["reward"]["overall"] is None
    assert second["advantage"] is None and second["reward"]["judge"] is None


def test_rollouts_page_and_link(client, run):
    job_id, _, _ = run
    page = client.get(f"/jobs/{job_id}/rollouts?step=6")
    assert page.status_code == 200 and 'src="/static/rollouts.js"' in page.text
    assert '"step": 6' in page.text and '"thumb_size": 160' in page.text
    assert f'href="/jobs/{job_id}/rollouts"' in client.get(f"/jobs/{job_id}").text
    evaluation = create_job("eval", {"benchmarks": ["mvbench"]})
    refused = client.get(f"/jobs/{evaluation}/rollouts")
    assert refused.status_code == 404 and "only train jobs log rollouts" in refused.text
