"""A kubelet stand-in: `v1.PodResourcesLister` from the kubelet's own api.proto, served by
grpcio on a Unix socket, and the kubelet's log layout for the containers it names.

`FakeKubelet.pods` is what List answers, and may be changed while it serves: device
plugins' devices (`Container.devices`) and DRA claims' (`Container.claims`, the
`dynamic_resources` of a kubelet with KubeletPodResourcesDynamicResources on). `delay`
makes each answer late, `garbage` answers bytes that are no ListPodResourcesResponse,
`unimplemented` serves no List at all (a kubelet without the v1 API). `stop()` removes
the socket, as a kubelet that goes away does; `start()` again is a restart.
"""

from __future__ import annotations

import hashlib
import os
import time
from concurrent import futures
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import grpc

from gpu_exporter.sources.kubelet import api_pb2
from gpu_exporter.sources.kubelet.client import list_method_path


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
        self.delay = 0.0
        self.garbage = False
        self.unimplemented = False
        self.calls = 0
        self._server: Any = None

    def _list(self, _request: Any, _context: Any) -> Any:
        self.calls += 1
        if self.delay:
            time.sleep(self.delay)
        return response(self.pods)

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
