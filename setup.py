"""What goes into the wheel and the sdist besides the code (the metadata is in pyproject.toml).

The repository keeps one copy of each shipped file where operators look for it: deploy/,
grafana/ and docs/alerts.md. Each of those folders is mapped here to a data-only package
under `gpu_exporter/shipped/` that mirrors the repository's paths, so a pip user finds
them with `gpu-exporter --print-config` and the exporter serves its runbooks at /runbooks
(`gpu_exporter/shipped.py` looks them up, installed or in a checkout). The sdist carries
them at their repository paths, which is what a wheel built from it needs.
"""

from setuptools import find_namespace_packages, setup

SHIPPED = {  # repository folder -> the files of it that the package carries
    "deploy/systemd": [
        *("gpu-exporter.service", "gpu-exporter.env", "gpu-exporter-textfile.*"),
        "gpu-exporter*.socket",
    ],
    "deploy/prometheus": ["prometheus.yml", "federation.yml"],
    "deploy/prometheus/rules": ["*.yml"],
    "deploy/alertmanager": ["alertmanager.yml"],
    "deploy/kubernetes": ["prometheusrule.yaml"],
    "grafana/dashboards": ["*.json"],
    "grafana/provisioning/dashboards": ["*.yaml"],
    "docs": ["alerts.md"],
}
DATA_PACKAGES = {"gpu_exporter.shipped." + folder.replace("/", "."): folder for folder in SHIPPED}

setup(
    packages=[*find_namespace_packages(include=["gpu_exporter*"]), *DATA_PACKAGES],
    package_dir=DATA_PACKAGES,
    package_data={
        "gpu_exporter": [
            "py.typed",
            "serving/static/*.js",
            "serving/static/*.css",
            "serving/static/*.html",
            "sources/kubelet/api.proto",
        ],
        **{package: SHIPPED[folder] for package, folder in DATA_PACKAGES.items()},
    },
)
