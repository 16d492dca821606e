"""deploy/kubernetes/: the manifests agree with each other (names, ports, selectors) and the
fleet file they carry is valid. No cluster runs here (docs/kubernetes.md)."""

from __future__ import annotations

import shlex
from pathlib import Path
from typing import Any

import yaml

from fleetgate.cli import build_parser
from fleetgate.fleet import build_fleet
from tests.harness import fleet_config

ROOT = Path(__file__).resolve().parents[2] / "deploy" / "kubernetes"


def _objects() -> dict[tuple[str, str], dict[str, Any]]:
    found = {}
    for path in sorted(ROOT.glob("*.yaml")):
        for doc in yaml.safe_load_all(path.read_text()):
            if doc:
                found[(doc["kind"], doc["metadata"]["name"])] = doc
    return found


def _matches(selector: dict[str, str], labels: dict[str, str]) -> bool:
    return all(labels.get(k) == v for k, v in selector.items())


def test_the_manifests_agree():
    objects = _objects()
    pool = objects[("InferencePool", "qwen-pool")]
    assert pool["apiVersion"] == "inference.networking.k8s.io/v1"
    picker_ref = pool["spec"]["endpointPickerRef"]

    # the pool's picker is the fleetgate Service, on its gRPC port, which reaches the pods
    service = objects[("Service", picker_ref["name"])]
    grpc_port = next(p for p in service["spec"]["ports"] if p["name"] == "grpc")
    assert grpc_port["port"] == picker_ref["port"]["number"]
    epp = objects[("Deployment", "fleetgate-epp")]
    pod = epp["spec"]["template"]
    assert _matches(service["spec"]["selector"], pod["metadata"]["labels"])
    assert _matches(epp["spec"]["selector"]["matchLabels"], pod["metadata"]["labels"])
    container = pod["spec"]["containers"][0]
    ports = {p["name"]: p["containerPort"] for p in container["ports"]}
    assert ports["grpc"] == grpc_port["targetPort"]
    http_port = next(p for p in service["spec"]["ports"] if p["name"] == "http")
    assert ports["http"] == http_port["targetPort"]

    # the container's command line is one `fleetgate epp` accepts, on the same ports
    args = build_parser().parse_args(container["args"])
    assert args.command == "epp"
    assert args.port == ports["grpc"] and args.http_port == ports["http"]
    assert container["readinessProbe"]["grpc"]["port"] == ports["grpc"]

    # the fleet file comes from the ConfigMap, mounted where --config says
    mount = next(m for m in container["volumeMounts"] if m["name"] == "fleet")
    volume = next(v for v in pod["spec"]["volumes"] if v["name"] == "fleet")
    config_map = objects[("ConfigMap", volume["configMap"]["name"])]
    name = Path(args.config).name
    assert str(Path(mount["mountPath"]) / name) == args.config
    fleet = build_fleet(fleet_config(yaml.safe_load(config_map["data"][name])))

    # the pool's pods are the model servers, on the port the fleet's endpoints name
    servers = objects[("Deployment", "vllm-qwen")]
    server_pod = servers["spec"]["template"]
    assert _matches(pool["spec"]["selector"]["matchLabels"], server_pod["metadata"]["labels"])
    server_port = server_pod["spec"]["containers"][0]["ports"][0]["containerPort"]
    assert [p["number"] for p in pool["spec"]["targetPorts"]] == [server_port]
    headless = objects[("Service", "vllm-qwen")]
    assert headless["spec"]["clusterIP"] == "None"
    assert _matches(headless["spec"]["selector"], server_pod["metadata"]["labels"])
    endpoints = fleet.config.providers[0].endpoints
    assert endpoints == [f"{headless['metadata']['name']}.default.svc.cluster.local:{server_port}"]
    assert shlex.join(servers["spec"]["template"]["spec"]["containers"][0]["args"]).count(
        str(server_port)
    )

    # the route sends its traffic to the pool
    route = objects[("HTTPRoute", "qwen-route")]
    backends = [b for rule in route["spec"]["rules"] for b in rule["backendRefs"]]
    assert backends == [
        {"group": "inference.networking.k8s.io", "kind": "InferencePool", "name": "qwen-pool"}
    ]
