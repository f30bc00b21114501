"""deploy/kubernetes/ holds manifests no cluster runs here: each one is checked against the
Kubernetes 1.37 schemas (strict: an unknown or misspelt field fails), KubeRay's RayCluster by
its required fields with its pod templates against the same schemas, and every `envharness`
command line in them against the real command-line parser."""

from __future__ import annotations

import argparse
from pathlib import Path

import kubernetes_validate
import pytest
import yaml

DEPLOY = Path(__file__).resolve().parents[1] / "deploy" / "kubernetes"
K8S_VERSION = "1.37.0"


def documents() -> list[dict]:
    docs = []
    for path in sorted(DEPLOY.glob("*.yaml")):
        docs += [d for d in yaml.safe_load_all(path.read_text()) if d]
    return docs


def pod_templates(doc: dict) -> list[dict]:
    if doc["kind"] == "Deployment":
        return [doc["spec"]["template"]]
    if doc["kind"] == "RayCluster":
        return [
            doc["spec"]["headGroupSpec"]["template"],
            *(g["template"] for g in doc["spec"]["workerGroupSpecs"]),
        ]
    return []


def test_the_manifests_are_there():
    kinds = sorted(d["kind"] for d in documents())
    assert kinds == ["Deployment", "Deployment", "NetworkPolicy", "RayCluster", "Service", "Service"]


@pytest.mark.parametrize(
    "doc",
    [d for d in documents() if d["apiVersion"] != "ray.io/v1"],
    ids=lambda d: f"{d['kind']}/{d['metadata']['name']}",
)
def test_core_resources_pass_the_kubernetes_schema(doc):
    kubernetes_validate.validate(doc, K8S_VERSION, strict=True)


def test_a_broken_manifest_fails_the_check():
    """The check can fail: a misspelt field and a missing container name are both caught."""
    deployment = next(d for d in documents() if d["kind"] == "Deployment")
    typo = yaml.safe_load(yaml.safe_dump(deployment))
    typo["spec"]["template"]["spec"]["containers"][0]["imagePullPolicyy"] = "Always"
    with pytest.raises(kubernetes_validate.ValidationError):
        kubernetes_validate.validate(typo, K8S_VERSION, strict=True)
    nameless = yaml.safe_load(yaml.safe_dump(deployment))
    del nameless["spec"]["template"]["spec"]["containers"][0]["name"]
    with pytest.raises(kubernetes_validate.ValidationError):
        kubernetes_validate.validate(nameless, K8S_VERSION, strict=True)


def test_the_ray_cluster_has_what_kuberay_requires_and_valid_pods():
    (cluster,) = [d for d in documents() if d["kind"] == "RayCluster"]
    spec = cluster["spec"]
    assert cluster["apiVersion"] == "ray.io/v1" and spec["rayVersion"]
    assert isinstance(spec["headGroupSpec"]["rayStartParams"], dict)
    for group in spec["workerGroupSpecs"]:
        assert group["groupName"] and isinstance(group["rayStartParams"], dict)
        assert group["minReplicas"] <= group["replicas"] <= group["maxReplicas"]
    for template in pod_templates(cluster):
        pod = {"apiVersion": "v1", "kind": "PodTemplate", "metadata": {"name": "check"}, "template": template}
        kubernetes_validate.validate(pod, K8S_VERSION, strict=True)
    import importlib.metadata

    assert spec["rayVersion"] == importlib.metadata.version("ray")  # the Ray envharness[ray] pins


def test_services_select_their_pods_and_servers_reach_the_browsers():
    docs = documents()
    deployments = {d["metadata"]["name"]: d for d in docs if d["kind"] == "Deployment"}
    for service in (d for d in docs if d["kind"] == "Service"):
        labels = deployments[service["metadata"]["name"]]["spec"]["template"]["metadata"]["labels"]
        assert service["spec"]["selector"].items() <= labels.items()
        assert service["spec"]["clusterIP"] == "None"  # headless: one record per pod
    policy = next(d for d in docs if d["kind"] == "NetworkPolicy")
    admitted = policy["spec"]["ingress"][0]["from"][0]["podSelector"]["matchLabels"]
    clients = [
        t
        for d in docs
        for t in pod_templates(d)
        if "ENVHARNESS_OPTION_BROWSER" in str(t) or "browser=dns" in str(t)
    ]
    assert len(clients) == 2 and all(admitted.items() <= t["metadata"]["labels"].items() for t in clients)


def test_every_envharness_command_line_parses():
    import importlib

    from envharness.cli import all_commands

    lines = [
        c["command"]
        for d in documents()
        for t in pod_templates(d)
        for c in t["spec"]["containers"]
        if "command" in c
    ]
    assert len(lines) == 2
    for line in lines:
        assert line[0] == "envharness"
        parser = argparse.ArgumentParser()
        importlib.import_module(all_commands()[line[1]][0]).add_arguments(
            parser
        )  # the browser's own command too
        args = parser.parse_args(line[2:])
        if line[1] == "serve":
            assert "browser=dns://envharness-browser:9222" in args.option and args.host == "0.0.0.0"
        else:
            assert (args.host, args.port) == ("0.0.0.0", 9222)
