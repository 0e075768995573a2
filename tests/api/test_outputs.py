"""A preprocess job's `out` may not name a file it did not make (a video, a dataset, a model's
config.json): 422 naming the path, and the file is untouched. Its own earlier output may be replaced."""

from services.common.jobs import list_jobs
from services.common.outputs import record_output_file


def _errors(response):
    return {".".join(map(str, e["loc"])): e["msg"] for e in response.json()["detail"]}


def _submit(client, out):
    return client.post(
        "/v1/jobs", json={"kind": "preprocess", "config": {"dataset": "train.jsonl", "out": out}}
    )


def test_out_naming_an_existing_input_is_422_and_the_file_survives(client, data_root):
    video = data_root / "videos" / "short.mp4"
    config = data_root / "model" / "config.json"
    config.parent.mkdir()
    config.write_text('{"model_type": "qwen2_5_vl"}\n')
    notes = data_root / "o.failed.jsonl"  # where the failures of out "o.jsonl" would go
    notes.write_text("mine\n")
    for out, victim in (("videos/short.mp4", video), ("model/config.json", config), ("o.jsonl", notes)):
        before = victim.read_bytes()
        response = _submit(client, out)
        assert response.status_code == 422, response.text
        message = _errors(response)["body.config.out"]
        assert f"{victim.resolve()}: exists and was not written by a preprocess run" in message
        assert victim.read_bytes() == before
    assert list_jobs()[1] == 0


def test_out_may_replace_an_earlier_preprocess_output(client, data_root):
    earlier = data_root / "out" / "train.clips.jsonl"
    earlier.parent.mkdir()
    earlier.write_text('{"id": "s0"}\n')
    assert _submit(client, "out/train.clips.jsonl").status_code == 422  # nobody recorded writing it
    record_output_file(earlier.resolve(), "preprocess")
    response = _submit(client, "out/train.clips.jsonl")
    assert response.status_code == 202, response.text
