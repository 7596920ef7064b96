"""deploy/kubernetes: core kinds pass kubernetes-validate; custom resources keep their shape."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import kubernetes_validate
import pytest
import yaml

from gpu_exporter.config import DEFAULT_PORT
from tests.support.exporter import REPO, run_exporter

KUBERNETES = REPO / "deploy" / "kubernetes"
# the oldest Kubernetes still commonly run, and the newest the validator knows
VERSIONS = ("1.27.0", kubernetes_validate.latest_version())
CORE_KINDS = {"Namespace", "DaemonSet", "Service"}
CUSTOM_KINDS = {"ServiceMonitor", "PrometheusRule"}
RSS_TARGET_MIB = 40
CPU_TARGET_CORES = 0.01


def documents(path: Path) -> list[dict[str, Any]]:
    return [d for d in yaml.safe_load_all(path.read_text()) if d]


def manifests() -> dict[str, dict[str, Any]]:
    """{kind: manifest} of every resource the kustomization lists."""
    kustomization = yaml.safe_load((KUBERNETES / "kustomization.yaml").read_text())
    out = {}
    for resource in kustomization["resources"]:
        for doc in documents(KUBERNETES / resource):
            assert doc["kind"] not in out, f"two {doc['kind']}s"
            out[doc["kind"]] = doc
    return out


def daemonset() -> dict[str, Any]:
    return manifests()["DaemonSet"]


def pod_spec() -> dict[str, Any]:
    return dict(daemonset()["spec"]["template"]["spec"])


def container() -> dict[str, Any]:
    (only,) = pod_spec()["containers"]
    return dict(only)


def test_kustomization_lists_every_manifest_and_the_five_kinds() -> None:
    kustomization = yaml.safe_load((KUBERNETES / "kustomization.yaml").read_text())
    assert kustomization["kind"] == "Kustomization"
    files = {p.name for p in KUBERNETES.glob("*.yaml")} - {"kustomization.yaml"}
    assert set(kustomization["resources"]) == files
    assert set(manifests()) == CORE_KINDS | CUSTOM_KINDS
    (image,) = kustomization["images"]
    assert image["name"] == container()["image"], "kustomize would not rewrite the image"


@pytest.mark.parametrize("version", VERSIONS)
@pytest.mark.parametrize("kind", sorted(CORE_KINDS))
def test_core_kinds_pass_kubernetes_validate_strictly(kind: str, version: str) -> None:
    kubernetes_validate.validate(manifests()[kind], version, True)


def test_kubernetes_validate_rejects_a_misspelt_field() -> None:
    broken = daemonset()
    broken["spec"]["template"]["spec"]["hostPid"] = True
    with pytest.raises(kubernetes_validate.ValidationError):
        kubernetes_validate.validate(broken, VERSIONS[-1], True)


def test_daemonset_runs_on_gpu_nodes_with_the_host_pid_namespace() -> None:
    spec = pod_spec()
    assert spec["runtimeClassName"] == "nvidia"
    assert spec["hostPID"] is True
    assert spec["nodeSelector"], "no node selector for GPU nodes"
    assert any(t.get("key") == "nvidia.com/gpu" for t in spec["tolerations"])
    assert spec["automountServiceAccountToken"] is False
    assert spec["priorityClassName"] == "system-node-critical"
    assert spec.get("hostNetwork", False) is False


def test_container_is_locked_down() -> None:
    context = container()["securityContext"]
    assert context["readOnlyRootFilesystem"] is True
    assert context["allowPrivilegeEscalation"] is False
    assert context["capabilities"]["drop"] == ["ALL"]
    # one back, for the kernel log's Xid lines, with /dev/kmsg mounted read-only
    assert context["capabilities"]["add"] == ["SYSLOG"]
    kmsg = [m for m in container()["volumeMounts"] if m["mountPath"] == "/dev/kmsg"]
    assert [m.get("readOnly") for m in kmsg] == [True]
    assert context.get("privileged", False) is False
    # uid 0, for the kubelet's pod-resources socket (root's, 0600) and nothing more: no
    # other capability, no escalation; the image itself runs as a non-root user
    pod = pod_spec()["securityContext"]
    assert pod["runAsUser"] == 0 and "--collector.kubernetes" in container()["args"]
    dockerfile_user = re.search(r"^USER (\d+)", (REPO / "Dockerfile").read_text(), re.M)
    assert dockerfile_user and int(dockerfile_user.group(1)) != 0


def test_the_kubelets_socket_and_log_layout_are_mounted_read_only() -> None:
    mounts = {m["name"]: m for m in container()["volumeMounts"]}
    volumes = {v["name"]: v for v in pod_spec()["volumes"]}
    wanted = {
        "/var/lib/kubelet/pod-resources": "/var/lib/kubelet/pod-resources",
        "/var/log/pods": "/var/log/pods",
        "/var/log/containers": "/var/log/containers",
        "/dev/kmsg": "/dev/kmsg",  # the kernel log's Xid lines
    }
    found = {
        m["mountPath"]: volumes[name]["hostPath"]["path"]
        for name, m in mounts.items()
        if "hostPath" in volumes[name]
    }
    assert found == wanted
    assert all(m.get("readOnly") is True for m in mounts.values() if m["mountPath"] in wanted)
    args = container()["args"]
    assert "--collector.kubernetes" in args
    # the program's defaults are these paths: no flag needed
    result = run_exporter([*args, "--simulate", "1", "--once"])
    assert result.returncode == 0, result.stderr
    assert "gpu_exporter_kubernetes_up 0" in result.stdout
    assert "/var/lib/kubelet/pod-resources/kubelet.sock does not exist" in result.stderr


def test_liveness_is_livez_and_readiness_is_healthz_on_the_metrics_port() -> None:
    c = container()
    (port,) = c["ports"]
    assert port["containerPort"] == DEFAULT_PORT
    paths = {probe: c[probe]["httpGet"]["path"] for probe in ("livenessProbe", "readinessProbe")}
    # a node whose driver is not loaded yet is not ready, but it is not restart-looped
    assert paths == {"livenessProbe": "/livez", "readinessProbe": "/healthz"}
    for probe in ("livenessProbe", "readinessProbe"):
        assert c[probe]["httpGet"]["port"] in (port["name"], port["containerPort"])
    # /livez already allows 3 intervals plus a read deadline; a minute more of failures
    liveness = c["livenessProbe"]
    assert liveness["periodSeconds"] * liveness["failureThreshold"] >= 60


def test_the_namespace_is_created_with_the_rest() -> None:
    kustomization = yaml.safe_load((KUBERNETES / "kustomization.yaml").read_text())
    namespace = manifests()["Namespace"]
    assert namespace["metadata"]["name"] == kustomization["namespace"]
    assert kustomization["resources"][0] == "namespace.yaml"  # applied first


def test_container_arguments_are_accepted_by_the_program() -> None:
    args = container()["args"]
    assert f"--web.listen-address=:{DEFAULT_PORT}" in args
    result = run_exporter([*args, "--simulate", "1", "--once"])
    assert result.returncode == 0, result.stderr


def test_dcgm_compat_is_an_overlay_not_the_default() -> None:
    """deploy/kubernetes-compat-dcgm adds --compat.dcgm to the base's arguments, and the
    node's name reaches the Hostname label through NODE_NAME."""
    assert "--compat.dcgm" not in container()["args"]
    assert "# - --compat.dcgm" in (KUBERNETES / "daemonset.yaml").read_text()
    overlay = REPO / "deploy" / "kubernetes-compat-dcgm"
    kustomization = yaml.safe_load((overlay / "kustomization.yaml").read_text())
    assert kustomization["resources"] == ["../kubernetes"]
    (patch,) = kustomization["patches"]
    assert patch["target"] == {"kind": "DaemonSet", "name": daemonset()["metadata"]["name"]}
    (operation,) = yaml.safe_load((overlay / patch["path"]).read_text())
    assert operation["op"] == "add"
    assert operation["path"] == "/spec/template/spec/containers/0/args/-"
    args = [*container()["args"], operation["value"]]
    env = {e["name"]: e for e in container()["env"]}
    assert env["NODE_NAME"]["valueFrom"] == {"fieldRef": {"fieldPath": "spec.nodeName"}}
    result = run_exporter([*args, "--simulate", "1", "--once"], env={"NODE_NAME": "gpu-node-7"})
    assert result.returncode == 0, result.stderr
    assert "DCGM_FI_DEV_GPU_TEMP{" in result.stdout and 'Hostname="gpu-node-7"' in result.stdout


def quantity(value: str) -> float:
    """A Kubernetes quantity in base units (cores, bytes)."""
    units = {"m": 1e-3, "Ki": 2**10, "Mi": 2**20, "Gi": 2**30, "": 1}
    number, unit = re.fullmatch(r"([\d.]+)([A-Za-z]*)", str(value)).groups()  # type: ignore[union-attr]
    return float(number) * units[unit]


def bench_figure(pattern: str) -> float | None:
    """A figure from benchmarks/README.md, when the benchmark has been run."""
    readme = REPO / "benchmarks" / "README.md"
    match = re.search(pattern, readme.read_text()) if readme.exists() else None
    return float(match.group(1)) if match else None


def test_resources_cover_the_benchmark_figures_and_targets() -> None:
    resources = container()["resources"]
    requests, limits = resources["requests"], resources["limits"]
    rss_mib = bench_figure(r"resident memory after warm-up \| ([\d.]+) MiB")
    cpu_percent = bench_figure(r"sampler CPU[^|]*\| ([\d.]+)% of one core")
    rss = max(rss_mib or 0, RSS_TARGET_MIB) * 2**20
    cpu = max((cpu_percent or 0) / 100, CPU_TARGET_CORES)
    assert quantity(requests["memory"]) >= rss
    assert quantity(limits["memory"]) >= 2 * rss, "too tight: a scrape burst would OOM-kill"
    assert quantity(limits["memory"]) <= 8 * rss, "so loose that a leak goes unnoticed"
    assert quantity(requests["cpu"]) >= cpu
    assert quantity(limits["cpu"]) >= 10 * quantity(requests["cpu"])
    text = (KUBERNETES / "daemonset.yaml").read_text()
    assert "make bench" in text and "40 MiB" in text, "the figures behind the numbers"


def test_service_selects_the_daemonset_pods_and_names_the_job() -> None:
    service = manifests()["Service"]
    pod_labels = daemonset()["spec"]["template"]["metadata"]["labels"]
    assert service["spec"]["selector"].items() <= pod_labels.items()
    assert daemonset()["spec"]["selector"]["matchLabels"].items() <= pod_labels.items()
    (port,) = service["spec"]["ports"]
    assert port["targetPort"] == container()["ports"][0]["name"]
    # the alert rules select job="gpu-exporter": the ServiceMonitor's job is the Service name
    assert service["metadata"]["name"] == "gpu-exporter"
    assert 'job="gpu-exporter"' in (REPO / "deploy/prometheus/rules/gpu-alerts.yml").read_text()


# The Prometheus Operator's CRDs are not in kubernetes-validate; their structure is
# checked against the fields of monitoring.coreos.com/v1 that these manifests use.
ENDPOINT_FIELDS = {
    "port",
    "targetPort",
    "path",
    "scheme",
    "interval",
    "scrapeTimeout",
    "honorLabels",
    "relabelings",
    "metricRelabelings",
    "tlsConfig",
    "basicAuth",
}
RELABEL_FIELDS = {"sourceLabels", "separator", "targetLabel", "regex", "replacement", "action"}
RELABEL_ACTIONS = {"replace", "keep", "drop", "labelmap", "labeldrop", "labelkeep", "hashmod"}
DURATION = re.compile(r"^(\d+(ms|s|m|h))+$")


def test_servicemonitor_structure() -> None:
    monitor = manifests()["ServiceMonitor"]
    service = manifests()["Service"]
    assert monitor["apiVersion"] == "monitoring.coreos.com/v1"
    assert set(monitor["spec"]) <= {"selector", "endpoints", "jobLabel", "namespaceSelector"}
    assert (
        monitor["spec"]["selector"]["matchLabels"].items() <= service["metadata"]["labels"].items()
    )
    port_names = {p["name"] for p in service["spec"]["ports"]}
    for endpoint in monitor["spec"]["endpoints"]:
        assert set(endpoint) <= ENDPOINT_FIELDS, set(endpoint) - ENDPOINT_FIELDS
        assert endpoint["port"] in port_names
        assert endpoint.get("path", "/metrics") == "/metrics"
        for key in ("interval", "scrapeTimeout"):
            assert DURATION.match(endpoint[key]), endpoint[key]
        for relabel in endpoint.get("relabelings", []):
            assert set(relabel) <= RELABEL_FIELDS
            assert relabel.get("action", "replace") in RELABEL_ACTIONS
            assert isinstance(relabel.get("sourceLabels", []), list)


def test_prometheusrule_structure() -> None:
    rule = manifests()["PrometheusRule"]
    assert rule["apiVersion"] == "monitoring.coreos.com/v1"
    assert set(rule["spec"]) == {"groups"}
    names = [g["name"] for g in rule["spec"]["groups"]]
    assert len(names) == len(set(names)), "duplicate group names"
    for group in rule["spec"]["groups"]:
        assert set(group) <= {"name", "interval", "rules"}
        for r in group["rules"]:
            assert ("alert" in r) != ("record" in r)
            allowed = (
                {"alert", "expr", "for", "labels", "annotations"}
                if "alert" in r
                else {
                    "record",
                    "expr",
                    "labels",
                }
            )
            assert set(r) <= allowed, set(r) - allowed
            assert isinstance(r["expr"], str) and r["expr"].strip()


def test_servicemonitor_keeps_the_owners_labels_and_keys_gpus_by_node() -> None:
    """honorLabels: the exporter's namespace/pod/container name a GPU's owners, and the
    operator's target labels would rename them exported_* (docs/kubernetes.md); instance
    is the node's name, so that a rollout's new pod continues a GPU's series.
    tests/test_chargeback_e2e.py scrapes through the operator's rendering of it."""
    (endpoint,) = manifests()["ServiceMonitor"]["spec"]["endpoints"]
    assert endpoint["honorLabels"] is True
    targets = {
        r["targetLabel"]: r["sourceLabels"]
        for r in endpoint["relabelings"]
        if r.get("action", "replace") == "replace"
    }
    assert targets["instance"] == targets["node"] == ["__meta_kubernetes_pod_node_name"]
