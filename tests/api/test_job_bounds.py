"""Size bounds of a train job at submission (services.common.job_bounds): 422 naming the field and
the bound, and nothing created."""

import json

import pytest

from services.common.jobs import list_jobs


def _body(data_root, train_files):
    model = data_root / "models" / "tiny"
    model.mkdir(parents=True, exist_ok=True)
    (model / "config.json").write_text(json.dumps({"model_type": "qwen2_5_vl"}))
    return {
        "kind": "train",
        "config": {
            "data": {"train_files": train_files},
            "actor": {"model_path": "models/tiny"},
            "trainer": {"output_dir": "runs/a"},
        },
    }


def _refused(client, body) -> str:
    response = client.post("/v1/jobs", json=body)
    assert response.status_code == 422, response.text
    assert list_jobs()[1] == 0
    return json.dumps(response.json()["detail"])


def _rows(path, n):
    path.write_text(
        "".join(json.dumps({"id": f"s{i}", "problem": "p", "answer": "A"}) + "\n" for i in range(n))
    )
    return path.name


def test_a_file_listed_many_times_is_refused(client, data_root):
    name = _rows(data_root / "one.jsonl", 3)
    detail = _refused(client, _body(data_root, [name] * 30_000))
    assert f"data.train_files lists {data_root / name} 30000 times; list each file once" in detail, detail
    # one file named two ways (relative, absolute) is the same file
    detail = _refused(client, _body(data_root, [name, str(data_root / name)]))
    assert "2 times" in detail, detail


@pytest.mark.parametrize(
    ("env", "files", "message"),
    [
        (
            {"REELRL_JOB_MAX_FILES": "2"},
            3,
            "data.train_files lists 3 files; at most 2 are allowed (REELRL_JOB_MAX_FILES)",
        ),
        (
            {"REELRL_JOB_MAX_SAMPLES": "10"},
            3,
            "data.train_files: the dataset files hold more than 10 samples",
        ),
    ],
    ids=["files", "samples"],
)
def test_bounds_are_configurable_and_named(make_client, data_root, monkeypatch, env, files, message):
    for key, value in env.items():
        monkeypatch.setenv(key, value)
    names = [_rows(data_root / f"part{i}.jsonl", 4) for i in range(files)]  # 12 samples in all
    client = make_client()
    detail = _refused(client, _body(data_root, names))
    assert message in detail, detail
    # within the bounds the same files are accepted
    assert client.post("/v1/jobs", json=_body(data_root, names[:2])).status_code == 202


def test_a_preprocess_dataset_is_bounded_too(make_client, data_root, monkeypatch):
    monkeypatch.setenv("REELRL_JOB_MAX_SAMPLES", "3")
    client = make_client()
    body = {
        "kind": "preprocess",
        "config": {"dataset": _rows(data_root / "big.jsonl", 4), "out": "out.jsonl"},
    }
    detail = _refused(client, body)
    assert "dataset: the dataset files hold more than 3 samples" in detail, detail
    body["config"]["dataset"] = _rows(data_root / "small.jsonl", 3)
    assert client.post("/v1/jobs", json=body).status_code == 202
