"""What the self-check compares, how close is close enough, and the verdict on each value.

Each `Quantity` names nvidia-smi's field (a `--query-gpu` name, as `nvidia-smi
--help-query-gpu` lists them, or a path under <gpu> in `nvidia-smi -q -x` for what the
query cannot give), the exporter's value in nvidia-smi's units, and a tolerance.

A value agrees when nvidia-smi's reading lies within the range of values the exporter
read during the check (its samples bracket nvidia-smi's call), widened by the
tolerance, and by less than one unit of the last digit nvidia-smi prints (1 MiB, 1 MHz,
0.01 W; so "exact" means equal at nvidia-smi's precision). Text (names, versions,
modes) must be equal. A value that only one side has is a finding; N/A on both sides
agrees. docs/self-check.md and `--help` show the tolerances (a test holds them to this table).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Literal, TypeVar

from gpu_exporter.model import (
    DeviceReading,
    DeviceSample,
    DeviceStatic,
    MemoryReading,
    ModesReading,
    Snapshot,
    TemperatureReading,
)
from gpu_exporter.records import Record
from gpu_exporter.self_check.nvidia_smi import MISSING

MIB = 1024**2
Value = float | str
Extract = Callable[[Snapshot, DeviceSample], Value | None]
Verdict = Literal["agree", "differ", "absent", "skipped"]
P = TypeVar("P")


@dataclass(frozen=True, repr=False)
class Quantity(Record):
    """One value compared per GPU."""

    field: str  # nvidia-smi's name: a --query-gpu field, or a path under <gpu> with `xml`
    collector: str | None  # the collector that reads it; None: identity, always read
    exporter: Extract  # the exporter's value, in nvidia-smi's unit
    unit: str = ""
    tolerance: float = 0.0  # absolute, in `unit`
    relative: float = 0.0  # share of nvidia-smi's value, where larger than `tolerance`
    xml: bool = False  # read from `nvidia-smi -q -x` rather than the query
    parse: Callable[[str], Value] = float  # nvidia-smi's text -> the value compared
    # a temperature threshold's T.Limit offset under <gpu>, which nvidia-smi prints instead
    # of the absolute threshold on some branches (R580: gpu_temp_slow_tlimit_threshold -2 C)
    tlimit: str = ""

    @property
    def numeric(self) -> bool:
        return self.parse is not str

    def allowed(self, reference: float) -> float:
        return max(self.tolerance, self.relative * abs(reference))


def _static(pick: Callable[[DeviceStatic], Value | None]) -> Extract:
    return lambda _s, d: pick(d.static) if d.static is not None else None


def _of(
    part: Callable[[DeviceReading], P | None],
    pick: Callable[[P], float | None],
    factor: float = 1.0,
) -> Extract:
    """One number of one reading (`part` picks the reading), times `factor`."""

    def extract(_snapshot: Snapshot, device: DeviceSample) -> Value | None:
        record = part(device.reading) if device.reading is not None else None
        value = pick(record) if record is not None else None
        return None if value is None else value * factor

    return extract


def _mode(pick: Callable[[ModesReading], bool | None]) -> Extract:
    """A mode as nvidia-smi writes it: Enabled or Disabled."""

    def extract(_snapshot: Snapshot, device: DeviceSample) -> Value | None:
        modes = device.reading.modes if device.reading is not None else None
        value = pick(modes) if modes is not None else None
        return None if value is None else ("Enabled" if value else "Disabled")

    return extract


def _pstate(text: str) -> float:
    """'P0' -> 0."""
    return float(text.removeprefix("P"))


def _driver(snapshot: Snapshot, _d: DeviceSample) -> str | None:
    return snapshot.driver.driver_version if snapshot.driver is not None else None


def _memory(pick: Callable[[MemoryReading], int | None]) -> Extract:
    return _of(lambda r: r.memory, pick, 1 / MIB)


def _clock(name: str) -> Extract:
    return _of(lambda r: r.clocks, lambda c: c.hertz.get(name), 1e-6)


def _max_clock(name: str) -> Extract:
    return _static(lambda st: None if (hz := st.max_clocks_hertz.get(name)) is None else hz / 1e6)


def _temperature(field: str, pick: Callable[[TemperatureReading], float | None]) -> Quantity:
    """A temperature in degrees Celsius, within 3 C (the sensor moves between reads)."""
    return Quantity(field, "temperature", _of(lambda r: r.temperature, pick), "C", tolerance=3)


def _ratio(pick: Callable[[DeviceReading], float | None]) -> Extract:
    """A ratio 0..1 as nvidia-smi's percent."""
    return _of(lambda r: r, pick, 100)


QUANTITIES: tuple[Quantity, ...] = (
    Quantity("name", None, _static(lambda st: st.name), parse=str),
    Quantity("uuid", None, _static(lambda st: st.uuid), parse=str),
    Quantity("pci.bus_id", None, _static(lambda st: st.pci_bus_id), parse=str),
    Quantity("driver_version", None, _driver, parse=str),
    Quantity("memory.total", "memory", _memory(lambda m: m.total_bytes), "MiB"),
    Quantity("memory.used", "memory", _memory(lambda m: m.used_bytes), "MiB", tolerance=64),
    Quantity("memory.free", "memory", _memory(lambda m: m.free_bytes), "MiB", tolerance=64),
    _temperature("temperature.gpu", lambda t: t.gpu_celsius),
    # Ada and later: the distance to T.Limit (nvmlDeviceGetMarginTemperature); the T.Limit
    # thresholds have no --query-gpu field
    _temperature("temperature.gpu.tlimit", lambda t: t.tlimit_margin_celsius),
    Quantity(
        "temperature/gpu_temp_slow_threshold",
        None,
        _static(lambda st: st.slowdown_temperature_celsius),
        "C",
        xml=True,
        tlimit="temperature/gpu_temp_slow_tlimit_threshold",
    ),
    Quantity(
        "temperature/gpu_temp_max_threshold",
        None,
        _static(lambda st: st.shutdown_temperature_celsius),
        "C",
        xml=True,
        tlimit="temperature/gpu_temp_max_tlimit_threshold",
    ),
    Quantity(
        "fan.speed",
        "temperature",
        _ratio(lambda r: r.temperature.fan_speed_ratio if r.temperature else None),
        "%",
        tolerance=5,
    ),
    Quantity(
        "power.draw",
        "power",
        _of(lambda r: r.power, lambda p: p.watts),
        "W",
        tolerance=10,
        relative=0.10,
    ),
    Quantity("enforced.power.limit", "power", _of(lambda r: r.power, lambda p: p.limit_watts), "W"),
    Quantity("clocks.gr", "clocks", _clock("graphics"), "MHz", relative=0.05),
    Quantity("clocks.sm", "clocks", _clock("sm"), "MHz", relative=0.05),
    Quantity("clocks.mem", "clocks", _clock("memory"), "MHz", relative=0.05),
    Quantity("clocks.video", "clocks", _clock("video"), "MHz", relative=0.05),
    Quantity("clocks.max.gr", None, _max_clock("graphics"), "MHz"),
    Quantity("clocks.max.sm", None, _max_clock("sm"), "MHz"),
    Quantity("clocks.max.mem", None, _max_clock("memory"), "MHz"),
    Quantity("max_clocks/video_clock", None, _max_clock("video"), "MHz", xml=True),
    Quantity(
        "pstate", "clocks", _of(lambda r: r.clocks, lambda c: c.performance_state), parse=_pstate
    ),
    Quantity(
        "utilization.gpu",
        "utilization",
        _ratio(lambda r: r.utilization.gpu_ratio if r.utilization else None),
        "%",
        tolerance=10,
    ),
    Quantity(
        "utilization.memory",
        "utilization",
        _ratio(lambda r: r.utilization.memory_controller_ratio if r.utilization else None),
        "%",
        tolerance=10,
    ),
    Quantity("pcie.link.gen.current", "pcie", _of(lambda r: r.pcie, lambda p: p.generation)),
    Quantity("pcie.link.gen.max", None, _static(lambda st: st.pcie_max_generation)),
    Quantity("pcie.link.width.current", "pcie", _of(lambda r: r.pcie, lambda p: p.width)),
    Quantity("pcie.link.width.max", None, _static(lambda st: st.pcie_max_width)),
    Quantity("ecc.mode.current", "modes", _mode(lambda m: m.ecc), parse=str),
    Quantity("persistence_mode", "modes", _mode(lambda m: m.persistence), parse=str),
    Quantity("mig.mode.current", "modes", _mode(lambda m: m.mig), parse=str),
    Quantity(
        "ecc.errors.corrected.volatile.total",
        "ecc",
        _of(lambda r: r.ecc, lambda e: e.corrected_errors),
    ),
    Quantity(
        "ecc.errors.uncorrected.volatile.total",
        "ecc",
        _of(lambda r: r.ecc, lambda e: e.uncorrected_errors),
    ),
)
COLLECTORS: frozenset[str] = frozenset(q.collector for q in QUANTITIES if q.collector)


def _show_tolerance(q: Quantity) -> str:
    unit = "points" if q.unit == "%" else q.unit  # percentage points
    parts = [f"{q.tolerance:g} {unit}".strip()] if q.tolerance else []
    parts += [f"{q.relative:.0%}"] if q.relative else []
    return " or ".join(parts) + (", whichever is larger" if len(parts) > 1 else "")


@dataclass(frozen=True, repr=False)
class Row(Record):
    """One line of the table: a value of one GPU on both sides, and the verdict."""

    gpu: str  # the exporter's index (nvidia-smi's for a GPU only it sees)
    field: str
    exporter: str  # as shown: the value, or the range "low..high" read during the check
    nvidia_smi: str
    verdict: Verdict
    detail: str = ""  # by how much; which side lacks it; why skipped

    @property
    def finding(self) -> bool:
        return self.verdict in ("differ", "absent")

    @property
    def says(self) -> str:
        """The verdict column: 'differ by 6 C (tolerance 3 C)', 'agree (N/A on both sides)'."""
        if not self.detail:
            return self.verdict
        if self.finding:
            return f"{self.verdict} {self.detail}"
        return f"{self.verdict} ({self.detail})"


GPU_TEMPERATURE = "temperature.gpu"
TLIMIT_MARGIN = "temperature.gpu.tlimit"
TLIMIT_TOLERANCE_CELSIUS = 1.0
"""A threshold through the T.Limit margin: nvidia-smi's temperature and margin are whole
degrees, read at one moment."""


def nvidia_smi_answer(
    q: Quantity, smi: Mapping[str, str | None]
) -> tuple[Quantity, str | None, str]:
    """nvidia-smi's answer for `q`: (the quantity as judged, the answer, what to show).

    Where nvidia-smi prints a temperature threshold only as its offset from T.Limit
    (R580: `gpu_temp_slow_tlimit_threshold` -2 C, no absolute threshold), the absolute
    threshold is the temperature at which the T.Limit margin reaches that offset: the
    temperature plus the margin (= T.Limit) minus the offset, within 1 C."""
    answer = smi.get(q.field, MISSING)
    shown = "N/A" if answer is None else answer
    if answer != MISSING or not q.tlimit:
        return q, answer, shown
    offset, celsius, margin = (
        smi.get(f, MISSING) for f in (q.tlimit, GPU_TEMPERATURE, TLIMIT_MARGIN)
    )
    if (
        offset is None
        or offset == MISSING
        or celsius in (None, MISSING)
        or margin in (None, MISSING)
    ):
        return q, answer, shown
    try:
        tlimit = float(str(celsius)) + float(str(margin))
        absolute = tlimit - float(offset)
    except ValueError:
        return q, answer, shown
    through = replace(q, tolerance=TLIMIT_TOLERANCE_CELSIUS)
    text = f"{absolute:.0f}"
    return through, text, f"{text} (T.Limit {tlimit:.0f} {-float(offset):+.0f} C)"


def _digits(text: str) -> int:
    """The decimals nvidia-smi printed: '700.00' -> 2."""
    _, dot, decimals = text.partition(".")
    return len(decimals) if dot else 0


def _show(value: float, digits: int) -> str:
    return f"{value:.{digits}f}"


def judge(
    gpu: str,
    q: Quantity,
    values: Sequence[Value],
    answer: str | None,
    *,
    skipped: str = "",
    shown: str | None = None,
) -> Row:
    """The verdict on one value: `values` the exporter read during the check (none:
    it has none), `answer` nvidia-smi's text (None: N/A; MISSING: not in its output),
    `shown` what the table shows of it (the answer unless said)."""
    if shown is None:
        shown = "N/A" if answer is None else answer
    exporter = "not read" if skipped else _show_values(q, values, answer)

    def row(verdict: Verdict, detail: str = "") -> Row:
        return Row(gpu, q.field, exporter, shown, verdict, detail)

    if skipped or answer == MISSING:
        return row("skipped", skipped or "this nvidia-smi does not report it")
    if not values:
        return (
            row("agree", "N/A on both sides")
            if answer is None
            else row("absent", "in the exporter")
        )
    if answer is None:
        return row("absent", "in nvidia-smi")
    if not q.numeric:
        return row("agree" if answer in values else "differ")
    try:
        smi = float(q.parse(answer))
    except ValueError:
        return row("differ", "not a number")
    numbers = [float(v) for v in values]
    distance = max(min(numbers) - smi, smi - max(numbers), 0.0)
    digits = _digits(answer)
    allowed = q.allowed(smi)
    if distance <= allowed or distance < 10.0**-digits:
        return row("agree")
    by = f"by {_show(distance, digits)}{' ' + q.unit if q.unit else ''}"
    return row("differ", by + (f" (tolerance {_show_tolerance(q)})" if allowed else " (exact)"))


def _show_values(q: Quantity, values: Sequence[Value], answer: str | None) -> str:
    """The exporter's column: 'absent', one value, or the range it read, printed with
    nvidia-smi's decimals."""
    if not values:
        return "absent" if answer is not None and answer != MISSING else "N/A"
    if not q.numeric:
        return " | ".join(dict.fromkeys(str(v) for v in values))
    digits = _digits(answer) if answer is not None and answer != MISSING else 0
    low = _show(min(float(v) for v in values), digits)
    high = _show(max(float(v) for v in values), digits)
    return low if low == high else f"{low}..{high}"
