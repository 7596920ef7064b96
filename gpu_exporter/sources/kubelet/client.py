"""The kubelet's pod-resources socket: which devices each container was allocated.

Two calls of `v1.PodResourcesLister` (the kubelet's `api.proto`, in this directory), over
gRPC on a Unix socket: `List`, the devices each container holds, and
`GetAllocatableResources`, every device the device plugins advertise (a time-sliced GPU's
replicas among them: what a container's replicas are a share of). Each answer is bounded
by MAX_MESSAGE_BYTES. grpcio and protobuf are imported here only, and this module only
when the kubernetes collector is on (`pip install 'gpu-exporter[kubernetes]'`).

Every failure becomes one `KubeletUnavailable` whose message names the cause an operator
can act on: the socket not mounted, permission denied, an API the kubelet does not serve,
a kubelet that does not answer in time, an answer that is not the API's, a socket that
breaks every connection. The message of a cause is the same every time, so that the
watcher logs it once.

gRPC resets its reconnection backoff once a connection has the server's HTTP/2 SETTINGS
frame (the Connection Backoff Protocol), and retries a call that never reached the server
on a new connection at once ("transparent retry"). A socket that answers SETTINGS and then
junk so made one List call open 40 to 950 connections in 0.2 s, and neither
`grpc.enable_retries=0` nor the reconnect-backoff options stop it. So a call here watches
the channel's connectivity and cancels itself when a second connection starts: a
handful of connections per call (8 on average, 50 at worst, measured), and the watcher,
which owns the backoff between calls, closes the channel after a failure and waits
before it makes a new one (`watch.retry_delay`).
"""

from __future__ import annotations

import os
import stat
import threading
import time
from typing import Any

from gpu_exporter.model import AllocatableDevices, ContainerDevices, DraDevice

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
        self._retired: Any = None  # the last failed call's channel, closed by the next call
        self._methods: dict[str, Any] = {}  # the service's calls on `_channel`, by name
        self._socket: tuple[int, int, int] | None = None  # the socket `_channel` connected to

    def list(self) -> tuple[tuple[ContainerDevices, ...], int]:
        """Every container's devices and the number of pods, or KubeletUnavailable."""
        response = self._call("List")
        return _allocations(response), len(response.pod_resources)

    def allocatable(self) -> tuple[AllocatableDevices, ...]:
        """Every device the device plugins advertise, allocated or not (healthy ones: the
        kubelet's GetAllocatableResources), or KubeletUnavailable. Served from Kubernetes
        1.21 (feature gate KubeletPodResourcesGetAllocatable; on by default from 1.23)."""
        response = self._call("GetAllocatableResources")
        return tuple(
            AllocatableDevices(d.resource_name, tuple(d.device_ids)) for d in response.devices
        )

    def _call(self, name: str) -> Any:
        """One call of the pod-resources service, its answer bounded by MAX_MESSAGE_BYTES."""
        socket = self._check_socket()
        # gRPC's C core would log each reconnection to stderr; the watcher logs one line
        os.environ.setdefault("GRPC_VERBOSITY", "ERROR")
        import grpc  # only with the kubernetes collector

        self._close_retired()
        if self._methods and socket != self._socket:
            # a new socket is a restarted kubelet: the old channel may be in gRPC's
            # reconnection backoff (up to 2 minutes), failing calls at once meanwhile
            self._retired, self._channel, self._methods = self._channel, None, {}
            self._close_retired()
        if not self._methods:
            self._connect()
            self._socket = socket
        call = _WatchedCall(self._channel)
        try:
            return call.run(self._methods[name], _REQUESTS[name](), self.timeout_seconds)
        except (grpc.RpcError, grpc.FutureCancelledError) as error:
            # a restarted kubelet has a new socket: connect afresh next time
            self._retired, self._channel, self._methods = self._channel, None, {}
            if call.broken_connections or _broken_connection(error):
                raise KubeletUnavailable(
                    f"the socket {self.socket_path} accepts connections and then breaks them: "
                    "it is not the kubelet's pod-resources gRPC server, or the kubelet is "
                    "restarting"
                ) from None
            raise KubeletUnavailable(self._explain(error, name)) from None

    def close(self) -> None:
        self._close_retired()
        if self._channel is not None:
            _close(self._channel)
        self._channel, self._methods = None, {}

    def _close_retired(self) -> None:
        """Close the last failed call's channel. Not at once: grpcio's thread that watched
        its connectivity for that call may run for 0.2 s more, and it raises (a traceback
        on stderr) if the channel is closed under it."""
        if self._retired is not None:
            _close(self._retired)
            self._retired = None

    def _check_socket(self) -> tuple[int, int, int]:
        """The socket's device, inode and change time, or KubeletUnavailable."""
        path = self.socket_path
        try:
            found = os.stat(path)
            mode = found.st_mode
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
        return (found.st_dev, found.st_ino, found.st_ctime_ns)

    def _connect(self) -> None:
        import grpc

        api = _api()
        self._channel = grpc.insecure_channel(
            f"unix://{self.socket_path}",
            options=[("grpc.max_receive_message_length", MAX_MESSAGE_BYTES)],
        )
        self._methods = {
            name: self._channel.unary_unary(
                method_path(name),
                request_serializer=request.SerializeToString,
                response_deserializer=response.FromString,
            )
            for name, (request, response) in _messages(api).items()
        }

    def _explain(self, error: Any, name: str = "List") -> str:
        import grpc

        code = error.code()
        details = error.details() or ""
        if code == grpc.StatusCode.UNIMPLEMENTED:
            return (
                f"the kubelet at {self.socket_path} does not serve v1.PodResourcesLister/{name} "
                f"(API version unsupported: Kubernetes {SERVED_FROM[name]} or later serves it)"
            )
        if code == grpc.StatusCode.RESOURCE_EXHAUSTED:
            return (
                f"the kubelet's {name} answer on {self.socket_path} is over "
                f"{MAX_MESSAGE_BYTES >> 20} MiB: not read"
            )
        if code == grpc.StatusCode.DEADLINE_EXCEEDED:
            return f"the kubelet at {self.socket_path} did not answer in {self.timeout_seconds:g}s"
        if "Permission denied" in details:
            return f"{self.socket_path}: permission denied (run as root)"
        if code == grpc.StatusCode.INTERNAL and "deserializ" in details.lower():
            return f"the answer on {self.socket_path} is not a pod-resources {name} response"
        return (
            f"the kubelet at {self.socket_path} did not answer {name}: {code.name} {details[:200]}"
        ).strip()


class _WatchedCall:
    """One List call and the channel's connectivity while it runs: a second connection
    within the call means the first broke; the call is then cancelled, before gRPC's
    transparent retries open hundreds more."""

    def __init__(self, channel: Any) -> None:
        self.broken_connections = False
        self._channel = channel
        self._future: Any = None
        self._connecting = 0
        self._lock = threading.Lock()

    def run(self, method: Any, request: Any, timeout_seconds: float) -> Any:
        """The call's answer, or the RpcError (FutureCancelledError) that ended it."""
        self._channel.subscribe(self._changed, try_to_connect=False)
        try:
            with self._lock:
                self._future = method.future(request, timeout=timeout_seconds)
                if self.broken_connections:
                    self._future.cancel()
            return self._future.result()
        finally:
            self._channel.unsubscribe(self._changed)

    def _changed(self, state: Any) -> None:  # on a gRPC thread
        import grpc

        with self._lock:
            if state == grpc.ChannelConnectivity.CONNECTING:
                self._connecting += 1
            if self._connecting > 1 and not self.broken_connections:
                self.broken_connections = True
                if self._future is not None:
                    self._future.cancel()


def _close(channel: Any) -> None:
    """Close a channel once grpcio's connectivity thread, if any, has ended (at most 0.5 s:
    it ends within 0.2 s of the last unsubscribe; `_connectivity_state` is grpcio's own)."""
    state = getattr(channel, "_connectivity_state", None)
    deadline = time.monotonic() + 0.5
    while getattr(state, "polling", False) and time.monotonic() < deadline:
        time.sleep(0.01)
    channel.close()


def _broken_connection(error: Any) -> bool:
    """A call that failed because its connection broke under it (not a refused one)."""
    import grpc

    if not isinstance(error, grpc.RpcError):
        return False
    details = error.details() or ""
    return error.code() == grpc.StatusCode.UNAVAILABLE and "Stream removed" in details


def list_method_path() -> str:
    """The gRPC path of List, from the proto's own descriptor: "/v1.PodResourcesLister/List"."""
    return method_path("List")


def method_path(name: str) -> str:
    """The gRPC path of a method of PodResourcesLister, from the proto's own descriptor."""
    method = _api().DESCRIPTOR.services_by_name["PodResourcesLister"].methods_by_name[name]
    service, short = method.full_name.rsplit(".", 1)
    return f"/{service}/{short}"


def _api() -> Any:
    """The messages generated from api.proto (protobuf is imported with them)."""
    from gpu_exporter.sources.kubelet import api_pb2

    return api_pb2


def _messages(api: Any) -> dict[str, tuple[Any, Any]]:
    """The request and response message of each method called, by method name."""
    return {
        "List": (api.ListPodResourcesRequest, api.ListPodResourcesResponse),
        "GetAllocatableResources": (
            api.AllocatableResourcesRequest,
            api.AllocatableResourcesResponse,
        ),
    }


_REQUESTS = {
    "List": lambda: _api().ListPodResourcesRequest(),
    "GetAllocatableResources": lambda: _api().AllocatableResourcesRequest(),
}
SERVED_FROM = {"List": "1.20", "GetAllocatableResources": "1.23 (1.21 with its feature gate)"}
"""The Kubernetes release from which the kubelet serves each call by default."""


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
