# gpu-exporter container image.
#
#   docker build -t gpu-exporter:0.1.0 .     # the tag deploy/kubernetes asks for
#   docker run -d --gpus all --pid=host --device /dev/kmsg:/dev/kmsg:r --cap-add SYSLOG -p 9872:9872 gpu-exporter:0.1.0
#   docker run --rm -p 127.0.0.1:9872:9872 gpu-exporter:0.1.0 --simulate 4   # no GPU needed
#
# podman and buildah: add --format docker, or the HEALTHCHECK is dropped.
# --gpus all (the NVIDIA Container Toolkit) mounts the driver's libnvidia-ml into the
# container; --pid=host lets the exporter see the processes that hold the GPUs, without it
# process names, users and containers cannot be attributed; --device /dev/kmsg:/dev/kmsg:r and
# --cap-add SYSLOG let it read the kernel log's Xid lines (make test-deploy checks all);
# Without more, the exporter cannot read other processes' descriptors, so it names the
# holders of a leaked GPU's /dev/nvidiaN as candidates only and says so; --user 0
# --cap-add SYS_PTRACE --cap-add DAC_READ_SEARCH lets it name them, at a price
# (docs/operations.md#what-each-privilege-profile-sees).

# The [kubernetes] extra (grpcio, protobuf) is for --collector.kubernetes, and is imported
# only when that collector is on.
FROM python:3.12-slim-bookworm AS build
WORKDIR /src
COPY pyproject.toml setup.py README.md LICENSE ./
COPY gpu_exporter ./gpu_exporter
COPY deploy ./deploy
COPY grafana ./grafana
COPY docs/alerts.md ./docs/
# pip and setuptools install the package and leave: the runtime needs neither (they were
# 24 of the venv's 54 MB; benchmarks/README.md has the image sizes).
RUN python -m venv /opt/gpu-exporter \
    && /opt/gpu-exporter/bin/pip install --no-cache-dir --no-compile '.[kubernetes]' \
    && /opt/gpu-exporter/bin/python -m pip uninstall --quiet --yes pip setuptools \
    && /opt/gpu-exporter/bin/python -m compileall -q /opt/gpu-exporter/lib

FROM python:3.12-slim-bookworm
COPY --from=build /opt/gpu-exporter /opt/gpu-exporter
# A fixed non-root uid: NVML only needs the device nodes, which the NVIDIA runtime
# makes readable, and /proc of other users' processes is readable without privileges.
# No RUN in this stage: it is the base plus one COPY, so whatever a builder mounts into
# RUN steps (a CA bundle, a pip.conf for a mirror) cannot leave a file in the image, and
# the uid needs no /etc/passwd entry.
USER 10001:10001
ENV PATH=/opt/gpu-exporter/bin:$PATH \
    PYTHONUNBUFFERED=1 \
    PYTHONDONTWRITEBYTECODE=1 \
    NVIDIA_VISIBLE_DEVICES=all \
    NVIDIA_DRIVER_CAPABILITIES=utility \
    GPU_EXPORTER_HEALTHCHECK_URL=http://127.0.0.1:9872/livez
EXPOSE 9872
# Liveness, not readiness: a node whose driver is not loaded yet is not restarted.
# Set GPU_EXPORTER_HEALTHCHECK_URL when you change --web.listen-address (https:// with
# TLS), and GPU_EXPORTER_HEALTHCHECK_AUTH_FILE to a secret holding user:password with
# basic auth; see the Docker probe in docs/operations.md.
HEALTHCHECK --interval=30s --timeout=5s --start-period=20s --retries=3 \
    CMD ["python", "-m", "gpu_exporter.healthcheck"]
ENTRYPOINT ["gpu-exporter"]
CMD ["--web.listen-address=:9872"]
