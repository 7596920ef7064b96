"""The keys of the config file: nested mappings joined with dots, each key given once and
each one known, with a suggestion for a misspelled one.

`collect: {interval: 2s}` and `collect.interval: 2s` name the same setting; a file that
gives both is refused rather than one of them silently winning. Problems are ValueErrors
whose message is one line; the config module adds the file's name.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping
from typing import Any


def flatten(data: Mapping[Any, Any], prefix: str = "") -> dict[str, Any]:
    """{dotted key: value} of a mapping whose nested mappings are levels of keys (no setting
    takes a mapping); raises ValueError for a key that is not text or is given twice."""
    flat: dict[str, Any] = {}
    for key, value in data.items():
        if not isinstance(key, str):
            raise ValueError(f"config keys must be text, not {key!r}")
        name = f"{prefix}{key}"
        inner = flatten(value, f"{name}.") if isinstance(value, Mapping) else {name: value}
        for joined, item in inner.items():
            if joined in flat:
                raise ValueError(
                    f"key {joined!r} is given twice, once dotted and once nested: keep one"
                )
            flat[joined] = item
    return flat


def unknown_key(key: str, known: Collection[str]) -> str:
    """The message for a key no setting has, with the likely one when there is one."""
    message = f"unknown key {key!r}"
    hyphenated = key.replace("_", "-")
    if hyphenated != key and hyphenated in known:
        return f"{message}: keys use hyphens, as the flags do ({hyphenated!r})"
    import difflib  # here, not at the top: only a misspelled key needs it (0.2 MB kept)

    close = difflib.get_close_matches(key, known, n=1, cutoff=0.75)
    return f"{message}; did you mean {close[0]!r}?" if close else message
