"""The shipped balancer configurations are valid as they stand: HAProxy's by `haproxy -c`, the
Kubernetes manifests by kubernetes-validate's bundled schemas (offline), and the HTTPRoute, for
which no bundled schema exists, by what it must do: send each pod's minted ids to that pod."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path
from typing import Any, Final

import kubernetes_validate
import yaml

from router.sessions.table import mint_session_id
from tests.support import ROOT
from tests.support.balancer import find_binary

DEPLOY: Final = ROOT / "deploy" / "cluster"
KUBERNETES: Final = DEPLOY / "kubernetes"
KUBERNETES_VERSION: Final = "1.30.0"  # a release every supported cluster has reached
CHECK_TIMEOUT: Final = 30.0


def _documents(path: Path) -> list[dict[str, Any]]:
    return [doc for doc in yaml.safe_load_all(path.read_text()) if doc]


def _manifests() -> dict[str, list[dict[str, Any]]]:
    by_kind: dict[str, list[dict[str, Any]]] = {}
    for path in sorted(KUBERNETES.glob("*.yaml")):
        for doc in _documents(path):
            by_kind.setdefault(doc["kind"], []).append(doc)
    return by_kind


def test_haproxy_config_is_valid() -> None:
    haproxy = find_binary("haproxy", "/usr/sbin/haproxy")
    check = subprocess.run(
        [haproxy, "-c", "-f", str(DEPLOY / "haproxy.cfg")], capture_output=True, text=True,
        timeout=CHECK_TIMEOUT, check=False,
    )  # fmt: skip
    assert check.returncode == 0, check.stdout + check.stderr


def test_kubernetes_manifests_pass_schema_validation_offline() -> None:
    checked = 0
    for path in sorted(KUBERNETES.glob("*.yaml")):
        for doc in _documents(path):
            if doc["apiVersion"].startswith("gateway.networking.k8s.io/"):
                continue  # a CRD: no bundled schema; see the next test
            kubernetes_validate.validate(doc, KUBERNETES_VERSION, strict=True)
            checked += 1
    assert checked >= 3


def test_httproute_sends_each_pods_sessions_to_that_pod() -> None:
    manifests = _manifests()
    statefulset = manifests["StatefulSet"][0]
    name, replicas = statefulset["metadata"]["name"], statefulset["spec"]["replicas"]
    services = {s["metadata"]["name"]: s for s in manifests["Service"]}
    container = statefulset["spec"]["template"]["spec"]["containers"][0]
    assert "--node-id=$(POD_NAME)" in container["args"]
    peers = {a.removeprefix("--cluster-node=") for a in container["args"] if a.startswith("--cluster-node=")}
    service_name = statefulset["spec"]["serviceName"]
    assert peers == {f"http://{name}-{i}.{service_name}:4000" for i in range(replicas)}  # one per replica
    route = manifests["HTTPRoute"][0]
    rules = route["spec"]["rules"]

    def backend_for(session_id: str | None) -> str:
        for rule in rules:  # Gateway API: equal-precedence rules are taken in order
            for match in rule["matches"]:
                headers = match.get("headers", [])
                if all(
                    session_id is not None and re.fullmatch(h["value"], session_id)
                    for h in headers if h["name"].lower() == "mcp-session-id"
                ):  # fmt: skip
                    return str(rule["backendRefs"][0]["name"])
        raise AssertionError(f"no rule for {session_id}")

    for index in range(replicas):
        pod = f"{name}-{index}"
        service = services[backend_for(mint_session_id(pod))]
        assert service["spec"]["selector"] == {"statefulset.kubernetes.io/pod-name": pod}
    assert services[backend_for(None)]["spec"]["selector"] == statefulset["spec"]["selector"]["matchLabels"]
    assert backend_for(mint_session_id(f"{name}-{replicas}0")) == backend_for(None)  # no prefix collision
    assert services[statefulset["spec"]["serviceName"]]["spec"]["clusterIP"] == "None"
    assert all(rule["timeouts"]["request"] == "0s" for rule in rules)  # SSE streams are long
