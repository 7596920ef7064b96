"""Finds the shapes of regular expression that backtrack more than linearly.

Python's `re` is a backtracking engine: a pattern whose repeats can share a character
tries every way of splitting a run of those characters between them when the rest of
the pattern fails. Two shapes cost more than linear time on the text:

- a repeat inside an unbounded repeat (`(a+)+`, `(?:x{1,3})*`): exponential;
- two unbounded repeats in a row whose characters overlap, with nothing between them
  that must be a character neither takes (`\\d+\\.?\\d*`, `[a-z0-9-]*[a-z][a-z0-9-]*`,
  `\\s*(ms|s)?\\s*`): polynomial, of the degree of their count.

`problems()` walks the parsed pattern (`re._parser`, the tree `re` compiles) and names
each such place. It is a reviewer's rule, not a proof: it reads single-character repeats
only, and says nothing of how often a caller runs a pattern (a `search` or `sub` over
text that never matches tries every start: that cost is bounded by capping the text).
"""

from __future__ import annotations

import re
import re._compiler as compiler
import re._constants as c
import re._parser as parser
from typing import Any

# the characters a set is tried on: ASCII, Latin-1, and the Unicode digits and spaces
# that `\d` and `\s` take beyond them
SAMPLE = (
    [chr(i) for i in range(0x250)]
    + ["\u0663", "\u06f3", "\u0966", "\uff10", "\u2028", "\u3000", "\u200b", "\u1680"]
    + ["\u03bc", "\u27e8", "\U0001d7ce"]
)
SINGLE = {c.LITERAL, c.NOT_LITERAL, c.IN, c.ANY, c.CATEGORY}
REPEATS = {c.MAX_REPEAT, c.MIN_REPEAT, c.POSSESSIVE_REPEAT}
ZERO_WIDTH = {c.AT}


def problems(pattern: re.Pattern[str] | re.Pattern[bytes]) -> list[str]:
    """The places in `pattern` that backtrack more than linearly; [] when none."""
    tree = parser.parse(pattern.pattern, pattern.flags)
    found: list[str] = []
    _walk(list(tree), tree.state, pattern.flags, found)
    return found


def _walk(items: list[Any], state: Any, flags: int, found: list[str]) -> None:
    """Check one sequence, then what each of its items holds."""
    sequence = _flatten(items)
    for i, (op, av) in enumerate(sequence):
        if op in REPEATS and av[1] == c.MAXREPEAT:
            if op != c.POSSESSIVE_REPEAT and _has_repeat(list(av[2])):
                found.append(f"a repeat inside an unbounded repeat: {_show(op, av)}")
            chars = _chars(list(av[2]), state, flags)
            if chars and op != c.POSSESSIVE_REPEAT:
                other = _next_overlapping(sequence[i + 1 :], chars, state, flags)
                if other is not None:
                    found.append(
                        f"unbounded repeats in a row over shared characters: "
                        f"{_show(op, av)} then {_show(*other)}"
                    )
    for op, av in sequence:
        for inner in _children(op, av):
            _walk(inner, state, flags, found)


def _flatten(items: list[Any]) -> list[Any]:
    """A sequence with its groups opened: a group is its items, in place."""
    out: list[Any] = []
    for op, av in items:
        if op == c.SUBPATTERN:
            out.extend(_flatten(list(av[3])))
        elif op == c.ATOMIC_GROUP:
            out.append((op, av))
        else:
            out.append((op, av))
    return out


def _children(op: Any, av: Any) -> list[list[Any]]:
    """The sequences inside an item: a repeat's body, each branch, a look-around."""
    if op in REPEATS:
        return [list(av[2])]
    if op == c.BRANCH:
        return [list(b) for b in av[1]]
    if op in (c.ASSERT, c.ASSERT_NOT):
        return [list(av[1])]
    if op == c.ATOMIC_GROUP:
        return [list(av)]
    if op == c.GROUPREF_EXISTS:
        return [list(b) for b in av[1:] if b is not None]
    return []


def _has_repeat(items: list[Any]) -> bool:
    for op, av in _flatten(items):
        if op in REPEATS and av[1] > 1:
            return True
        if any(_has_repeat(inner) for inner in _children(op, av)):
            return True
    return False


def _chars(items: list[Any], state: Any, flags: int) -> frozenset[str] | None:
    """The characters of a single-character item (of SAMPLE), or None for anything else."""
    items = _flatten(items)
    if len(items) != 1 or items[0][0] not in SINGLE:
        return None
    single = compiler.compile(parser.SubPattern(state, items), flags)
    return frozenset(ch for ch in SAMPLE if single.fullmatch(ch))


def _next_overlapping(
    rest: list[Any], chars: frozenset[str], state: Any, flags: int
) -> tuple[Any, Any] | None:
    """The next unbounded repeat that can take a character of `chars`, with every item
    before it able to take one too (or nothing at all); None when something between must
    be a character outside `chars`, or when the sequence ends."""
    for op, av in rest:
        if op in ZERO_WIDTH:
            continue
        if op in SINGLE:
            mine = _chars([(op, av)], state, flags)
            if mine is None or not mine & chars:
                return None
            continue
        if op in REPEATS:
            mine = _chars(list(av[2]), state, flags)
            if av[1] == c.MAXREPEAT and mine is not None and mine & chars:
                return (op, av)
            if av[0] == 0 or (mine is not None and mine & chars):
                continue  # optional, or a bounded run of shared characters
            return None
        return None  # a branch or anything else: not followed further
    return None


def _show(op: Any, av: Any) -> str:
    low, high = av[0], av[1]
    bound = "" if high != c.MAXREPEAT else "inf"
    return f"{op}({low}, {bound or high})"
