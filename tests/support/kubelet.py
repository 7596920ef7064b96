"""A kubelet stand-in: `v1.PodResourcesLister` from the kubelet's own api.proto, served by
grpcio on a Unix socket, and the kubelet's log layout for the containers it names.

`FakeKubelet.pods` is what List answers, and may be changed while it serves: device
plugins' devices (`Container.devices`) and DRA claims' (`Container.claims`, the
`dynamic_resources` of a kubelet with KubeletPodResourcesDynamicResources on). `delay`
makes each answer late, `hold()` keeps every answer back until `release()` (or until the
client gives up, counted in `abandoned`), `garbage` answers bytes that are no
ListPodResourcesResponse, `unimplemented` serves no List at all (a kubelet without the
v1 API). `calls` counts List calls. `allocatable` is what GetAllocatableResources
answers (resource -> device IDs, as the device plugins advertise them: a time-sliced
GPU's replicas "<uuid>::<n>"); None serves no such call (a kubelet before 1.21, or with
its feature gate off: it answers UNIMPLEMENTED). `stop()` removes the socket, as a
kubelet that goes away does; `start()` again is a restart.

`JunkSocket` is no kubelet: it answers every connection with a valid HTTP/2 SETTINGS frame
and then junk, and counts the connections.
"""

from __future__ import annotations

import hashlib
import os
import socket
import threading
import time
from collections import deque
from concurrent import futures
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import grpc

from gpu_exporter.sources.kubelet import api_pb2
from gpu_exporter.sources.kubelet.client import list_method_path, method_path


@dataclass
class ClaimDevice:
    """One device of a DRA claim, as the kubelet lists it (a `ClaimResource`)."""

    name: str  # the driver's device name, e.g. "gpu-0", "gpu-1-mig-19-4-1"
    driver: str = "gpu.nvidia.com"
    pool: str = "node-a"
    cdi: tuple[str, ...] = ()  # CDI device names; default: the driver v25.3 to v25.8 form


@dataclass
class Claim:
    """A DRA ResourceClaim a container uses (a `DynamicResource`)."""

    name: str
    devices: list[ClaimDevice]
    namespace: str = ""  # "": the pod's


@dataclass
class Container:
    name: str
    devices: dict[str, list[str]] = field(default_factory=dict)  # resource -> device IDs
    claims: list[Claim] = field(default_factory=list)  # DRA


@dataclass
class Pod:
    namespace: str
    name: str
    containers: list[Container]
    uid: str = ""

    def __post_init__(self) -> None:
        if not self.uid:
            digest = hashlib.sha256(f"{self.namespace}/{self.name}".encode()).hexdigest()
            self.uid = (
                f"{digest[:8]}-{digest[8:12]}-{digest[12:16]}-{digest[16:20]}-{digest[20:32]}"
            )


def response(pods: list[Pod]) -> Any:
    return api_pb2.ListPodResourcesResponse(
        pod_resources=[
            api_pb2.PodResources(
                name=p.name,
                namespace=p.namespace,
                containers=[
                    api_pb2.ContainerResources(
                        name=c.name,
                        devices=[
                            api_pb2.ContainerDevices(resource_name=r, device_ids=ids)
                            for r, ids in c.devices.items()
                        ],
                        cpu_ids=[0, 1],
                        dynamic_resources=[_dynamic(claim, p.namespace) for claim in c.claims],
                    )
                    for c in p.containers
                ],
            )
            for p in pods
        ]
    )


def _dynamic(claim: Claim, namespace: str) -> Any:
    return api_pb2.DynamicResource(
        claim_name=claim.name,
        claim_namespace=claim.namespace or namespace,
        claim_resources=[
            api_pb2.ClaimResource(
                driver_name=d.driver,
                pool_name=d.pool,
                device_name=d.name,
                cdi_devices=[
                    api_pb2.CDIDevice(name=n) for n in d.cdi or (f"k8s.{d.driver}/device={d.name}",)
                ],
            )
            for d in claim.devices
        ],
    )


class FakeKubelet:
    def __init__(self, socket_path: Path, pods: list[Pod] | None = None) -> None:
        self.socket_path = socket_path
        self.pods: list[Pod] = list(pods or [])
        self.allocatable: dict[str, list[str]] | None = None
        self.delay = 0.0
        self.garbage = False
        self.unimplemented = False
        self.calls = 0
        self.abandoned = 0  # held calls whose client gave up (its deadline) before release
        self._released = threading.Event()
        self._released.set()
        self._server: Any = None

    def hold(self) -> None:
        """Answer no List call until `release()`."""
        self._released.clear()

    def release(self) -> None:
        self._released.set()

    def _list(self, _request: Any, context: Any) -> Any:
        self.calls += 1
        if self.delay:
            time.sleep(self.delay)
        while not self._released.wait(0.05):
            if not context.is_active():
                self.abandoned += 1
                break
        return response(self.pods)

    def _allocatable(self, _request: Any, context: Any) -> Any:
        if self.allocatable is None:
            context.abort(grpc.StatusCode.UNIMPLEMENTED, "unknown method")
        return api_pb2.AllocatableResourcesResponse(
            devices=[
                api_pb2.ContainerDevices(resource_name=r, device_ids=ids)
                for r, ids in (self.allocatable or {}).items()
            ],
            cpu_ids=[0, 1],
        )

    def _serialize(self, message: Any) -> bytes:
        if self.garbage:
            return b"\xff\xff\xff\xff not protobuf"
        return bytes(message.SerializeToString())

    def start(self) -> FakeKubelet:
        service, method = list_method_path().strip("/").split("/")
        handlers = {}
        if not self.unimplemented:
            handlers[method] = grpc.unary_unary_rpc_method_handler(
                self._list,
                request_deserializer=api_pb2.ListPodResourcesRequest.FromString,
                response_serializer=self._serialize,
            )
            allocatable = method_path("GetAllocatableResources").rsplit("/", 1)[1]
            handlers[allocatable] = grpc.unary_unary_rpc_method_handler(
                self._allocatable,
                request_deserializer=api_pb2.AllocatableResourcesRequest.FromString,
                response_serializer=self._serialize,
            )
        server = grpc.server(futures.ThreadPoolExecutor(max_workers=4))
        server.add_generic_rpc_handlers((grpc.method_handlers_generic_handler(service, handlers),))
        server.add_insecure_port(f"unix://{self.socket_path}")
        server.start()
        self._server = server
        return self

    def stop(self) -> None:
        if self._server is not None:
            self._server.stop(grace=None).wait()
            self._server = None
        if self.socket_path.exists():
            os.unlink(self.socket_path)


def write_log_tree(root: Path, entries: list[tuple[Pod, str, str]]) -> Path:
    """The kubelet's log layout under `root` for (pod, container name, container ID):
    containers/<pod>_<ns>_<container>-<id>.log linking into pods/<ns>_<pod>_<uid>/."""
    (root / "containers").mkdir(parents=True, exist_ok=True)
    for pod, container, container_id in entries:
        directory = root / "pods" / f"{pod.namespace}_{pod.name}_{pod.uid}" / container
        directory.mkdir(parents=True, exist_ok=True)
        (directory / "0.log").write_text("")
        link = root / "containers" / f"{pod.name}_{pod.namespace}_{container}-{container_id}.log"
        link.symlink_to(directory / "0.log")
    return root


# HTTP/2's connection preface from the server: an empty SETTINGS frame (length 0, type 4,
# no flags, stream 0), as a real HTTP/2 server sends first
HTTP2_SETTINGS = b"\x00\x00\x00\x04\x00\x00\x00\x00\x00"


class JunkSocket:
    """A Unix socket that answers each connection with HTTP/2 SETTINGS and then junk (a
    frame header announcing a frame far over the maximum size), keeps it open (the last
    64), and counts connections."""

    def __init__(self, socket_path: Path) -> None:
        self.socket_path = socket_path
        self.connections = 0
        self._listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self._open: deque[socket.socket] = deque()
        self._thread = threading.Thread(target=self._serve, daemon=True)

    def start(self) -> JunkSocket:
        self._listener.bind(str(self.socket_path))
        self._listener.listen(64)
        self._thread.start()
        return self

    def _serve(self) -> None:
        while True:
            try:
                connection, _ = self._listener.accept()
            except OSError:  # closed by stop()
                return
            self.connections += 1
            try:
                connection.sendall(HTTP2_SETTINGS + b"junk junk junk junk" * 4)
            except OSError:
                connection.close()
                continue
            self._open.append(connection)
            if len(self._open) > 64:  # a client storming must not take every descriptor
                self._open.popleft().close()

    def stop(self) -> None:
        try:
            self._listener.shutdown(socket.SHUT_RDWR)  # wakes the accept() in _serve
        except OSError:
            pass
        self._listener.close()
        # the server thread may be between accept() and append(): let it finish before the
        # connections it keeps are closed, or the deque changes while it is emptied
        self._thread.join(timeout=5)
        while self._open:
            self._open.popleft().close()
        if self.socket_path.exists():
            os.unlink(self.socket_path)
