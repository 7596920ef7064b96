"""The kubelet's pod-resources socket: which devices each container was allocated.

One call, `v1.PodResourcesLister/List` (the kubelet's `api.proto`, in this directory),
over gRPC on a Unix socket. grpcio and protobuf are imported here only, and this module
only when the kubernetes collector is on (`pip install 'gpu-exporter[kubernetes]'`).

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
        self._retired: Any = None  # the last failed call's channel, closed by the next call
        self._list: Any = None

    def list(self) -> tuple[tuple[ContainerDevices, ...], int]:
        """Every container's devices and the number of pods, or KubeletUnavailable."""
        self._check_socket()
        # gRPC's C core would log each reconnection to stderr; the watcher logs one line
        os.environ.setdefault("GRPC_VERBOSITY", "ERROR")
        import grpc  # only with the kubernetes collector

        self._close_retired()
        if self._list is None:
            self._connect()
        call = _WatchedCall(self._channel)
        try:
            response = call.run(self._list, _request(), self.timeout_seconds)
        except (grpc.RpcError, grpc.FutureCancelledError) as error:
            # a restarted kubelet has a new socket: connect afresh next time
            self._retired, self._channel, self._list = self._channel, None, None
            if call.broken_connections or _broken_connection(error):
                raise KubeletUnavailable(
                    f"the socket {self.socket_path} accepts connections and then breaks them: "
                    "it is not the kubelet's pod-resources gRPC server, or the kubelet is "
                    "restarting"
                ) from None
            raise KubeletUnavailable(self._explain(error)) from None
        return _allocations(response), len(response.pod_resources)

    def close(self) -> None:
        self._close_retired()
        if self._channel is not None:
            _close(self._channel)
        self._channel = self._list = None

    def _close_retired(self) -> None:
        """Close the last failed call's channel. Not at once: grpcio's thread that watched
        its connectivity for that call may run for 0.2 s more, and it raises (a traceback
        on stderr) if the channel is closed under it."""
        if self._retired is not None:
            _close(self._retired)
            self._retired = None

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
