"""Alert and recording rules: promtool checks and tests them, and they keep their contract.

`python -m tests.test_rules --write` regenerates deploy/kubernetes/prometheusrule.yaml
from deploy/prometheus/rules/*.yml.
"""

from __future__ import annotations

import copy
import functools
import re
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

from gpu_exporter.metrics.catalogue import METRICS_BY_NAME
from gpu_exporter.metrics.specs import RenderOptions
from gpu_exporter.model import NVLINK_ERRORS
from gpu_exporter.print_config import DEFAULT_RUNBOOK_BASE
from tests.support.exporter import REPO

PROMETHEUS = REPO / "deploy" / "prometheus"
RULES = PROMETHEUS / "rules"
RULE_FILES = (RULES / "gpu-recording.yml", RULES / "gpu-alerts.yml")
ALERT_TESTS = PROMETHEUS / "tests" / "gpu-alerts.test.yml"
RECORDING_TESTS = PROMETHEUS / "tests" / "gpu-recording.test.yml"
CHARGEBACK_TESTS = PROMETHEUS / "tests" / "gpu-chargeback.test.yml"
# NVLink over days (GPUNVLinkDegrading), evaluated once an hour
NVLINK_TREND_TESTS = PROMETHEUS / "tests" / "gpu-nvlink-trend.test.yml"
# a link down for a day (GPUNVLinkDown), evaluated every 4 minutes
NVLINK_DAY_TESTS = PROMETHEUS / "tests" / "gpu-nvlink-day.test.yml"
ALERT_TEST_FILES = (ALERT_TESTS, NVLINK_TREND_TESTS, NVLINK_DAY_TESTS)
PROMETHEUS_RULE = REPO / "deploy" / "kubernetes" / "prometheusrule.yaml"
ALERTS_DOC = REPO / "docs" / "alerts.md"

# labels the scrape adds to every series (target labels)
TARGET_LABELS = frozenset({"instance", "job"})
# series Prometheus itself makes
BUILTIN_METRICS = {"up": TARGET_LABELS}
SEVERITIES = frozenset({"critical", "warning", "info"})

# the labels a series can carry with any option on (a rule may name the pod of a process:
# present with --collector.kubernetes, absent, and so empty, without)
EVERY_LABEL = RenderOptions(cmdline=True, kubernetes=True, nvlink_per_link=True)


def promtool(*args: str) -> subprocess.CompletedProcess[str]:
    binary = shutil.which("promtool")
    assert binary, "promtool is not installed: run `make system-deps`"
    return subprocess.run(
        [binary, *args], capture_output=True, text=True, timeout=120, cwd=PROMETHEUS / "tests"
    )


def load(path: Path) -> Any:
    return yaml.safe_load(path.read_text())


@functools.cache
def _groups() -> tuple[dict[str, Any], ...]:
    return tuple(group for path in RULE_FILES for group in load(path)["groups"])


def groups() -> list[dict[str, Any]]:
    """The rule files' groups (parsed once: the label checks walk them per reference;
    a test that changes one changes a deep copy)."""
    return copy.deepcopy(list(_groups()))


def alerts() -> dict[str, dict[str, Any]]:
    return {r["alert"]: r for g in groups() for r in g["rules"] if "alert" in r}


def recordings() -> dict[str, dict[str, Any]]:
    return {r["record"]: r for g in _groups() for r in g["rules"] if "record" in r}


# --- promtool ------------------------------------------------------------------------


def test_promtool_check_rules_passes() -> None:
    result = promtool("check", "rules", *(str(p) for p in RULE_FILES))
    assert result.returncode == 0, result.stdout + result.stderr
    assert "SUCCESS" in result.stdout


def test_promtool_check_rules_rejects_a_broken_expression(tmp_path: Path) -> None:
    broken = tmp_path / "broken.yml"
    text = (RULES / "gpu-alerts.yml").read_text()
    broken.write_text(text.replace("gpu_up == 0", "gpu_up == == 0"))
    result = promtool("check", "rules", str(broken))
    assert result.returncode != 0


@pytest.mark.parametrize(
    "tests",
    [ALERT_TESTS, RECORDING_TESTS, CHARGEBACK_TESTS, NVLINK_TREND_TESTS, NVLINK_DAY_TESTS],
    ids=lambda p: p.name,
)
def test_promtool_test_rules_passes(tests: Path) -> None:
    result = promtool("test", "rules", str(tests))
    assert result.returncode == 0, result.stdout + result.stderr
    assert "SUCCESS" in result.stdout


def test_promtool_test_rules_fails_when_an_alert_changes(tmp_path: Path) -> None:
    """The unit tests are sharp: a changed condition makes them fail."""
    # GPUMemoryNearFull paging for a reservation held flat too
    result = changed_rules_tested(
        tmp_path,
        "gpu-alerts.yml",
        'gpu_memory_pattern{pattern=~"pressure|sharing"}',
        'gpu_memory_pattern{pattern=~"pressure|sharing|reserved"}',
        ALERT_TESTS,
        only="GPUMemoryNearFull",
    )
    assert result.returncode != 0
    assert "GPUMemoryNearFull" in result.stdout + result.stderr


def changed_rules_tested(
    tmp_path: Path, rule_file: str, old: str, new: str, tests: Path, only: str = ""
) -> subprocess.CompletedProcess[str]:
    """promtool's run of the unit tests `tests` on the rule files with `old` replaced by
    `new` in `rule_file`; where `only` names an alert, of its cases alone (the rest of
    a file's cases would cost promtool's time and prove nothing more)."""
    rules = tmp_path / "rules"
    rules.mkdir()
    for path in RULE_FILES:
        text = path.read_text()
        if path.name == rule_file:
            assert old in text
            text = text.replace(old, new)
        (rules / path.name).write_text(text)
    (tmp_path / "tests").mkdir()
    shutil.copy(tests, tmp_path / "tests")
    if only:
        cases = load(tests)
        cases["tests"] = [
            t
            for t in cases["tests"]
            if any(c["alertname"] == only for c in t.get("alert_rule_test", []))
        ]
        assert cases["tests"], f"{tests.name} has no case of {only}"
        (tmp_path / "tests" / tests.name).write_text(yaml.safe_dump(cases, sort_keys=False))
    return promtool("test", "rules", str(tmp_path / "tests" / tests.name))


def test_promtool_trend_tests_fail_when_one_hour_of_trouble_warns(tmp_path: Path) -> None:
    """The multi-day cases are sharp: a warning on any hour of trouble, not 6 of 24,
    fires on the burst of recovery events after a reboot, and the unit tests say so."""
    result = changed_rules_tested(
        tmp_path, "gpu-alerts.yml", ") >= 6\n", ") >= 1\n", NVLINK_TREND_TESTS
    )
    assert result.returncode != 0
    assert "one burst of recovery events after a reboot" in result.stdout + result.stderr


def test_every_alert_has_a_firing_and_a_quiet_case() -> None:
    firing: set[str] = set()
    quiet: set[str] = set()
    for test in (t for path in ALERT_TEST_FILES for t in load(path)["tests"]):
        for case in test.get("alert_rule_test", []):
            (firing if case.get("exp_alerts") else quiet).add(case["alertname"])
    defined = set(alerts())
    assert firing | quiet <= defined, f"tests for unknown alerts: {(firing | quiet) - defined}"
    assert defined - firing == set(), "alerts never tested firing"
    assert defined - quiet == set(), "alerts never tested quiet"


def test_every_recording_rule_is_tested() -> None:
    """Each recorded series has a case of its own (the chargeback's rounded to 0.001:
    promtool compares floats exactly, and their products carry the last bit)."""
    tested = {
        case["expr"].removeprefix("round(").split("{")[0].split(",")[0].strip()
        for path in (RECORDING_TESTS, CHARGEBACK_TESTS, NVLINK_TREND_TESTS, NVLINK_DAY_TESTS)
        for test in load(path)["tests"]
        for case in test.get("promql_expr_test", [])
    }
    assert set(recordings()) - tested == set()


def test_promtool_test_rules_fails_when_a_chargeback_invariant_breaks(tmp_path: Path) -> None:
    """Used seconds capped at the allocation is what keeps used <= allocated: without
    the cap, the time-sliced pod that ran beyond its half is charged more than it held,
    and the unit tests say so."""
    capped = (
        "instance_gpu_owner:gpu_busy_seconds:sum1m"
        " <= instance_gpu_owner:gpu_allocated_seconds:sum1m"
    )
    result = changed_rules_tested(
        tmp_path,
        "gpu-recording.yml",
        capped,
        "instance_gpu_owner:gpu_busy_seconds:sum1m",
        CHARGEBACK_TESTS,
    )
    assert result.returncode != 0
    assert "instance_gpu_owner:gpu_used_seconds:sum1m > " in result.stdout + result.stderr


def test_the_test_files_load_both_rule_files() -> None:
    wanted = {"../rules/gpu-recording.yml", "../rules/gpu-alerts.yml"}
    assert set(load(ALERT_TESTS)["rule_files"]) == wanted
    assert set(load(RECORDING_TESTS)["rule_files"]) <= wanted
    assert set(load(CHARGEBACK_TESTS)["rule_files"]) <= wanted
    assert set(load(NVLINK_TREND_TESTS)["rule_files"]) == wanted
    assert set(load(NVLINK_DAY_TESTS)["rule_files"]) == wanted


# --- the alert contract -----------------------------------------------------------------

REQUIRED_ALERTS = {
    "GPUExporterDown",
    "GPUExporterStale",
    "GPUNVMLDown",
    "GPULost",
    "GPUMissing",
    "GPUXidCritical",
    "GPUXidNotFromDriver",  # an Xid line a program wrote into the kernel log
    "GPUEccUncorrectable",
    "GPURowRemapFailure",
    "GPURowRemapPending",
    "GPUThermalThrottling",
    "GPUPowerBrake",
    "GPUPCIeLinkDegraded",
    "GPUMemoryNearFull",
    "GPUMemoryFillingUp",
    "GPUIdleWhileAllocated",
    "GPUInputBound",
    "GPUMemoryLeaked",
    "GPUBusyButSMsIdle",
    "GPUNVLinkDown",
    "GPUNVLinkErrors",
    "GPUNVLinkDegrading",  # a link in slow decline, days before it fails (issue 51)
    "GPUAllocatedButIdle",
    "GPUUsedWithoutAllocation",
    "GPUKubernetesAttributionDown",
    # what to do with each GPU (issue 36, item 7)
    "GPUNeedsReboot",
    "GPUNeedsInspection",
    "GPUNeedsDrain",
    "GPUNeedsReset",
    "GPUFabricUnhealthy",
    "GPUFabricNotRegistered",
    # the fabric's own daemons (issue 51, item 4)
    "GPUFabricDaemonDown",
    # a likely out-of-memory death, named (issue 50)
    "GPUJobEndedWhileMemoryFull",
}


def test_the_issue_s_alerts_are_all_there() -> None:
    assert set(alerts()) == REQUIRED_ALERTS


def github_anchor(heading: str) -> str:
    """GitHub's slug of a Markdown heading."""
    slug = heading.strip().lower()
    slug = re.sub(r"[^\w\- ]", "", slug)
    return slug.replace(" ", "-")


def doc_anchors() -> set[str]:
    return {
        github_anchor(line.lstrip("#"))
        for line in ALERTS_DOC.read_text().splitlines()
        if line.startswith("#")
    }


@pytest.mark.parametrize("name", sorted(REQUIRED_ALERTS))
def test_alert_has_severity_summary_description_and_a_runbook_section(name: str) -> None:
    rule = alerts()[name]
    assert rule["labels"]["severity"] in SEVERITIES
    annotations = rule["annotations"]
    assert set(annotations) == {"summary", "description", "runbook_url"}
    assert annotations["summary"].strip() and len(annotations["description"]) > 40
    # one base for every link (the exporter's /runbooks unless --runbook-url rewrites it),
    # and the anchor of the alert's section in docs/alerts.md, which /runbooks serves
    base, _, anchor = annotations["runbook_url"].rpartition("#")
    assert base == DEFAULT_RUNBOOK_BASE
    assert anchor == name.lower()
    assert anchor in doc_anchors(), f"docs/alerts.md has no section for {name}"


def test_alerts_doc_explains_each_alert_s_cause_and_fix() -> None:
    text = ALERTS_DOC.read_text()
    sections = re.split(r"^## ", text, flags=re.M)[1:]
    by_name = {s.splitlines()[0].strip(): s for s in sections}
    for name in REQUIRED_ALERTS:
        section = by_name.get(name)
        assert section, f"no '## {name}' section"
        assert re.search(r"\*\*Cause", section) and re.search(r"\*\*Fix", section), name


def test_input_bound_runbook_names_the_dataloader_fixes() -> None:
    section = ALERTS_DOC.read_text().split("## GPUInputBound", 1)[1].split("\n## ", 1)[0]
    for term in ("num_workers", "pin_memory", "augmentation"):
        assert term in section


def thresholds(expr: str) -> list[float]:
    """The numbers an expression compares with (`< 0.05`, `> 0.95`)."""
    return [float(n) for n in re.findall(r"(?:<|>|<=|>=|==|!=)\s*(\d+(?:\.\d+)?)\b", expr)]


def test_thresholds_example() -> None:
    assert thresholds("(a / b or c / d) > 0.95 and e < 0.05 and f == 1") == [0.95, 0.05, 1.0]


def test_mig_instances_share_the_gpu_thresholds() -> None:
    """One threshold per question: MIG instances are judged by the GPUs' numbers."""
    rules = recordings()
    gpu_idle = (
        rules["instance_gpu:gpu_idle:ratio_rate30m"]["expr"]
        + rules["instance_gpu:gpu_idle_while_allocated:ratio_rate30m"]["expr"]
    )
    mig_idle = rules["instance_gpu_instance:gpu_mig_idle_while_allocated:ratio_rate30m"]["expr"]
    assert set(thresholds(gpu_idle)) == set(thresholds(mig_idle)) == {0.05, 0.0}
    idle = alerts()["GPUIdleWhileAllocated"]["expr"]
    assert idle.strip().startswith(
        "(\n  instance_gpu:gpu_idle_while_allocated:ratio_rate30m\n  or\n"
        "  instance_gpu_instance:gpu_mig_idle_while_allocated:ratio_rate30m\n)\n"
    )
    assert thresholds(idle) == []
    # memory: the exporter's patterns for GPUs and instances alike, and GPUMemoryFillingUp
    # leaves to GPUMemoryNearFull what is near full, for both
    near_full = " ".join(alerts()["GPUMemoryNearFull"]["expr"].split())
    assert thresholds(near_full) == [1.0, 1.0]  # the pattern series, no ratio of its own
    for pattern in ("gpu_memory_pattern", "gpu_mig_memory_pattern"):
        assert f'{pattern}{{pattern=~"pressure|sharing"}} == 1' in near_full
    filling = alerts()["GPUMemoryFillingUp"]["expr"]
    unless = filling.split("unless", 2)[2]
    assert thresholds(unless) == [0.95, 300.0, 300.0]
    assert "gpu_mig_memory_used_bytes / gpu_mig_memory_total_bytes" in unless


TOP_HOLDER = re.compile(
    r"\* on \(instance, job, gpu, uuid, gpu_instance\) "
    r"group_left \(user, container_id, pod_uid, namespace, pod\)"
    r"\s*\(\s*topk by \(instance, job, gpu, uuid, gpu_instance\) "
    r'\(1, gpu_process_memory_used_bytes\{pid!=""\}\) \* 0 \+ 1'
    r"\s*or on \(instance, job, gpu, uuid, gpu_instance\)"
    r"\s*\(gpu_up or gpu_mig_memory_total_bytes\) \* 0 \+ 1\s*\)\s*$"
)


@pytest.mark.parametrize("name", ["GPUMemoryNearFull", "GPUIdleWhileAllocated"])
def test_alerts_a_process_causes_name_its_largest_holder(name: str) -> None:
    """The user, container and pod of the process holding the most memory come with the
    alert (the promtool cases show it), and the alert stays when no process is there."""
    rule = alerts()[name]
    assert TOP_HOLDER.search(rule["expr"]), rule["expr"]
    assert "$labels.user" in rule["annotations"]["summary"]
    assert "$labels.container_id" in rule["annotations"]["summary"]
    assert "$labels.pod_uid" in rule["annotations"]["description"]


def test_busy_but_sms_idle_reads_the_busy_and_sm_counters() -> None:
    expr = alerts()["GPUBusyButSMsIdle"]["expr"]
    assert re.search(r"rate\(gpu_busy_seconds_total\[\w+\]\) > 0\.8\b", expr)
    assert re.search(r"rate\(gpu_sm_active_seconds_total\[\w+\]\) < 0\.2\b", expr)
    assert alerts()["GPUBusyButSMsIdle"]["for"] == "30m"


def test_nvlink_alerts_leave_out_replays_and_links_never_up() -> None:
    down = alerts()["GPUNVLinkDown"]["expr"]
    assert "gpu_nvlink_link_up == 0" in down
    # "up in the last day" is kept by a recording rule, not read from a day of samples
    state = "instance_gpu_link:gpu_nvlink_link_up:last_up_timestamp1d"
    # a link's state is kept a day after it was last up, and the alert asks only that
    # it is there (comparing it with the time again costs a pass over every link)
    assert f"and on (instance, job, gpu, uuid, link)\n  {state}\n" in down
    assert "over_time" not in down
    assert "(gpu_nvlink_link_up == 1)" in recordings()[state]["expr"]
    assert f"{state} > time() - 86400" in recordings()[state]["expr"]
    errors = alerts()["GPUNVLinkErrors"]["expr"]
    # one alert per GPU and type from the default per-GPU totals and from per-link series
    assert " ".join(errors.split()).startswith(
        "sum without (link) ( increase(gpu_nvlink_errors_total{"
    )
    (types,) = re.findall(r'error_type=~"([^"]+)"', errors)
    # NVLink5's fault counters too (Blackwell answers no legacy one); its bit errors
    # before and after correction, like replays, are not faults by themselves. Every
    # type the exporter counts is decided here: a new one fails until it is classified.
    assert set(types.split("|")) == set(NVLINK_ERRORS) - {"replay", "effective", "symbol"}
    # the rack view's per-GPU fault totals count what the alert counts, by one matcher
    faults = recordings()["instance_gpu:gpu_nvlink_faults_total:sum"]["expr"]
    assert re.findall(r'error_type[!=]~"[^"]+"', faults) == [f'error_type=~"{types}"']


def test_nvlink_degrading_counts_hours_of_trouble_recorded_once_an_hour() -> None:
    """The trend alert counts the hourly points of one recorded family over a day, so
    its group must run once an hour; it never sums the recovery counter's results (the
    driver's "all" is itself the total), and every signal is one of the family."""
    (group,) = [g for g in groups() if g["name"] == "gpu-exporter.recording.nvlink-trend"]
    assert group["interval"] == "1h"
    records = group["rules"]
    assert {r["record"] for r in records} == {"instance_gpu_link:gpu_nvlink_degrading:increase1h"}
    assert [r["labels"]["signal"] for r in records] == [
        "link_recovery",
        "recovery",
        "effective_ber",
    ]
    assert 'result="all"' in records[0]["expr"] and "[1h]" in records[0]["expr"]
    assert all("[1h]" in r["expr"] for r in records)
    assert thresholds(records[2]["expr"]) == [1e-12] or "> 1e-12" in records[2]["expr"]
    expr = alerts()["GPUNVLinkDegrading"]["expr"]
    assert (
        expr.count("count_over_time(instance_gpu_link:gpu_nvlink_degrading:increase1h[1d]) >= 6")
        == 2
    )


def test_busy_but_sms_idle_runbook_says_how_to_confirm_and_fix() -> None:
    section = ALERTS_DOC.read_text().split("## GPUBusyButSMsIdle", 1)[1].split("\n## ", 1)[0]
    for term in ("nsys", "ncu", "CUDA graph", "batch", "stream"):
        assert term in section, term


def test_xid_alert_covers_fallen_off_the_bus() -> None:
    expr = alerts()["GPUXidCritical"]["expr"]
    lists = set(re.findall(r'xid=~"([^"]+)"', expr))
    assert len(lists) == 1, "every selector of the Xid alert should use the same list"
    xids = set(lists.pop().split("|"))
    assert "79" in xids
    assert "13" not in xids and "31" not in xids, "application errors must not page"
    doc = ALERTS_DOC.read_text().split("## GPUXidCritical", 1)[1].split("\n## ", 1)[0]
    for xid in xids:
        assert re.search(rf"\|\s*{xid}\s*\|", doc), f"Xid {xid} is not explained"


# --- metric names and labels --------------------------------------------------------------

TOKEN = re.compile(
    r"""(?P<string>"(?:\\.|[^"\\])*"|'(?:\\.|[^'\\])*'|`[^`]*`)
      |(?P<matchers>\{[^}]*\})
      |(?P<range>\[[^\]]*\])
      |(?P<duration>\d+(?:ms|[smhdwy])\b)
      |(?P<number>\d+(?:\.\d+)?(?:[eE][+-]?\d+)?)
      |(?P<ident>[A-Za-z_:][A-Za-z0-9_:]*)
      |(?P<other>\S)""",
    re.X,
)
KEYWORDS = frozenset({"and", "or", "unless", "bool", "offset", "inf", "nan"})
# aggregations may be followed by `by (...)` instead of their opening parenthesis
AGGREGATIONS = frozenset(
    {"sum", "min", "max", "avg", "group", "stddev", "stdvar", "count", "count_values"}
    | {"bottomk", "topk", "quantile"}
)
LABEL_LIST_KEYWORDS = frozenset({"by", "without", "on", "ignoring", "group_left", "group_right"})
MATCHER = re.compile(r"([A-Za-z_][A-Za-z0-9_]*)\s*(?:=~|!~|!=|=)")


def references(expr: str) -> tuple[list[tuple[str, list[str]]], list[str]]:
    """([(metric name, labels in its matchers)], [labels named in by/on/... lists])."""
    tokens = [(m.lastgroup, m.group()) for m in TOKEN.finditer(expr)]
    selectors: list[tuple[str, list[str]]] = []
    grouping: list[str] = []
    i = 0
    while i < len(tokens):
        kind, text = tokens[i]
        following = tokens[i + 1] if i + 1 < len(tokens) else (None, "")
        if kind == "ident" and text in LABEL_LIST_KEYWORDS:
            if following[1] == "(":
                i += 2
                while i < len(tokens) and tokens[i][1] != ")":
                    if tokens[i][0] == "ident":
                        grouping.append(tokens[i][1])
                    i += 1
            i += 1
            continue
        if kind == "ident" and text not in KEYWORDS | AGGREGATIONS and following[1] != "(":
            labels = MATCHER.findall(following[1]) if following[0] == "matchers" else []
            selectors.append((text, labels))
        elif kind == "matchers" and (i == 0 or tokens[i - 1][0] != "ident"):
            raise AssertionError(f"selector without a metric name in {expr!r}")
        i += 1
    return selectors, grouping


@functools.cache
def recorded_labels(record: str, seen: frozenset[str] = frozenset()) -> frozenset[str]:
    """Labels a recorded series may carry: those of the metrics its rules read (every
    rule that records it: a name may have several, as the chargeback's remainder rows)."""
    rules = recordings()
    selectors = [
        selector
        for g in _groups()
        for r in g["rules"]
        if r.get("record") == record
        for selector in references(r["expr"])[0]
    ]
    labels = set(TARGET_LABELS)
    labels |= {  # and those its rules set (the chargeback's `reason`, `method`)
        label
        for g in _groups()
        for r in g["rules"]
        if r.get("record") == record
        for label in r.get("labels", {})
    }
    for name in {name for name, _ in selectors}:  # each name once, however often read
        if name in rules and name not in seen:
            labels |= recorded_labels(name, seen | {record})
        elif name in METRICS_BY_NAME:
            labels |= set(METRICS_BY_NAME[name].label_names(EVERY_LABEL))
    return frozenset(labels)


def check_names(expr: str, recorded: set[str]) -> list[str]:
    """Problems with the metric names and labels `expr` uses; empty when all is well."""
    problems = []
    selectors, grouping = references(expr)
    known_labels = set(TARGET_LABELS)
    for name, labels in selectors:
        if name in recorded:
            known_labels |= recorded_labels(name)
            continue
        if name in BUILTIN_METRICS:
            allowed = set(BUILTIN_METRICS[name])
        elif name in METRICS_BY_NAME:
            allowed = set(METRICS_BY_NAME[name].label_names(EVERY_LABEL)) | TARGET_LABELS
        else:
            problems.append(f"unknown metric {name}")
            continue
        known_labels |= allowed
        problems += [f"{name} has no label {label}" for label in labels if label not in allowed]
    if "gpu_info" in expr or any(name in recorded for name, _ in selectors):
        known_labels |= set(METRICS_BY_NAME["gpu_info"].label_names(EVERY_LABEL))
    problems += [f"unknown label {label}" for label in grouping if label not in known_labels]
    return problems


def test_reference_checker_finds_bad_names_and_labels() -> None:
    """The checker below is not vacuous."""
    recorded = set(recordings())
    assert (
        check_names(
            "sum by (gpu_instance) (instance_gpu_instance:gpu_mig_sm_active:ratio_rate5m)", recorded
        )
        == []
    )
    assert check_names("sum by (gpu_instance) (instance_gpu:gpu_busy:ratio_rate5m)", recorded) == [
        "unknown label gpu_instance"
    ]
    assert check_names("rate(gpu_busy_second_total[5m])", set()) == [
        "unknown metric gpu_busy_second_total"
    ]
    assert check_names('gpu_ecc_errors_total{type="uncorrected"}', set()) == [
        "gpu_ecc_errors_total has no label type"
    ]
    assert check_names("sum by (node) (gpu_up)", set()) == ["unknown label node"]
    assert (
        check_names(
            'increase(gpu_xid_errors_total{xid=~"79"}[10m]) > 0 and on (instance, gpu) gpu_up'
            " offset 5m",
            set(),
        )
        == []
    )


@pytest.mark.parametrize(
    "rule",
    list(dict.fromkeys(r.get("alert") or r.get("record") for g in groups() for r in g["rules"])),
)
def test_rules_use_only_catalogue_metrics_and_their_labels(rule: str) -> None:
    """Every rule of that name (a recorded family may have several, told apart by labels)."""
    recorded = set(recordings())
    for spec in [
        r for g in groups() for r in g["rules"] if rule in (r.get("alert"), r.get("record"))
    ]:
        assert check_names(spec["expr"], recorded) == [], spec


def test_recording_rules_use_rules_defined_before_them() -> None:
    """A rule reading another group's rule sees it one evaluation late; in a group, in order."""
    seen: set[str] = set()
    recorded = set(recordings())
    for group in load(RULES / "gpu-recording.yml")["groups"]:
        for rule in group["rules"]:
            selectors, _ = references(rule["expr"])
            for name, _ in selectors:
                # its own last value, or another's of the evaluation before: state
                state = name == rule["record"] or re.search(
                    re.escape(name) + r"\s+offset\s", rule["expr"]
                )
                if name in recorded and not state:
                    assert name in seen, f"{rule['record']} uses {name} before it is recorded"
            seen.add(rule["record"])


def test_recording_rule_names_follow_level_metric_operations() -> None:
    for name in recordings():
        level, metric, operations = name.split(":")
        assert level and metric.startswith("gpu_") and operations, name


# --- the PrometheusRule manifest ----------------------------------------------------------

HEADER = """\
# The rules of deploy/prometheus/rules/*.yml for the Prometheus Operator.
# Generated: `python -m tests.test_rules --write` (tests/test_rules.py fails if the two
# ever differ). Your Prometheus' ruleSelector may require a label such as
# `release: kube-prometheus-stack`; add it under metadata.labels.
"""


def render_prometheusrule() -> str:
    manifest = {
        "apiVersion": "monitoring.coreos.com/v1",
        "kind": "PrometheusRule",
        "metadata": {
            "name": "gpu-exporter",
            "labels": {"app.kubernetes.io/name": "gpu-exporter"},
        },
        "spec": {"groups": groups()},
    }

    class Dumper(yaml.SafeDumper):
        pass

    def string(dumper: yaml.SafeDumper, value: str) -> yaml.Node:
        style = "|" if "\n" in value else None
        return dumper.represent_scalar("tag:yaml.org,2002:str", value, style=style)

    Dumper.add_representer(str, string)
    return HEADER + yaml.dump(manifest, Dumper=Dumper, sort_keys=False, width=120)


def test_prometheusrule_holds_exactly_the_rule_files_rules() -> None:
    manifest = load(PROMETHEUS_RULE)
    assert manifest["apiVersion"] == "monitoring.coreos.com/v1"
    assert manifest["kind"] == "PrometheusRule"
    assert manifest["metadata"]["name"]
    assert manifest["spec"]["groups"] == groups(), (
        "deploy/kubernetes/prometheusrule.yaml differs from deploy/prometheus/rules/*.yml: "
        "run `python -m tests.test_rules --write`"
    )


def test_prometheusrule_comparison_notices_a_changed_threshold() -> None:
    manifest = load(PROMETHEUS_RULE)
    rule = next(r for r in manifest["spec"]["groups"][-1]["rules"] if "0.95" in r["expr"])
    rule["expr"] = rule["expr"].replace("0.95", "0.90")
    assert manifest["spec"]["groups"] != groups()


def test_prometheusrule_rules_pass_promtool(tmp_path: Path) -> None:
    """The manifest's spec is itself a valid rule file."""
    spec = tmp_path / "spec.yml"
    spec.write_text(yaml.safe_dump(load(PROMETHEUS_RULE)["spec"]))
    result = promtool("check", "rules", str(spec))
    assert result.returncode == 0, result.stdout + result.stderr


if __name__ == "__main__":
    if sys.argv[1:] != ["--write"]:
        sys.exit("usage: python -m tests.test_rules --write")
    PROMETHEUS_RULE.write_text(render_prometheusrule())
    print(f"wrote {PROMETHEUS_RULE.relative_to(REPO)}")
