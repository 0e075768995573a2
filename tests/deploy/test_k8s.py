"""The Kubernetes overlays (deploy/k8s/), rendered by Kustomize's rules and validated against the schemas."""

from __future__ import annotations

import json
import re
import tomllib
from pathlib import Path

import jsonschema
import kubernetes_validate
import pytest

ROOT = Path(__file__).resolve().parents[2]
K8S = ROOT / "deploy" / "k8s"
OVERLAYS = ("dev", "gpu")
KUBERAY_KINDS = {"RayJob", "RayCluster"}

# The KubeRay v1 API fields (ray.io/v1; ray-operator/apis/ray/v1 rayjob_types.go and raycluster_types.go,
# docs.ray.io "RayJob Quickstart"). Pod templates are left open here and validated below as core
# PodTemplates, with the Kubernetes schema.
_STRING_MAP = {"type": "object", "additionalProperties": {"type": "string"}}
_POD_TEMPLATE = {"type": "object", "required": ["spec"]}
_INT = {"type": "integer"}
WORKER_GROUP = {
    "type": "object",
    "additionalProperties": False,
    "required": ["groupName", "template", "minReplicas", "maxReplicas"],
    "properties": {
        "groupName": {"type": "string"}, "replicas": _INT, "minReplicas": _INT, "maxReplicas": _INT,
        "numOfHosts": _INT, "rayStartParams": _STRING_MAP, "template": _POD_TEMPLATE,
        "scaleStrategy": {"type": "object"}, "idleTimeoutSeconds": _INT, "suspend": {"type": "boolean"},
    },
}  # fmt: skip
RAY_CLUSTER_SPEC = {
    "type": "object",
    "additionalProperties": False,
    "required": ["headGroupSpec"],
    "properties": {
        "headGroupSpec": {
            "type": "object",
            "additionalProperties": False,
            "required": ["template"],
            "properties": {
                "serviceType": {"type": "string"}, "headService": {"type": "object"},
                "enableIngress": {"type": "boolean"}, "rayStartParams": _STRING_MAP, "template": _POD_TEMPLATE,
            },
        },
        "workerGroupSpecs": {"type": "array", "items": WORKER_GROUP},
        "rayVersion": {"type": "string"}, "enableInTreeAutoscaling": {"type": "boolean"},
        "autoscalerOptions": {"type": "object"}, "headServiceAnnotations": _STRING_MAP,
        "suspend": {"type": "boolean"},
    },
}  # fmt: skip
RAY_JOB = {
    "type": "object",
    "required": ["apiVersion", "kind", "metadata", "spec"],
    "properties": {
        "apiVersion": {"const": "ray.io/v1"},
        "kind": {"const": "RayJob"},
        "metadata": {"type": "object", "required": ["name"]},
        "spec": {
            "type": "object",
            "additionalProperties": False,
            "properties": {
                "activeDeadlineSeconds": _INT, "backoffLimit": _INT, "rayClusterSpec": RAY_CLUSTER_SPEC,
                "submitterPodTemplate": _POD_TEMPLATE, "metadata": _STRING_MAP, "clusterSelector": _STRING_MAP,
                "submitterConfig": {"type": "object", "additionalProperties": False,
                                    "properties": {"backoffLimit": _INT}},
                "managedBy": {"enum": ["ray.io/kuberay-operator", "kueue.x-k8s.io/multikueue"]},
                "deletionStrategy": {"type": "object"}, "entrypoint": {"type": "string"},
                "runtimeEnvYAML": {"type": "string"}, "jobId": {"type": "string"},
                "submissionMode": {"enum": ["K8sJobMode", "HTTPMode", "InteractiveMode"]},
                "entrypointResources": {"type": "string"}, "entrypointNumCpus": {"type": "number"},
                "entrypointNumGpus": {"type": "number"}, "ttlSecondsAfterFinished": _INT,
                "shutdownAfterJobFinishes": {"type": "boolean"}, "suspend": {"type": "boolean"},
                "schedule": {"type": "string"},
            },
        },
    },
}  # fmt: skip


@pytest.fixture(scope="module", params=OVERLAYS)
def overlay(request, kustomize) -> tuple[str, list[dict]]:
    return request.param, kustomize(K8S / "overlays" / request.param)


@pytest.fixture(scope="module")
def rendered(kustomize) -> dict[str, list[dict]]:
    return {name: kustomize(K8S / "overlays" / name) for name in OVERLAYS}


def by_kind(objects: list[dict], kind: str) -> dict[str, dict]:
    return {o["metadata"]["name"]: o for o in objects if o["kind"] == kind}


def pod_templates(obj: dict) -> list[dict]:
    """Every pod template of a workload, KubeRay's head and worker groups included."""
    if obj["kind"] in ("Deployment", "StatefulSet", "Job"):
        return [obj["spec"]["template"]]
    if obj["kind"] == "RayJob":
        cluster = obj["spec"]["rayClusterSpec"]
        return [cluster["headGroupSpec"]["template"]] + [g["template"] for g in cluster["workerGroupSpecs"]]
    return []


def containers(obj: dict) -> list[dict]:
    return [
        c
        for t in pod_templates(obj)
        for key in ("initContainers", "containers")
        for c in t["spec"].get(key, [])
    ]


def test_kubernetes_objects_follow_the_kubernetes_schema(overlay, kubernetes_version):
    name, objects = overlay
    core = [o for o in objects if o["kind"] not in KUBERAY_KINDS]
    assert len(core) >= 15
    for obj in core:
        try:
            kubernetes_validate.validate(obj, kubernetes_version, strict=True)
        except kubernetes_validate.ValidationError as exc:
            pytest.fail(f"{name}: {obj['kind']}/{obj['metadata']['name']}: {list(exc.path)}: {exc.message}")


def test_schema_validation_can_fail(kubernetes_version):
    deployment = {"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "x"},
                  "spec": {"selector": {}, "template": {"spec": {"containers": [{"name": "x", "imag": "y"}]}}}}  # fmt: skip
    with pytest.raises(kubernetes_validate.ValidationError):
        kubernetes_validate.validate(deployment, kubernetes_version, strict=True)


def test_rayjob_has_the_documented_kuberay_fields_and_valid_pod_templates(overlay, kubernetes_version):
    name, objects = overlay
    jobs = by_kind(objects, "RayJob")
    assert set(jobs) == {"reelrl-train"} and not by_kind(objects, "RayCluster")
    job = jobs["reelrl-train"]
    jsonschema.validate(job, RAY_JOB)
    spec = job["spec"]
    assert spec["shutdownAfterJobFinishes"] is True and spec["submissionMode"] == "K8sJobMode"
    assert spec["suspend"] is True  # started on purpose, once its config is in place
    cluster = spec["rayClusterSpec"]
    assert cluster["workerGroupSpecs"], "no worker group"
    for group in cluster["workerGroupSpecs"]:
        assert group["minReplicas"] <= group["replicas"] <= group["maxReplicas"]
    for template in pod_templates(job):
        pod_template = {
            "apiVersion": "v1",
            "kind": "PodTemplate",
            "metadata": {"name": "t"},
            "template": template,
        }
        try:
            kubernetes_validate.validate(pod_template, kubernetes_version, strict=True)
        except kubernetes_validate.ValidationError as exc:
            pytest.fail(f"{name}: RayJob pod template: {list(exc.path)}: {exc.message}")


def test_ray_version_is_the_pinned_ray(rendered):
    deps = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["optional-dependencies"]
    pinned = {re.sub(r"\[.*\]", "", r.partition("==")[0]): r.partition("==")[2] for r in deps["trainer"]}
    for objects in rendered.values():
        assert (
            by_kind(objects, "RayJob")["reelrl-train"]["spec"]["rayClusterSpec"]["rayVersion"]
            == pinned["ray"]
        )


def test_every_command_exists_in_the_cli(overlay, split_shell, check_command):
    name, objects = overlay
    checked = set()
    for obj in objects:
        lines = []
        for container in containers(obj):
            if "command" in container:
                lines.append(container["command"] + container.get("args", []))
            for probe in ("livenessProbe", "readinessProbe", "startupProbe"):
                if "exec" in container.get(probe, {}):
                    lines.append(container[probe]["exec"]["command"])
        for argv in lines:
            assert check_command(argv) == [], f"{name}: {obj['kind']}/{obj['metadata']['name']}"
            checked.add(" ".join(argv[:3]))
        if obj["kind"] == "RayJob":
            cluster = obj["spec"]["rayClusterSpec"]
            for command in split_shell(obj["spec"]["entrypoint"]):
                assert check_command(command) == []
                checked.add(" ".join(command[:2]))
            # KubeRay turns rayStartParams into `ray start --key=value` options.
            groups = [(["--head"], cluster["headGroupSpec"])] + [([], g) for g in cluster["workerGroupSpecs"]]
            for head, group in groups:
                params = [f"--{key}={value}" for key, value in group["rayStartParams"].items()]
                assert check_command(["ray", "start", *head, *params]) == []
    for role in ("reelrl serve api", "reelrl serve reward", "reelrl worker preprocess", "reelrl worker eval",
                 "reelrl worker train", "reelrl db upgrade", "reelrl train"):  # fmt: skip
        assert role in checked


def test_every_reelrl_variable_is_a_setting_with_a_valid_value(
    overlay, settings_fields, reelrl_home, monkeypatch
):
    name, objects = overlay
    config = by_kind(objects, "ConfigMap")["reelrl-config"]["data"]
    for obj in objects:
        for container in containers(obj):
            environment = {}
            for source in container.get("envFrom", []):
                if "configMapRef" in source:
                    assert source["configMapRef"]["name"] == "reelrl-config"
                    environment.update(config)
            environment.update({e["name"]: e["value"] for e in container.get("env", []) if "value" in e})
            ours = {key: value for key, value in environment.items() if key.startswith("REELRL_")}
            with monkeypatch.context() as patch:
                for key, value in ours.items():
                    assert key in settings_fields, f"{name}: {key} is not a setting"
                    patch.setenv(key, value)
                for cls in {settings_fields[key][0] for key in ours}:
                    cls()


def test_secrets_are_referenced_never_written(rendered):
    documented = (ROOT / "docs" / "deploy.md").read_text()
    for name, objects in rendered.items():
        assert not by_kind(objects, "Secret"), f"{name}: a Secret in the manifests"
        text = json.dumps(objects)
        for secret in set(re.findall(r'"(?:secretRef|secretKeyRef)": \{[^}]*"name": "([^"]+)"', text)):
            created = rf"kubectl (?:-n \S+ )?create secret generic {secret} "
            assert re.search(created, documented), f"docs/deploy.md does not say how to create {secret}"
    for key in ("REELRL_DATABASE_URL", "REELRL_BROKER_URL"):
        assert f"--from-literal={key}=" in documented


def test_docs_name_the_validated_kubernetes_version(kubernetes_version):
    assert f"Kubernetes {kubernetes_version}" in (ROOT / "docs" / "deploy.md").read_text()


def test_services_select_pods_and_carry_scrape_annotations(overlay):
    _, objects = overlay
    pods = [t["metadata"].get("labels", {}) for o in objects for t in pod_templates(o)]
    for service in by_kind(objects, "Service").values():
        annotations = service["metadata"].get("annotations", {})
        assert annotations.get("prometheus.io/scrape") in ("true", "false"), service["metadata"]["name"]
        if service["spec"].get("type") == "ExternalName":
            continue
        selector = service["spec"]["selector"]
        assert any(selector.items() <= labels.items() for labels in pods), (
            f"{service['metadata']['name']} selects nothing"
        )
        if annotations["prometheus.io/scrape"] == "true":
            assert int(annotations["prometheus.io/port"]) in [p["port"] for p in service["spec"]["ports"]]
    for workload in [*by_kind(objects, "Deployment").values()]:
        template = workload["spec"]["template"]
        assert workload["spec"]["selector"]["matchLabels"].items() <= template["metadata"]["labels"].items()
        annotations = template["metadata"]["annotations"]
        assert annotations["prometheus.io/scrape"] == "true", workload["metadata"]["name"]
        ports = [p["containerPort"] for c in template["spec"]["containers"] for p in c.get("ports", [])]
        assert int(annotations["prometheus.io/port"]) in ports, workload["metadata"]["name"]


def test_frame_store_is_one_read_write_many_volume_at_the_configured_root(overlay):
    name, objects = overlay
    claims = by_kind(objects, "PersistentVolumeClaim")
    assert claims["reelrl-frames"]["spec"]["accessModes"] == ["ReadWriteMany"]
    root = by_kind(objects, "ConfigMap")["reelrl-config"]["data"]["REELRL_FRAME_ROOT"]
    mounting = set()
    for obj in objects:
        for template in pod_templates(obj):
            volumes = {v["name"]: v for v in template["spec"].get("volumes", [])}
            for container in template["spec"]["containers"]:
                for mount in container.get("volumeMounts", []):
                    if mount["name"] not in volumes:  # a StatefulSet's own claim template
                        continue
                    claim = volumes[mount["name"]].get("persistentVolumeClaim", {}).get("claimName")
                    assert claim is None or claim in claims, f"{name}: unknown claim {claim}"
                    if claim == "reelrl-frames":
                        assert mount["mountPath"] == root
                        mounting.add(obj["metadata"]["name"])
    assert {"reelrl-preprocess", "reelrl-eval", "reelrl-train-worker", "reelrl-train"} <= mounting


def test_reward_autoscales_on_cpu_requests(overlay):
    _, objects = overlay
    hpa = by_kind(objects, "HorizontalPodAutoscaler")["reelrl-reward"]
    target = by_kind(objects, "Deployment")[hpa["spec"]["scaleTargetRef"]["name"]]
    assert target["metadata"]["name"] == "reelrl-reward"
    assert hpa["spec"]["minReplicas"] < hpa["spec"]["maxReplicas"]
    assert [m["resource"]["name"] for m in hpa["spec"]["metrics"]] == ["cpu"]
    assert all("cpu" in c["resources"]["requests"] for c in target["spec"]["template"]["spec"]["containers"])


def test_dev_runs_its_own_database_and_broker_and_gpu_points_outside(rendered):
    assert set(by_kind(rendered["dev"], "StatefulSet")) == {"postgres", "redis"}
    assert not by_kind(rendered["gpu"], "StatefulSet")
    external = {
        n for n, s in by_kind(rendered["gpu"], "Service").items() if s["spec"].get("type") == "ExternalName"
    }
    assert external == {"postgres", "redis"}


def test_gpus_are_requested_in_the_gpu_overlay_only(rendered):
    def gpu_users(objects: list[dict]) -> set[str]:
        users = set()
        for obj in objects:
            for template in pod_templates(obj):
                for container in template["spec"]["containers"]:
                    limits = container.get("resources", {}).get("limits", {})
                    if "nvidia.com/gpu" in limits:
                        assert container["resources"]["requests"].get("nvidia.com/gpu") in (
                            None,
                            limits["nvidia.com/gpu"],
                        )
                        users.add(f"{obj['metadata']['name']}/{container['name']}")
        return users

    assert gpu_users(rendered["dev"]) == set()
    assert gpu_users(rendered["gpu"]) == {
        "reelrl-eval/eval",
        "reelrl-train-worker/train-worker",
        "reelrl-train/ray-worker",
    }
    images = {c["image"] for o in rendered["gpu"] for c in containers(o) if c["image"].startswith("reelrl")}
    assert images == {"reelrl:cuda"}
