"""deploy/kubernetes/ holds manifests no cluster runs here: each one is checked against the
Kubernetes 1.37 schemas (strict: an unknown or misspelt field fails), KubeRay's RayCluster by
its required fields with its pod templates against the same schemas, every `envharness`
command line in them against the real command-line parser, and the environment server's
probes against the server started as its Deployment starts it."""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import time
from pathlib import Path

import httpx
import kubernetes_validate
import pytest
import yaml
from websockets.sync.client import connect

DEPLOY = Path(__file__).resolve().parents[1] / "deploy" / "kubernetes"
K8S_VERSION = "1.37.0"
CLI = [sys.executable, "-c", "import sys; from envharness.cli import main; sys.exit(main())"]


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


def server_container() -> dict:
    (deployment,) = [
        d for d in documents() if d["kind"] == "Deployment" and d["metadata"]["name"] == "envharness-env"
    ]
    (container,) = deployment["spec"]["template"]["spec"]["containers"]
    return container


def probe(container: dict, name: str, port: int) -> httpx.Response:
    """What the kubelet does for an `httpGet` probe: GET the path on the named port, with the
    probe's headers, Host the pod's address; it passes on a status from 200 to 399."""
    spec = container[name]["httpGet"]
    ports = {p["name"]: p["containerPort"] for p in container["ports"]}
    assert ports.get(spec["port"], spec["port"]) == 8000  # the port the command line listens on
    headers = {h["name"]: h["value"] for h in spec.get("httpHeaders", [])}
    return httpx.get(
        f"http://127.0.0.1:{port}{spec['path']}", headers={"Host": f"127.0.0.1:{port}", **headers}, timeout=30
    )


def start_as_the_manifest_does(tmp_path: Path, command: list[str]) -> tuple[subprocess.Popen, int]:
    """The container's command and environment (the token from its Secret), on loopback and a
    free port instead of 0.0.0.0:8000."""
    container = server_container()
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    for item in container["env"]:
        assert item["valueFrom"]["secretKeyRef"] == {"name": "envharness-token", "key": "token"}
        env[item["name"]] = "a-token-from-the-secret"
    args = [("127.0.0.1" if a == "0.0.0.0" else "0" if a == "8000" else a) for a in command[1:]]
    log = tmp_path / "serve.log"
    with open(log, "w") as out:
        proc = subprocess.Popen([*CLI, *args], stdout=out, stderr=subprocess.STDOUT, env=env)
    deadline = time.monotonic() + 120  # a hang guard only
    while "listening on" not in log.read_text():
        assert proc.poll() is None and time.monotonic() < deadline, log.read_text()
        time.sleep(0.1)
    return proc, int(re.search(r"listening on http://127\.0\.0\.1:(\d+)", log.read_text()).group(1))


def test_the_probes_pass_with_the_token_set_and_readiness_reports_a_full_server(tmp_path):
    container = server_container()
    proc, port = start_as_the_manifest_does(tmp_path, container["command"])
    try:
        for name in ("readinessProbe", "livenessProbe"):
            reply = probe(container, name, port)
            assert 200 <= reply.status_code < 400, (name, reply.status_code, reply.text)
            assert reply.json() in (
                {"status": "ready"},
                {"status": "healthy"},
            )  # nothing more without the token
        assert httpx.get(f"http://127.0.0.1:{port}/metadata").status_code == 401
    finally:
        proc.terminate()
        proc.wait(timeout=60)
    # the same command serving echo with one session: taken, the pod is not Ready but alive
    command = [a for a in container["command"] if not a.startswith("browser=")]
    command = ["echo" if a == "browsergym" else "1" if a == "64" else a for a in command if a != "--option"]
    proc, port = start_as_the_manifest_does(tmp_path, command)
    try:
        headers = {"Authorization": "Bearer a-token-from-the-secret"}
        with connect(f"ws://127.0.0.1:{port}/ws", additional_headers=headers, open_timeout=60) as ws:
            ws.send(json.dumps({"type": "reset"}))
            assert json.loads(ws.recv(timeout=60))["type"] == "observation"
            readiness = probe(container, "readinessProbe", port)
            assert readiness.status_code == 503 and readiness.json() == {"status": "full"}
            assert probe(container, "livenessProbe", port).status_code == 200
    finally:
        proc.terminate()
        proc.wait(timeout=60)
