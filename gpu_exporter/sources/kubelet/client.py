"""The kubelet's pod-resources socket: which devices each container was allocated.

One call, `v1.PodResourcesLister/List` (the kubelet's `api.proto`, in this directory),
over gRPC on a Unix socket. grpcio and protobuf are imported here only, and this module
only when the kubernetes collector is on (`pip install 'gpu-exporter[kubernetes]'`).

Every failure becomes one `KubeletUnavailable` whose message names the cause an operator
can act on: the socket not mounted, permission denied, an API the kubelet does not serve,
a kubelet that does not answer in time, an answer that is not the API's.
"""

from __future__ import annotations

import os
import stat
from typing import Any

from gpu_exporter.model import ContainerDevices, DraDevice

DEFAULT_SOCKET = "/var/lib/kubelet/pod-resources/kubelet.sock"
MAX_MESSAGE_BYTES = 16 * 1024 * 1024  # the kubelet's own limit for pod-resources answers


class KubeletUnavailable(Exception):
    """The allocation could not be read; the message says why, for the log and the page."""


class PodResourcesClient:
    """A channel to the kubelet's socket, kept between calls; not thread-safe."""

    def __init__(self, socket_path: str = DEFAULT_SOCKET, *, timeout_seconds: float = 5.0):
        self.socket_path = socket_path
        self.timeout_seconds = timeout_seconds
        self._channel: Any = None
        self._list: Any = None

    def list(self) -> tuple[tuple[ContainerDevices, ...], int]:
        """Every container's devices and the number of pods, or KubeletUnavailable."""
        self._check_socket()
        # gRPC's C core would log each reconnection to stderr; the watcher logs one line
        os.environ.setdefault("GRPC_VERBOSITY", "ERROR")
        import grpc  # only with the kubernetes collector

        if self._list is None:
            self._connect()
        try:
            response = self._list(_request(), timeout=self.timeout_seconds)
        except grpc.RpcError as error:
            self.close()  # a restarted kubelet has a new socket: connect afresh next time
            raise KubeletUnavailable(self._explain(error)) from None
        return _allocations(response), len(response.pod_resources)

    def close(self) -> None:
        if self._channel is not None:
            self._channel.close()
        self._channel = self._list = None

    def _check_socket(self) -> None:
        path = self.socket_path
        try:
            mode = os.stat(path).st_mode
        except FileNotFoundError:
            raise KubeletUnavailable(
                f"{path} does not exist: mount the host's /var/lib/kubelet/pod-resources "
                "into the exporter's container (hostPath, read-only)"
            ) from None
        except PermissionError:
            raise KubeletUnavailable(f"{path}: permission denied (run as root)") from None
        if not stat.S_ISSOCK(mode):
            raise KubeletUnavailable(f"{path} is not a socket")
        if not os.access(path, os.R_OK | os.W_OK):
            raise KubeletUnavailable(
                f"{path}: permission denied; the socket is the kubelet's (root, 0600): run "
                "the exporter as root"
            )

    def _connect(self) -> None:
        import grpc

        api = _api()
        self._channel = grpc.insecure_channel(
            f"unix://{self.socket_path}",
            options=[("grpc.max_receive_message_length", MAX_MESSAGE_BYTES)],
        )
        self._list = self._channel.unary_unary(
            list_method_path(),
            request_serializer=api.ListPodResourcesRequest.SerializeToString,
            response_deserializer=api.ListPodResourcesResponse.FromString,
        )

    def _explain(self, error: Any) -> str:
        import grpc

        code = error.code()
        details = error.details() or ""
        if code == grpc.StatusCode.UNIMPLEMENTED:
            return (
                f"the kubelet at {self.socket_path} does not serve v1.PodResourcesLister/List "
                "(API version unsupported: Kubernetes 1.20 or later serves it)"
            )
        if code == grpc.StatusCode.DEADLINE_EXCEEDED:
            return f"the kubelet at {self.socket_path} did not answer in {self.timeout_seconds:g}s"
        if "Permission denied" in details:
            return f"{self.socket_path}: permission denied (run as root)"
        if code == grpc.StatusCode.INTERNAL and "deserializ" in details.lower():
            return f"the answer on {self.socket_path} is not a pod-resources List response"
        return f"the kubelet at {self.socket_path} did not answer: {code.name} {details}".strip()


def list_method_path() -> str:
    """The gRPC path of List, from the proto's own descriptor: "/v1.PodResourcesLister/List"."""
    method = _api().DESCRIPTOR.services_by_name["PodResourcesLister"].methods_by_name["List"]
    service, name = method.full_name.rsplit(".", 1)
    return f"/{service}/{name}"


def _api() -> Any:
    """The messages generated from api.proto (protobuf is imported with them)."""
    from gpu_exporter.sources.kubelet import api_pb2

    return api_pb2


def _request() -> Any:
    return _api().ListPodResourcesRequest()


def _allocations(response: Any) -> tuple[ContainerDevices, ...]:
    """Device plugins' devices, then the devices of DRA claims (`dynamic_resources`, served
    where the kubelet's KubeletPodResourcesDynamicResources gate is on), one entry each."""
    containers = [(pod, c) for pod in response.pod_resources for c in pod.containers]
    plugins = (
        ContainerDevices(pod.namespace, pod.name, c.name, d.resource_name, tuple(d.device_ids))
        for pod, c in containers
        for d in c.devices
    )
    claims = (
        ContainerDevices(
            pod.namespace,
            pod.name,
            c.name,
            resource=r.driver_name,
            device_ids=(r.device_name,),
            dra=DraDevice(
                claim.claim_name, claim.claim_namespace, r.driver_name, r.pool_name, r.device_name
            ),
        )
        for pod, c in containers
        for claim in c.dynamic_resources
        for r in claim.claim_resources
    )
    return (*plugins, *claims)
