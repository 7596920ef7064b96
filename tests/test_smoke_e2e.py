"""The real program, simulated host, scraped over HTTP."""

from __future__ import annotations

from pathlib import Path

from tests.support.exporter import start_exporter, values


def test_simulated_host_serves_every_gpu(tmp_path: Path) -> None:
    exporter = start_exporter(["--simulate", "4", "--collect.interval", "0.2s"], tmp_path)
    try:
        samples = exporter.scrape()
        assert values(samples, "gpu_exporter_build_info", backend="simulated") == [1.0]
        assert sorted(values(samples, "gpu_up")) == [1.0, 1.0, 1.0, 1.0]
    finally:
        assert exporter.stop() == 0
