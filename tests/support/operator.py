"""The scrape configuration the Prometheus Operator generates for our ServiceMonitor, so
that a real Prometheus can scrape the exporter as the operator makes it scrape.

The shape follows the operator's own golden files for a ServiceMonitor endpoint with the
`endpoints` role (prometheus-operator, pkg/prometheus/testdata/*.golden): the selector's
keep actions, the port's, the `node`/`pod`/`namespace`/`service`/`container` target labels
from the endpoint's pod, `job` from the Service's name, `endpoint`, then the endpoint's own
relabelings, then the hashmod sharding (`$(SHARD)` is 0 with one shard). Kubernetes service
discovery is replaced by a static target carrying the `__meta_kubernetes_*` labels that
discovery would give the exporter's pod; the relabelling and `honor_labels` are the
operator's.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import yaml

from tests.support.exporter import REPO

KUBERNETES = REPO / "deploy" / "kubernetes"


def manifest(name: str) -> dict[str, Any]:
    return dict(yaml.safe_load((KUBERNETES / name).read_text()))


def _sanitize(name: str) -> str:
    """A Kubernetes label name as service discovery's meta label spells it."""
    return re.sub(r"[^a-zA-Z0-9_]", "_", name)


def _relabel(rule: dict[str, Any]) -> dict[str, Any]:
    """A ServiceMonitor relabeling (camelCase) as Prometheus' relabel_config."""
    names = {"sourceLabels": "source_labels", "targetLabel": "target_label"}
    out = {names.get(k, k): v for k, v in rule.items()}
    if "action" in out:
        out["action"] = str(out["action"]).lower()
    return out


def servicemonitor_scrape_config(
    monitor: dict[str, Any], namespace: str, index: int = 0
) -> dict[str, Any]:
    """The scrape config of endpoint `index` of `monitor` (in `namespace`), with the
    kubernetes_sd_configs left for the caller to replace."""
    endpoint = monitor["spec"]["endpoints"][index]
    relabel: list[dict[str, Any]] = [
        {"source_labels": ["job"], "target_label": "__tmp_prometheus_job_name"},
    ]
    for key, value in sorted(monitor["spec"]["selector"]["matchLabels"].items()):
        label = _sanitize(key)
        relabel.append(
            {
                "action": "keep",
                "source_labels": [
                    f"__meta_kubernetes_service_label_{label}",
                    f"__meta_kubernetes_service_labelpresent_{label}",
                ],
                "regex": f"({value});true",
            }
        )
    relabel += [
        {
            "action": "keep",
            "source_labels": ["__meta_kubernetes_endpoint_port_name"],
            "regex": endpoint["port"],
        },
        *(
            {
                "source_labels": [
                    "__meta_kubernetes_endpoint_address_target_kind",
                    "__meta_kubernetes_endpoint_address_target_name",
                ],
                "separator": ";",
                "regex": f"{kind};(.*)",
                "replacement": "${1}",
                "target_label": target,
            }
            for kind, target in (("Node", "node"), ("Pod", "pod"))
        ),
        {"source_labels": ["__meta_kubernetes_namespace"], "target_label": "namespace"},
        {"source_labels": ["__meta_kubernetes_service_name"], "target_label": "service"},
        {"source_labels": ["__meta_kubernetes_pod_name"], "target_label": "pod"},
        {"source_labels": ["__meta_kubernetes_pod_container_name"], "target_label": "container"},
        {
            "action": "drop",
            "source_labels": ["__meta_kubernetes_pod_phase"],
            "regex": "(Failed|Succeeded)",
        },
        {
            "source_labels": ["__meta_kubernetes_service_name"],
            "target_label": "job",
            "replacement": "${1}",
        },
        {"target_label": "endpoint", "replacement": endpoint["port"]},
        *(_relabel(r) for r in endpoint.get("relabelings", [])),
        {
            "source_labels": ["__address__", "__tmp_hash"],
            "target_label": "__tmp_hash",
            "regex": "(.+);",
            "replacement": "$1",
            "action": "replace",
        },
        {
            "source_labels": ["__tmp_hash"],
            "target_label": "__tmp_hash",
            "modulus": 1,
            "action": "hashmod",
        },
        {"source_labels": ["__tmp_hash"], "regex": "0", "action": "keep"},  # $(SHARD)
    ]
    name = monitor["metadata"]["name"]
    config: dict[str, Any] = {
        "job_name": f"serviceMonitor/{namespace}/{name}/{index}",
        "honor_labels": bool(endpoint.get("honorLabels", False)),
        "kubernetes_sd_configs": [{"role": "endpoints", "namespaces": {"names": [namespace]}}],
        "scrape_interval": endpoint.get("interval", "30s"),
        "scrape_timeout": endpoint.get("scrapeTimeout", "10s"),
        "metrics_path": endpoint.get("path", "/metrics"),
        "relabel_configs": relabel,
    }
    return config


def discovered_pod(
    address: str, service: dict[str, Any], namespace: str, pod: str, container: str, node: str
) -> dict[str, Any]:
    """A static target with the meta labels the `endpoints` role gives the address of
    `pod` behind `service`."""
    labels = {
        "__meta_kubernetes_namespace": namespace,
        "__meta_kubernetes_service_name": service["metadata"]["name"],
        "__meta_kubernetes_endpoint_port_name": service["spec"]["ports"][0]["name"],
        "__meta_kubernetes_endpoint_address_target_kind": "Pod",
        "__meta_kubernetes_endpoint_address_target_name": pod,
        "__meta_kubernetes_pod_name": pod,
        "__meta_kubernetes_pod_container_name": container,
        "__meta_kubernetes_pod_node_name": node,
        "__meta_kubernetes_pod_phase": "Running",
    }
    for key, value in service["metadata"].get("labels", {}).items():
        labels[f"__meta_kubernetes_service_label_{_sanitize(key)}"] = value
        labels[f"__meta_kubernetes_service_labelpresent_{_sanitize(key)}"] = "true"
    return {"targets": [address], "labels": labels}


def operator_scrape_config(
    address: str, pod: str, node: str, interval: str | None = None
) -> dict[str, Any]:
    """The shipped ServiceMonitor's scrape config, as the operator renders it, scraping
    `address` as the DaemonSet's pod `pod` on `node` (the scrape interval and timeout
    replaced by `interval` where given: tests run faster than the manifest)."""
    monitor, service = manifest("servicemonitor.yaml"), manifest("service.yaml")
    namespace = manifest("namespace.yaml")["metadata"]["name"]
    daemonset = manifest("daemonset.yaml")
    (container, *_) = daemonset["spec"]["template"]["spec"]["containers"]
    config = servicemonitor_scrape_config(monitor, namespace)
    del config["kubernetes_sd_configs"]
    config["static_configs"] = [
        discovered_pod(address, service, namespace, pod, container["name"], node)
    ]
    if interval is not None:
        config["scrape_interval"] = config["scrape_timeout"] = interval
    return config


def write_config(path: Path, config: dict[str, Any]) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(yaml.safe_dump(config, sort_keys=False))
    return path
