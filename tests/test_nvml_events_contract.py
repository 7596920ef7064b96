"""Contract tests: NVML's event API (Xid and ECC events) through the real `pynvml`.

`PynvmlBackend.open_events()` creates an `nvmlEventSet_t`, registers every device for the
Xid/ECC events it supports, and `PynvmlEventSet.wait()` turns `nvmlEventSetWait_v2` into
`DeviceEvent`s. Only the shared library is faked (`tests/support/fake_nvml.py`); pynvml's
wrappers, `c_nvmlEventData_t` and exception classes are the real ones. The last tests run
the Xid listener thread against it.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator

import pynvml
import pytest

from gpu_exporter.model import DeviceEvent, XidState
from gpu_exporter.sources.backend import NvmlUnavailable
from gpu_exporter.sources.nvml import PynvmlBackend, PynvmlEventSet
from gpu_exporter.sources.xid import XidListener
from tests.support.fake_nvml import (
    CLOCK,
    DBE,
    NOT_SUPPORTED,
    PSTATE,
    SBE,
    XID,
    FakeNvmlLib,
    Install,
    h100,
    old_fanless,
)

WANTED = XID | SBE | DBE


@pytest.fixture
def three_gpus(install: Install) -> FakeNvmlLib:
    return install(FakeNvmlLib([h100(0), h100(1), h100(2)]))


@pytest.fixture
def backend(three_gpus: FakeNvmlLib) -> Iterator[PynvmlBackend]:
    b = PynvmlBackend()
    b.init()
    yield b
    b.shutdown()


@pytest.fixture
def events(backend: PynvmlBackend) -> Iterator[PynvmlEventSet]:
    event_set = backend.open_events()
    assert event_set is not None
    yield event_set
    event_set.close()


def _started(lib: FakeNvmlLib) -> PynvmlBackend:
    """An initialised backend on `lib` (already installed in pynvml's place)."""
    assert pynvml.nvmlLib is lib
    b = PynvmlBackend()
    b.init()
    return b


def _wait_until(predicate: Callable[[], bool], timeout_seconds: float = 5.0) -> None:
    deadline = time.monotonic() + timeout_seconds
    while not predicate():
        assert time.monotonic() < deadline, "condition not reached in time"
        time.sleep(0.005)


# Events and their device -----------------------------------------------------------------


def test_xid_event_carries_the_uuid_of_the_device_that_raised_it(
    three_gpus: FakeNvmlLib, events: PynvmlEventSet
) -> None:
    three_gpus.push_event(1, XID, 79)
    three_gpus.push_event(0, XID, 13)
    three_gpus.push_event(2, XID, 94)

    assert events.wait(1000) == DeviceEvent(uuid="GPU-h100-1", kind="xid", xid=79, event_type=XID)
    assert events.wait(1000) == DeviceEvent(uuid="GPU-h100-0", kind="xid", xid=13, event_type=XID)
    assert events.wait(1000) == DeviceEvent(uuid="GPU-h100-2", kind="xid", xid=94, event_type=XID)
    assert three_gpus.pending_events == []


@pytest.mark.parametrize(
    ("event_type", "kind"),
    [(SBE, "ecc_single_bit"), (DBE, "ecc_double_bit")],
)
def test_ecc_events_have_their_kind_and_no_xid(
    three_gpus: FakeNvmlLib, events: PynvmlEventSet, event_type: int, kind: str
) -> None:
    three_gpus.push_event(2, event_type, data=0x1234)  # eventData is not an Xid here
    assert events.wait(1000) == DeviceEvent(
        uuid="GPU-h100-2",
        kind=kind,  # type: ignore[arg-type]
        xid=None,
        event_type=event_type,
    )


def test_wait_with_nothing_pending_returns_none_after_the_timeout(
    three_gpus: FakeNvmlLib, backend: PynvmlBackend, events: PynvmlEventSet
) -> None:
    start = time.monotonic()
    assert events.wait(50) is None
    assert time.monotonic() - start >= 0.045  # the driver blocked for the timeout
    assert three_gpus.wait_timeouts_ms == [50]
    assert backend.errors.snapshot() == {}  # NVML_ERROR_TIMEOUT is not an error
    three_gpus.push_event(0, XID, 48)
    event = events.wait(50)
    assert event is not None
    assert event.xid == 48


def test_close_frees_the_set_and_never_raises(
    three_gpus: FakeNvmlLib, backend: PynvmlBackend
) -> None:
    event_set = backend.open_events()
    assert event_set is not None
    assert three_gpus.live_event_sets() == 1
    event_set.close()
    assert three_gpus.live_event_sets() == 0
    event_set.close()  # the driver answers INVALID_ARGUMENT for a freed set
    assert three_gpus.count("nvmlEventSetFree") == 2


# Registration ---------------------------------------------------------------------------


def test_each_device_registers_only_the_wanted_types_it_supports(install: Install) -> None:
    no_events = h100(2)
    no_events.supported_events = PSTATE | CLOCK  # supports events, but none we want
    lib = install(FakeNvmlLib([h100(0), old_fanless(1), no_events]))
    b = _started(lib)

    event_set = b.open_events()

    assert event_set is not None
    assert lib.registrations == [(0, XID | SBE | DBE), (1, XID)]
    for index, mask in lib.registrations:
        assert mask == lib.gpus[index].supported_events & WANTED
    lib.push_event(1, XID, 31)
    event = event_set.wait(1000)
    assert event is not None
    assert (event.uuid, event.xid) == ("GPU-k80-1", 31)
    assert b.errors.snapshot() == {}
    event_set.close()


def test_no_device_supporting_events_gives_none_and_frees_the_set(install: Install) -> None:
    quiet = [h100(0), old_fanless(1)]
    for gpu in quiet:
        gpu.supported_events = 0
    lib = install(FakeNvmlLib(quiet))
    b = _started(lib)

    assert b.open_events() is None
    assert lib.registrations == []
    assert len(lib.event_sets) == 1
    assert lib.live_event_sets() == 0


@pytest.mark.parametrize("how", ["not_supported", "missing_symbol"])
def test_event_set_create_unsupported_gives_none(install: Install, how: str) -> None:
    if how == "not_supported":
        lib = install(FakeNvmlLib([h100(0)], fail={"nvmlEventSetCreate": NOT_SUPPORTED}))
    else:
        lib = install(FakeNvmlLib([h100(0)], missing={"nvmlEventSetCreate"}))
    b = _started(lib)

    assert b.open_events() is None
    assert lib.count("nvmlDeviceRegisterEvents") == 0
    assert b.errors.snapshot() == {}


@pytest.mark.parametrize(
    ("code", "error", "exception_class"),
    [
        (pynvml.NVML_ERROR_UNINITIALIZED, "uninitialized", "NVMLError_Uninitialized"),
        (pynvml.NVML_ERROR_DRIVER_NOT_LOADED, "driver_not_loaded", "NVMLError_DriverNotLoaded"),
    ],
)
def test_event_set_create_with_nvml_down_raises_nvml_unavailable(
    install: Install,
    code: int,
    error: str,
    exception_class: str,
) -> None:
    b = _started(install(FakeNvmlLib([h100(0)], fail={"nvmlEventSetCreate": code})))
    with pytest.raises(NvmlUnavailable) as caught:
        b.open_events()
    assert caught.value.error == error
    assert type(caught.value.__cause__) is getattr(pynvml, exception_class)


@pytest.mark.parametrize(
    "function",
    [
        "nvmlDeviceGetHandleByIndex_v2",
        "nvmlDeviceGetSupportedEventTypes",
        "nvmlDeviceRegisterEvents",
        "nvmlDeviceGetUUID",
    ],
)
def test_gpu_lost_during_registration_is_skipped_and_the_others_register(
    three_gpus: FakeNvmlLib, function: str
) -> None:
    three_gpus.gpus[1].fail[function] = pynvml.NVML_ERROR_GPU_IS_LOST
    b = _started(three_gpus)

    event_set = b.open_events()

    assert event_set is not None
    assert [index for index, _ in three_gpus.registrations if index != 1] == [0, 2]
    three_gpus.push_event(2, XID, 79)
    three_gpus.push_event(0, XID, 79)
    assert [e.uuid for e in (event_set.wait(1000), event_set.wait(1000)) if e] == [
        "GPU-h100-2",
        "GPU-h100-0",
    ]
    assert b.errors.snapshot() == {}
    event_set.close()


@pytest.mark.parametrize(
    "function", ["nvmlDeviceGetSupportedEventTypes", "nvmlDeviceRegisterEvents"]
)
def test_other_registration_errors_are_counted_and_the_device_skipped(
    three_gpus: FakeNvmlLib, function: str
) -> None:
    three_gpus.gpus[0].fail[function] = pynvml.NVML_ERROR_NO_PERMISSION
    b = _started(three_gpus)

    event_set = b.open_events()

    assert event_set is not None
    assert [index for index, _ in three_gpus.registrations if index != 0] == [1, 2]
    assert b.errors.snapshot() == {(function, "no_permission"): 1}
    event_set.close()


def test_a_device_answering_not_supported_to_registration_is_skipped(
    three_gpus: FakeNvmlLib,
) -> None:
    three_gpus.gpus[1].fail["nvmlDeviceRegisterEvents"] = NOT_SUPPORTED  # some vGPUs
    b = _started(three_gpus)
    event_set = b.open_events()
    assert event_set is not None
    three_gpus.push_event(1, XID, 79)  # never delivered: GPU 1 is not registered
    assert event_set.wait(20) is None
    assert b.errors.snapshot() == {}
    event_set.close()


def test_nvml_down_during_registration_raises_and_frees_the_set(
    three_gpus: FakeNvmlLib,
) -> None:
    three_gpus.gpus[1].fail["nvmlDeviceRegisterEvents"] = pynvml.NVML_ERROR_DRIVER_NOT_LOADED
    b = _started(three_gpus)
    with pytest.raises(NvmlUnavailable) as caught:
        b.open_events()
    assert caught.value.error == "driver_not_loaded"
    assert len(three_gpus.event_sets) == 1
    assert three_gpus.live_event_sets() == 0  # not leaked: the listener re-opens later


# Errors while waiting ---------------------------------------------------------------------


@pytest.mark.parametrize(
    ("code", "error", "exception_class"),
    [
        (pynvml.NVML_ERROR_UNINITIALIZED, "uninitialized", "NVMLError_Uninitialized"),
        (pynvml.NVML_ERROR_DRIVER_NOT_LOADED, "driver_not_loaded", "NVMLError_DriverNotLoaded"),
    ],
)
def test_nvml_down_during_wait_raises_nvml_unavailable(
    three_gpus: FakeNvmlLib,
    events: PynvmlEventSet,
    code: int,
    error: str,
    exception_class: str,
) -> None:
    three_gpus.fail["nvmlEventSetWait_v2"] = code
    with pytest.raises(NvmlUnavailable) as caught:
        events.wait(1000)
    assert caught.value.error == error
    assert "nvmlEventSetWait_v2" in caught.value.reason
    assert type(caught.value.__cause__) is getattr(pynvml, exception_class)


@pytest.mark.parametrize("code", [pynvml.NVML_ERROR_GPU_IS_LOST, pynvml.NVML_ERROR_UNKNOWN])
def test_gpu_lost_during_wait_is_no_event_after_the_timeout(
    three_gpus: FakeNvmlLib, events: PynvmlEventSet, code: int
) -> None:
    # The sampler reports the lost device (gpu_up 0); the listener must keep waiting for
    # the other devices' events rather than die, and must not spin on the error.
    three_gpus.fail["nvmlEventSetWait_v2"] = code
    start = time.monotonic()
    assert events.wait(50) is None
    assert time.monotonic() - start >= 0.045
    del three_gpus.fail["nvmlEventSetWait_v2"]
    three_gpus.push_event(0, XID, 79)
    event = events.wait(1000)
    assert event is not None
    assert event.uuid == "GPU-h100-0"


# The Xid listener thread ------------------------------------------------------------------


def _listener(backend: PynvmlBackend) -> XidListener:
    return XidListener(backend, clock=lambda: 1_700_000_000.0, wait_ms=20)


def test_listener_counts_an_xid_for_the_right_gpu_and_stops_promptly(
    three_gpus: FakeNvmlLib, backend: PynvmlBackend
) -> None:
    listener = _listener(backend)
    listener.start()
    try:
        listener.rearm()
        _wait_until(lambda: three_gpus.count("nvmlEventSetWait_v2") > 0)
        three_gpus.push_event(1, XID, 79)
        _wait_until(lambda: bool(listener.state()))
        assert listener.state() == {
            "GPU-h100-1": XidState(
                counts={79: 1},
                last_timestamp_seconds=1_700_000_000.0,
                last_xid=79,
                last_timestamps={79: 1_700_000_000.0},
            )
        }
    finally:
        start = time.monotonic()
        listener.stop()
        stopped_in = time.monotonic() - start
    assert stopped_in < 0.5
    assert three_gpus.live_event_sets() == 0  # the thread ended and closed its set


def test_listener_survives_a_lost_gpu_while_waiting(
    three_gpus: FakeNvmlLib, backend: PynvmlBackend
) -> None:
    listener = _listener(backend)
    listener.start()
    try:
        listener.rearm()
        three_gpus.fail["nvmlEventSetWait_v2"] = pynvml.NVML_ERROR_GPU_IS_LOST
        _wait_until(lambda: three_gpus.count("nvmlEventSetWait_v2") >= 2)
        assert three_gpus.count("nvmlEventSetWait_v2") < 20  # waited, did not spin
        del three_gpus.fail["nvmlEventSetWait_v2"]
        three_gpus.push_event(2, XID, 79)
        _wait_until(lambda: bool(listener.state()))
        assert listener.state()["GPU-h100-2"].counts == {79: 1}
    finally:
        listener.stop()
    assert len(three_gpus.event_sets) == 1  # the same set all along


def test_listener_reopens_the_set_after_nvml_comes_back(
    three_gpus: FakeNvmlLib, backend: PynvmlBackend
) -> None:
    listener = _listener(backend)
    listener.start()
    try:
        listener.rearm()
        _wait_until(lambda: three_gpus.count("nvmlEventSetWait_v2") > 0)
        three_gpus.fail["nvmlEventSetWait_v2"] = pynvml.NVML_ERROR_DRIVER_NOT_LOADED
        _wait_until(lambda: three_gpus.live_event_sets() == 0)  # closed on NVML down
        del three_gpus.fail["nvmlEventSetWait_v2"]
        listener.rearm()  # what the sampler does after re-initialising NVML
        _wait_until(lambda: three_gpus.live_event_sets() == 1)
        three_gpus.push_event(0, XID, 45)
        _wait_until(lambda: bool(listener.state()))
        assert listener.state()["GPU-h100-0"].counts == {45: 1}
    finally:
        listener.stop()
    assert len(three_gpus.event_sets) == 2
    assert three_gpus.live_event_sets() == 0
