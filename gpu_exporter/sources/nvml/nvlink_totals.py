"""NVLink error counters (and NVLink5's link-recovery events) summed over a GPU's links,
never stepping back.

The driver counts NVLink errors per link and type, since driver load or the last GPU
reset. `gpu_nvlink_errors_total` exports their sum per GPU and type by default. A sum over
the links that happened to answer would step back whenever one that answered before does
not (a failed read, a link gone down whose counters the driver stops giving), and
Prometheus reads a counter that steps back as a reset: `increase()` would count the whole
next value as new errors. So a type's total is left out of a sample in which any link
that has answered that type before (since NVML was initialised) does not answer it.

A link that has never answered a type (a port without a bridge, for which the driver
keeps no counters) is not waited for, and adds its count if it starts answering later.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping

from gpu_exporter.model import NVLINK_ERRORS, NVLINK_RECOVERY_RESULTS, NvLinkState

Counts = Callable[[NvLinkState], Mapping[str, int]]
"""Which counts of a link are summed: its errors (the default), or its recovery events."""


def _errors(state: NvLinkState) -> Mapping[str, int]:
    return state.errors


class LinkErrorTotals:
    """One device's error totals, per type: the sum over its links, or nothing while a
    link that has counted that type before does not answer."""

    def __init__(self, types: tuple[str, ...] = NVLINK_ERRORS, counts: Counts = _errors) -> None:
        self._counted: dict[str, set[int]] = {error: set() for error in types}
        self._counts = counts

    def __call__(self, links: Mapping[int, NvLinkState]) -> dict[str, int]:
        """NVLINK_ERRORS -> errors summed over `links` (this sample's reading), for
        every type that each link counted before answered now."""
        totals: dict[str, int] = {}
        for error, counted in self._counted.items():
            answered = {link for link, state in links.items() if error in self._counts(state)}
            complete = counted <= answered
            counted |= answered
            if answered and complete:
                totals[error] = sum(self._counts(links[link])[error] for link in answered)
        return totals


def recovery_totals() -> LinkErrorTotals:
    """Totals of NVLink5's link-recovery events per result, summed over the links alike."""
    return LinkErrorTotals(NVLINK_RECOVERY_RESULTS, lambda state: state.recovery_events)
