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


def test_a_train_or_eval_output_dir_holding_files_of_no_run_is_422_and_untouched(client, data_root):
    from tests.api.test_edges import _tiny_model_dir, train_body

    victim = data_root / "victim"
    victim.mkdir()
    (victim / "config.yaml").write_text("mine: true\n")
    (victim / "metrics.jsonl").write_text('{"step": 1}\n')
    before = {p.name: p.read_bytes() for p in victim.iterdir()}
    train = client.post("/v1/jobs", json=train_body(data_root, output_dir="victim"))
    assert train.status_code == 422, train.text
    message = _errors(train)["body.config"]
    assert f"trainer.output_dir={victim.resolve()}: holds files and is not a training run's folder" in message
    model = _tiny_model_dir(data_root)
    evaluation = client.post(
        "/v1/jobs", json={"kind": "eval", "config": {"model": str(model), "output_dir": "victim"}}
    )
    assert evaluation.status_code == 422, evaluation.text
    assert (
        "is not a evaluation run's folder (no manifest.json)" in _errors(evaluation)["body.config.output_dir"]
    )
    assert {p.name: p.read_bytes() for p in victim.iterdir()} == before
    # a new folder, an empty one, or an earlier run's (its .lock) are fine
    (data_root / "empty").mkdir()
    for folder in ("fresh/run", "empty"):
        assert client.post("/v1/jobs", json=train_body(data_root, output_dir=folder)).status_code == 202
    (victim / ".lock").touch()
    assert client.post("/v1/jobs", json=train_body(data_root, output_dir="victim")).status_code == 202


def test_a_job_rerunning_its_failures_into_the_same_out_is_422(client, data_root):
    failures = data_root / "t1" / "o.failed.jsonl"
    failures.parent.mkdir()
    failures.write_text((data_root / "train.jsonl").read_text())
    record_output_file(failures.resolve(), "preprocess")  # an earlier run wrote it: replaceable as output
    response = client.post(
        "/v1/jobs",
        json={"kind": "preprocess", "config": {"dataset": "t1/o.failed.jsonl", "out": "t1/o.jsonl"}},
    )
    assert response.status_code == 422, response.text
    assert "is the dataset being read" in response.text
    assert list_jobs()[1] == 0


def test_an_out_that_cannot_name_a_file_is_422_not_500(client, data_root):
    """A name longer than the file system takes gave 500 (ENAMETOOLONG); a path under a regular file
    was accepted and the job failed at its end (FileExistsError)."""
    for out, why in (
        (f"t1/{'a' * 300}.jsonl", "File name too long"),
        ("train.jsonl/x.jsonl", "is not a folder"),
    ):
        response = _submit(client, out)
        assert response.status_code == 422, (out, response.text)
        assert why in _errors(response)["body.config.out"], response.text
    assert list_jobs()[1] == 0
