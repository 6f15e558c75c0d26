# Two commands do everything on a bare machine: `make demo` and `make test`.
VENV ?= .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed

.PHONY: setup demo test lint bench record gc fuzz

# uv installs the project and its development tools (ray, datasets) in seconds where pip took half a minute
$(STAMP): pyproject.toml
	python3 -m venv $(VENV)
	$(PY) -m pip install -q uv
	$(VENV)/bin/uv pip install -q --python $(PY) -e '.[dev]'
	touch $(STAMP)

setup: $(STAMP)
	$(VENV)/bin/replayer setup

demo: setup
	$(PY) scripts/demo.py

lint: $(STAMP)
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .
	$(PY) scripts/namespace_tree.py $(VENV)/namespace  # mypy reads the one namespace from there
	$(VENV)/bin/mypy

# Two parts: the modules in parallel (one module a worker, so a module's shared containers stay one), then
# the few tests marked `serial`, which look at everything on the engine, alone. Both always run. Two workers on
# two cores: three keep the cores busy (99 % against 88) but saved a few percent at most, and one run of them
# failed on Codex's 50 ms wait for a command's output, missed under that load (docs/benchmarks.md,
# docs/adapters/codex.md). Podman, the
# second engine, is set up by its own test module (tests/sandboxes/test_podman.py runs `replayer setup
# --engine podman`, as a user does), so a machine that never runs those tests never installs it.
# The suite's processes (pytest's, its workers', every `replayer` a test starts) share one bytecode cache out of
# the source tree, also where the shell sets PYTHONDONTWRITEBYTECODE: each would otherwise compile the project
# and rewrite the test modules' asserts again (about 6 CPU-s a pytest process).
BYTECODE := env -u PYTHONDONTWRITEBYTECODE PYTHONPYCACHEPREFIX=$(abspath $(VENV))/pycache
# The versions the tests install on demand are installed ahead of them from the start (tests/support/prefetch.py):
# beside `replayer setup` (which waits on apt, debootstrap and the registries as much as it computes), the checks
# and the parallel part; it ends with the parallel part. The checks run while the test tools install (apt's
# downloads and dpkg leave a core free), under the installer's apt lock, as setup's apt-get and a bundle's
# Debian packages are.
test: $(STAMP)
	$(BYTECODE) $(PY) -m tests.support.prefetch & prefetch=$$!; \
	$(VENV)/bin/replayer setup && \
	{ $(PY) -m tests.support.apt_locked scripts/install_test_tools.sh & tools=$$!; \
	  $(MAKE) --no-print-directory lint; lint=$$?; wait $$tools && test $$lint -eq 0; } && \
	{ $(BYTECODE) $(PY) -m pytest -q --durations=0 --durations-min=0.5 -n 2 --dist loadfile --no-loadscope-reorder -m "not serial"; parallel=$$?; \
	  kill $$prefetch 2>/dev/null; wait $$prefetch; \
	  $(BYTECODE) $(PY) -m pytest -q --durations=10 -m serial; serial=$$?; \
	  test $$parallel -eq 0 && test $$serial -eq 0; }; \
	status=$$?; kill $$prefetch 2>/dev/null; wait $$prefetch; exit $$status

# The parsers' fuzz suite with a long random budget (make test runs a short fixed one).
fuzz: $(STAMP)
	REPLAYER_FUZZ_EXAMPLES=$${REPLAYER_FUZZ_EXAMPLES:-2000} REPLAYER_FUZZ_RANDOM=1 $(PY) -m pytest -q tests/adapters/*/test_fuzz_*.py

bench: setup
	$(PY) -m bench

record: setup
	$(PY) -m tests.recorder_claude_code --all
	$(PY) -m tests.recorder_codex --all
	$(PY) -m tests.recorder_mini --all
	$(PY) -m tests.recorder_opencode --all
	$(PY) -m tests.recorder_pi --all
	$(PY) -m tests.recorder_pi_sessions --all
	$(PY) -m tests.recorder_openhands --all
	$(PY) -m tests.capture_tools

gc: $(STAMP)
	$(VENV)/bin/replayer gc
