# gpu-exporter: every target builds what it needs from nothing.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
# two stamps: the exporter and its runtime dependencies (all `make demo` needs), then
# every test, lint and benchmark tool on top (`make test` and the rest)
RUNTIME := $(VENV)/.runtime
STAMP := $(VENV)/.installed
# quiet, and without setuptools' "Editable installation" banner (our shipped data packages
# map repository folders, so setuptools installs through an import hook and says so)
PIP_INSTALL := PYTHONWARNINGS="ignore:Editable installation" $(BIN)/pip install --quiet
DEMO_GPUS ?= 4
DEMO_ADDRESS ?= 127.0.0.1:9872
DEMO_HARDWARE ?= hgx-h100

.PHONY: demo demo-alerts self-check-demo dist test test-deploy lint typecheck pytest promtool-check system-deps bytecode bench bench-rss bench-history bench-memory-patterns bench-http bench-parsers bench-kubelet bench-xid-storm bench-holders bench-fleet soak docs screenshot clean

$(RUNTIME): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	$(PIP_INSTALL) -e .
	touch $(RUNTIME)

$(STAMP): $(RUNTIME)
	$(PIP_INSTALL) -e '.[dev]'
	touch $(STAMP)

# Debian packages the tests use: promtool and prometheus (rule tests, fleet tests),
# amtool and Alertmanager (deploy/alertmanager/alertmanager.yml, routed and inhibited),
# systemd-analyze from systemd (unit verification), chromium (the live page in a real
# browser, driven by Playwright through /usr/bin/chromium; never `playwright install`),
# a C compiler (a probe built against NVIDIA's nvml.h: tests/test_nvml_header.py).
system-deps:
	@command -v promtool >/dev/null && command -v prometheus >/dev/null && \
	  command -v amtool >/dev/null && command -v prometheus-alertmanager >/dev/null && \
	  command -v systemd-analyze >/dev/null && test -x /usr/bin/chromium && \
	  command -v cc >/dev/null || { \
	  if [ "$$(id -u)" = 0 ]; then SUDO=; else SUDO=sudo; fi; \
	  $$SUDO apt-get update -qq && \
	  DEBIAN_FRONTEND=noninteractive $$SUDO apt-get install -y -qq --no-install-recommends \
	    prometheus prometheus-alertmanager systemd chromium gcc libc6-dev >/dev/null; }

# DEMO_GPUS=8 make demo: more GPUs; DEMO_ADDRESS=0.0.0.0:9872 make demo: reachable from
# other machines (or keep 127.0.0.1 and tunnel: ssh -L 9872:127.0.0.1:9872 HOST);
# DEMO_HARDWARE=gb200-nvl72 make demo: a GB200 NVL72 compute tray (NVLink5, platform info)
demo: $(RUNTIME)
	@echo "gpu-exporter on a simulated $(DEMO_GPUS)-GPU $(DEMO_HARDWARE) host (Ctrl-C stops it):"
	@echo "  live page: http://$(DEMO_ADDRESS)/   metrics: http://$(DEMO_ADDRESS)/metrics"
	$(BIN)/gpu-exporter --simulate $(DEMO_GPUS) --simulate.hardware $(DEMO_HARDWARE) \
		--web.listen-address $(DEMO_ADDRESS)

# An alert delivered end to end: the simulated host raises an Xid, Debian's Prometheus and
# Alertmanager (system-deps) route it, and a receiver prints each notification; all on
# 127.0.0.1, demo-only short timings (tools/demo_alerts.py). Ctrl-C, Ctrl-\, a closed terminal
# or SIGTERM stops every program it started and removes its files (exit 128 + the signal).
demo-alerts: $(RUNTIME) system-deps
	$(BIN)/python -m tools.demo_alerts

# gpu-exporter --self-check without a GPU: a simulated 1-GPU host against the tests'
# stand-in nvidia-smi (the README's excerpt); on a GPU host run `gpu-exporter --self-check`
self-check-demo: $(RUNTIME)
	$(BIN)/python -m tools.self_check_demo

# lint-imports reads .importlinter from here (its --config option is deprecated)
lint: $(STAMP)
	$(BIN)/ruff check gpu_exporter tests benchmarks tools
	$(BIN)/ruff format --check gpu_exporter tests benchmarks tools
	$(BIN)/lint-imports

typecheck: $(STAMP)
	$(BIN)/mypy

# pytest-xdist: PYTEST_WORKERS processes, each test file whole in one of them (its
# module-scoped Prometheus, Alertmanager, browser or build made once); most tests wait on a
# subprocess or a server, so on 2 cores 6 beat 4 (6m10s against 6m53s-7m06s on 2026-11-30:
# a fifth of 4 workers' time both cores sat idle) and 4 beat 2. PYTEST_WORKERS=0: one
# process, in order. GOGC=400: promtool, Prometheus and Alertmanager collect garbage a
# quarter as often (promtool's run of gpu-alerts.test.yml 14.5 -> 10.0 s of CPU, 57 -> 107
# MB); what they compute is the same. pyproject.toml's addopts print the ten slowest tests
# at the end of every run.
PYTEST_WORKERS ?= 6
pytest: $(STAMP) system-deps
	GOGC=400 $(BIN)/pytest -q -n $(PYTEST_WORKERS) --dist loadfile --no-loadscope-reorder

test: lint typecheck pytest

# The image built and run with podman, the units run under systemd in a Debian booted
# by systemd-nspawn (tools/deploy_test.py): root on Debian, about 3 minutes on 2 cores
# (1.5 with its debootstrapped trees cached in .deploy-cache/); it installs podman, runc,
# debootstrap and systemd-container, and fails naming the step that did not work.
test-deploy: $(RUNTIME)
	$(BIN)/python -m tools.deploy_test

docs: $(STAMP)
	$(BIN)/python -m gpu_exporter.docs --write docs/reference.md docs/actions.md docs/migrating-from-dcgm-exporter.md gpu_exporter/serving/static/runbooks.html

# The package's bytecode written, as pip writes it for an installed wheel and the image's
# compileall does: the editable install leaves it to each start, and where
# PYTHONDONTWRITEBYTECODE is set (CI, this project's sandboxes) every start of the
# exporter compiles what changed again, 0.8 MiB more resident for good (benchmarks/README.md).
# Run before anything that measures the running exporter (and before ../shared/perf-judge).
bytecode: $(RUNTIME)
	$(BIN)/python -m compileall -q gpu_exporter

bench: $(STAMP) bytecode
	$(BIN)/python benchmarks/bench.py --write benchmarks/README.md
	$(BIN)/python benchmarks/xid_storm.py --write benchmarks/README.md
	$(BIN)/python benchmarks/holder_scan.py --write benchmarks/README.md

bench-holders: $(STAMP) bytecode
	$(BIN)/python benchmarks/holder_scan.py --write benchmarks/README.md

bench-rss: $(STAMP) bytecode
	$(BIN)/python benchmarks/rss_scraped.py --write benchmarks/README.md

bench-history: $(STAMP) bytecode
	$(BIN)/python benchmarks/history_memory.py --write benchmarks/README.md

# what judging the memory patterns costs per GPU and interval (issue 50): a few seconds
bench-memory-patterns: $(STAMP) bytecode
	$(BIN)/python benchmarks/memory_patterns.py --write benchmarks/README.md

# every parser of outside input on a 100,000-character hostile input (issue 35: < 10 ms)
bench-parsers: $(STAMP)
	$(BIN)/python benchmarks/parsers.py --write benchmarks/README.md

# Xid storms through the real program's kernel-log reader (issue 44): CPU and own log
# bytes per Xid, how late an Xid after the storm is counted and dated (about 30 s)
bench-xid-storm: $(STAMP) bytecode
	$(BIN)/python benchmarks/xid_storm.py --write benchmarks/README.md

bench-http: $(STAMP) bytecode
	$(BIN)/python benchmarks/http_serving.py

bench-kubelet: $(STAMP) bytecode
	$(BIN)/python benchmarks/kubelet_refresh.py --write benchmarks/README.md

# the fleet's Prometheus with the shipped rules and both dashboards at 1,000-4,000
# simulated GPUs, a day of backfilled history at 4,000, and the same rules and dashboards
# on VictoriaMetrics (vmalert, Alertmanager) (benchmarks/fleet.py; about an hour)
bench-fleet: $(STAMP) system-deps
	@command -v victoria-metrics >/dev/null || { \
	  if [ "$$(id -u)" = 0 ]; then SUDO=; else SUDO=sudo; fi; \
	  DEBIAN_FRONTEND=noninteractive $$SUDO apt-get install -y -qq --no-install-recommends \
	    victoria-metrics >/dev/null; }
	$(BIN)/python benchmarks/fleet.py --write benchmarks/README.md

soak: $(STAMP) bytecode
	$(BIN)/python benchmarks/soak.py --write benchmarks/README.md

# dist/: the wheel and the sdist, as `python -m build` makes them (`pip install build`
# first without make), each carrying LICENSE
dist: $(STAMP)
	$(BIN)/python -m build --outdir dist .

# docs/screenshot.png: the live page of --simulate 4 at the default 5 s interval once
# 5 minutes of history have built up (so it takes 5 minutes), photographed by the
# browser helper the tests use (headless Debian chromium).
screenshot: $(STAMP) system-deps
	$(BIN)/python -m tests.support.screenshot docs/screenshot.png

clean:
	rm -rf $(VENV) .mypy_cache .ruff_cache .pytest_cache *.egg-info build dist
