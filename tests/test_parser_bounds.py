"""No parser of outside input can be made slow (issue 35, item 2).

A 24,000-character MIG device name once froze the whole exporter for seconds: a pattern
whose repeats shared characters backtracked quadratically, on the sampler thread, holding
the GIL. Two checks keep any parser from doing so again, neither of them a timing:

- every regular expression in the package has no shape that backtracks more than
  linearly (`tests/support/backtracking.py`), and the checker finds the shapes that
  froze or could have frozen it;
- every parser of input from outside refuses a 100,000-character input shaped to make
  it work hardest, and a recorder on every compiled pattern of the package shows that no
  pattern of unbounded width was given more than MAX_SCANNED characters: a parser caps
  its input before such a pattern scans it.

`make bench-parsers` times the same cases (`benchmarks/parsers.py`).
"""

from __future__ import annotations

import importlib
import pkgutil
import re
import re._parser as parser
from re._constants import MAXREPEAT
from typing import Any

import pytest

import gpu_exporter
from tests.support.backtracking import problems
from tests.support.outside_input import SIZE, Case, cases

MAX_SCANNED = 16 * 1024  # the longest text a pattern may see: an HTTP head's bound


def _modules() -> list[Any]:
    out = []
    for info in pkgutil.walk_packages(gpu_exporter.__path__, "gpu_exporter."):
        if info.name.endswith("__main__"):
            continue
        out.append(importlib.import_module(info.name))
    return out


def _patterns() -> dict[str, re.Pattern[Any]]:
    return {
        f"{module.__name__}.{name}": value
        for module in _modules()
        for name, value in vars(module).items()
        if isinstance(value, re.Pattern)
    }


def test_no_pattern_in_the_package_backtracks_more_than_linearly() -> None:
    patterns = _patterns()
    assert len(patterns) >= 20  # the walk found them
    assert {name: found for name, pattern in patterns.items() if (found := problems(pattern))} == {}


@pytest.mark.parametrize(
    "pattern",
    [
        r"gpu-(\d+)-mig-([a-z0-9-]*[a-z][a-z0-9-]*)-(\d+)-(\d+)",  # froze the sampler
        r"^\s*([-+]?\d+(?:\.\d+)?)\s*(ms|s|m|h)?\s*$",  # --collect.interval and the rest
        r"(\d+\.?\d*|\.\d+)(ns|us|ms|s|m|h)",  # the web config's rate limit
        r"(a+)+$",
        r"(?:[a-z]{1,3})*x",
    ],
)
def test_the_checker_finds_the_shapes_that_backtrack(pattern: str) -> None:
    assert problems(re.compile(pattern))


class _Recorder:
    """A compiled pattern that notes the longest text it was given."""

    def __init__(self, pattern: re.Pattern[Any], seen: dict[str, int], name: str) -> None:
        self._pattern, self._seen, self._name = pattern, seen, name
        # a pattern of bounded width (`0(?:\.[0-9]{0,3})?`) reads a bounded part of any
        # text at each start: it needs no cap on its input
        self._unbounded = parser.parse(pattern.pattern, pattern.flags).getwidth()[1] >= MAXREPEAT

    def __getattr__(self, attribute: str) -> Any:
        method = getattr(self._pattern, attribute)
        if not callable(method):
            return method

        def call(*args: Any, **kwargs: Any) -> Any:
            for arg in args if self._unbounded else ():
                if isinstance(arg, str | bytes):
                    self._seen[self._name] = max(self._seen.get(self._name, 0), len(arg))
            return method(*args, **kwargs)

        return call


@pytest.fixture(scope="module")
def all_cases() -> list[Case]:
    return cases()


@pytest.mark.parametrize("index", range(len(cases())))
def test_each_outside_parser_refuses_100k_characters_without_scanning_them(
    index: int, all_cases: list[Case], monkeypatch: pytest.MonkeyPatch
) -> None:
    case = all_cases[index]
    assert len(case.text) == SIZE, case.name
    seen: dict[str, int] = {}
    for module in _modules():
        for name, value in list(vars(module).items()):
            if isinstance(value, re.Pattern):
                monkeypatch.setattr(
                    module, name, _Recorder(value, seen, f"{module.__name__}.{name}")
                )
    result = case.run(case.text)
    assert case.refused(result), (case.name, repr(result)[:200])
    assert {n: s for n, s in seen.items() if s > MAX_SCANNED} == {}, case.name
