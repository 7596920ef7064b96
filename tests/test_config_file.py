"""The config file's nesting: `a: {b: {c: 1}}` means `a.b.c: 1` for every setting."""

from __future__ import annotations

from pathlib import Path

import pytest

from gpu_exporter.config import ConfigError, Settings, load_settings


def _load(tmp_path: Path, text: str) -> Settings:
    path = tmp_path / "config.yml"
    path.write_text(text)
    return load_settings(["--config.file", str(path)])


def test_a_setting_under_a_collector_is_reached_by_nesting(tmp_path: Path) -> None:
    settings = _load(tmp_path, "collector:\n  process:\n    limit: 16\n    cmdline: true\n")
    assert settings.process_limit == 16
    assert settings.process_cmdline is True


def test_nesting_and_dotted_keys_mean_the_same(tmp_path: Path) -> None:
    nested = _load(tmp_path, "collector:\n  host: false\ncollect:\n  interval: 2s\n")
    dotted = _load(tmp_path, "collector.host: false\ncollect.interval: 2s\n")
    assert nested == dotted


def test_a_mapping_where_a_value_belongs_names_the_key_not_a_python_dict(tmp_path: Path) -> None:
    with pytest.raises(ConfigError) as error:
        _load(tmp_path, "collector:\n  process:\n    limitt: 16\n")
    assert "unknown key 'collector.process.limitt'" in str(error.value)
    assert "{" not in str(error.value)
