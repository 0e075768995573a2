"""The deployment tests' own tools (tests/deploy/conftest.py), on hand-made inputs: they can say no."""

from __future__ import annotations

from pathlib import Path

import pytest


@pytest.mark.parametrize(
    ("argv", "problem"),
    [
        (["reelrl", "serve", "reward", "--host", "0.0.0.0", "--port", "8100"], None),
        (["reelrl", "train", "/etc/reelrl/train/config.yaml", "trainer.total_steps=10"], None),
        (["ray", "start", "--head", "--port=6379", "--block"], None),
        (["ray", "job", "submit", "--address=http://h:8265", "--", "reelrl", "train", "c.yaml"], None),
        (["reelrl", "--help"], None),
        (["pg_isready", "-U", "x"], None),  # not ours to check
        (["reelrl", "worker", "nope"], "has no sub-command 'nope'"),
        (["reelrl", "serve", "reward", "--bogus"], "No such option: --bogus"),
        (["reelrl", "serve", "reward", "--port", "eighty"], "port"),
        (["reelrl", "worker", "preprocess", "--concurrency", "0"], "concurrency"),
        (["reelrl", "worker", "preprocess", "stray"], "unexpected arguments ['stray']"),
        (["reelrl", "train"], "missing config"),
        (["reelrl", "worker"], "needs a sub-command"),
        (["ray", "start", "--num-cpus=many"], "num_cpus"),
        (["ray", "job", "submit", "--", "reelrl", "trian", "c.yaml"], "has no sub-command 'trian'"),
    ],
)
def test_command_check(argv, problem, check_command):
    problems = check_command(argv)
    if problem is None:
        assert problems == []
    else:
        assert len(problems) == 1 and problem in problems[0]


def test_shell_line_splits_into_commands(split_shell):
    line = "A=1 exec reelrl worker ping 2>/dev/null && ray start --head; echo 'a && b' | grep -q x"
    assert split_shell(line) == [
        ["reelrl", "worker", "ping"],
        ["ray", "start", "--head"],
        ["echo", "a && b"],
        ["grep", "-q", "x"],
    ]


def test_json_patch_add_replace_remove(json_patch):
    doc = {"spec": {"containers": [{"name": "a", "resources": {"limits": {"memory": "1Gi"}}}], "replicas": 2}}
    json_patch(doc, {"op": "replace", "path": "/spec/replicas", "value": 1})
    json_patch(doc, {"op": "add", "path": "/spec/containers/0/resources/limits/nvidia.com~1gpu", "value": 8})
    json_patch(doc, {"op": "add", "path": "/spec/containers/-", "value": {"name": "b"}})
    json_patch(doc, {"op": "add", "path": "/spec/containers/0", "value": {"name": "first"}})
    json_patch(doc, {"op": "remove", "path": "/spec/containers/2"})
    assert doc == {
        "spec": {
            "containers": [
                {"name": "first"},
                {"name": "a", "resources": {"limits": {"memory": "1Gi", "nvidia.com/gpu": 8}}},
            ],
            "replicas": 1,
        }
    }
    with pytest.raises(AssertionError, match="nothing to replace"):
        json_patch(doc, {"op": "replace", "path": "/spec/paused", "value": True})
    with pytest.raises(AssertionError, match="not rendered"):
        json_patch(doc, {"op": "move", "from": "/spec/replicas", "path": "/spec/x"})


def _write(folder: Path, name: str, text: str) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    (folder / name).write_text(text)


def test_kustomize_resources_patches_images_and_namespace(tmp_path, kustomize):
    base = tmp_path / "base"
    _write(
        base,
        "kustomization.yaml",
        "apiVersion: kustomize.config.k8s.io/v1beta1\nkind: Kustomization\nresources: [app.yaml]\n",
    )
    _write(
        base, "app.yaml",
        "apiVersion: v1\nkind: Namespace\nmetadata: {name: n}\n---\n"
        "apiVersion: ray.io/v1\nkind: RayJob\nmetadata: {name: j}\n"
        "spec: {rayClusterSpec: {headGroupSpec: {template: {spec: {containers: [{name: h, image: app}]}}}}}\n---\n"
        "apiVersion: apps/v1\nkind: Deployment\nmetadata: {name: d}\n"
        "spec: {replicas: 3, template: {spec: {initContainers: [{name: i, image: 'app:old'}],"
        " containers: [{name: c, image: 'registry:5000/other'}]}}}\n",
    )  # fmt: skip
    overlay = tmp_path / "overlay"
    _write(
        overlay, "kustomization.yaml",
        "apiVersion: kustomize.config.k8s.io/v1beta1\nkind: Kustomization\nnamespace: ns\n"
        "resources: [../base]\nimages: [{name: app, newTag: cuda}]\n"
        "patches:\n- target: {kind: Deployment}\n  patch: '[{op: replace, path: /spec/replicas, value: 1}]'\n",
    )  # fmt: skip
    objects = {o["kind"]: o for o in kustomize(overlay)}
    assert objects["Namespace"]["metadata"] == {"name": "n"}  # cluster-scoped: no namespace
    assert (
        objects["RayJob"]["metadata"]["namespace"] == objects["Deployment"]["metadata"]["namespace"] == "ns"
    )
    head = objects["RayJob"]["spec"]["rayClusterSpec"]["headGroupSpec"]["template"]["spec"]["containers"][0]
    assert head["image"] == "app:cuda"  # images are set inside custom resources too
    pod = objects["Deployment"]["spec"]["template"]["spec"]
    assert pod["initContainers"][0]["image"] == "app:cuda"
    assert pod["containers"][0]["image"] == "registry:5000/other"
    assert objects["Deployment"]["spec"]["replicas"] == 1


def test_kustomize_refuses_what_it_does_not_render(tmp_path, kustomize):
    _write(
        tmp_path,
        "kustomization.yaml",
        "apiVersion: kustomize.config.k8s.io/v1beta1\nkind: Kustomization\ncommonLabels: {a: b}\n",
    )
    with pytest.raises(AssertionError, match="commonLabels"):
        kustomize(tmp_path)


def test_settings_and_metrics_are_found_in_the_code(settings_fields, registered_metrics):
    assert settings_fields["REELRL_DATABASE_URL"][1] == "database_url"
    assert settings_fields["REELRL_REWARD_SCORE_THREADS"][1] == "score_threads"
    assert settings_fields["REELRL_METRICS_PORT"][1] == "metrics_port"
    assert {"reelrl_reward_requests_total", "reelrl_reward_request_seconds_bucket", "reelrl_worker_tasks_active",
            "reelrl_trainer_metric"} <= registered_metrics  # fmt: skip
    assert "reelrl_reward_requests" not in registered_metrics  # a counter is exposed as ..._total
