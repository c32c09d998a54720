# Two commands from a fresh clone: `make demo` and `make test`.
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
PIP := $(PY) -m pip --disable-pip-version-check -q

.PHONY: demo demo-compare test test-gpu venv clean chromium docs docs-build test-fast test-backends test-integration mutation

$(PY):
	$(PYTHON) -m venv $(VENV)

# Stamp files make a second run skip the install when pyproject.toml did not change.
$(VENV)/.demo-installed: pyproject.toml | $(PY)
	$(PIP) install -e ".[demo]"
	touch $@

# mlx-vlm without its dependencies: its wheel requires audio, server and OpenCV packages that
# examples/vlm_port never imports (pyproject.toml's vlm extra lists what it does import);
# mlx-audio too: mlx-vlm's server imports its audio_io module (numpy only) at start.
$(VENV)/.test-installed: pyproject.toml | $(PY)
	$(PIP) install -e ".[test,demo]"
	$(PIP) install --no-deps "mlx-vlm==0.7.10" "mlx-audio==0.6.2"
	touch $@

# The main job: the Silero VAD port (examples/silero_vad_mlx) gated in stored mode against the
# committed TorchScript references: MLX and ONNX Runtime candidates, and the silero-vad wheel
# without its dependencies (only its ONNX file is used), so no torch is installed.
$(VENV)/.demo-vad-installed: $(VENV)/.demo-installed
	$(PIP) install "onnxruntime>=1.18"
	$(PIP) install --no-deps "silero-vad==6.2.3"
	touch $@

demo: $(VENV)/.demo-vad-installed
	cd examples/silero_vad_mlx && $(abspath $(PY)) -m paritygate gate parity.toml

# A smaller demo without any ML framework: two bundled output files through `paritygate compare`.
demo-compare: $(VENV)/.demo-installed
	$(PY) -m paritygate.demo

$(VENV)/.docs-installed: pyproject.toml | $(PY)
	$(PIP) install -e ".[docs]"
	touch $@

# The docs site (MkDocs, Material theme, API reference by mkdocstrings) at http://127.0.0.1:8000.
docs: $(VENV)/.docs-installed
	$(VENV)/bin/mkdocs serve

# The static site into site/ (gitignored): strict, so a broken link or reference fails the build;
# the test suite builds it the same way (tests/integration/test_docs.py).
docs-build: $(VENV)/.docs-installed
	NO_MKDOCS_2_WARNING=1 $(VENV)/bin/mkdocs build --strict --site-dir site

# The HTML report is checked in a real headless browser: Chromium from Debian's packages.
chromium:
	@command -v chromium >/dev/null || (apt-get update -qq && apt-get install -y -qq chromium)

test: $(VENV)/.test-installed chromium
	$(PY) -m pytest -q $(PYTEST_ARGS)

# The framework-free unit tests: seconds; run them on every change.
test-fast: $(VENV)/.test-installed
	$(PY) -m pytest -q tests/unit $(PYTEST_ARGS)

# One file per framework; PARITYGATE_TEST_FRAMEWORKS=torch,mlx selects some.
test-backends: $(VENV)/.test-installed
	$(PY) -m pytest -q tests/backends $(PYTEST_ARGS)

# The gate, CLI, bootstrap, dependencies and the examples end to end (marked slow).
test-integration: $(VENV)/.test-installed chromium
	$(PY) -m pytest -q -m slow $(PYTEST_ARGS)

# On a machine with an NVIDIA GPU: every backend test (torch, JAX, MLX, ONNX Runtime, the host
# kernels, 1 - cosine on every device) on the frameworks' default devices. Refuses to run unless
# torch, triton, JAX, MLX and ONNX Runtime all import and torch, JAX and MLX see the GPU
# (tests/gpu_preflight.py), so that a GPU run cannot pass by skipping or by testing a CPU build.
# Every gpu-marked test lives in tests/backends. GPU_PYTHON: the interpreter there (its
# frameworks, not this venv's CPU builds), with src/ on PYTHONPATH.
GPU_PYTHON ?= $(PY)
test-gpu:
	$(GPU_PYTHON) tests/gpu_preflight.py
	PYTHONPATH=$(abspath src)$${PYTHONPATH:+:$$PYTHONPATH} $(GPU_PYTHON) -m pytest -q -p no:cacheprovider tests/backends $(PYTEST_ARGS)

clean:
	rm -rf $(VENV) reports build site

# The examples' full mutation sets before a release (CI runs a small set of each through the
# examples' tests): each rewrites the example's mutation.json, which its README publishes
# (`paritygate claims check` then ties the README to the new numbers). About 17 minutes on two
# cores; docs/mutation.md has the measured costs.
mutation: $(VENV)/.test-installed
	cd examples/silero_vad_mlx && $(abspath $(PY)) -m paritygate mutate parity.toml --candidate postprocessor --file postprocess.py --limit 24 --jobs 2 --json mutation.json
	cd examples/teacache_mlx && $(abspath $(PY)) -m paritygate mutate parity.toml --candidate proxy-cached --file teacache.py --claim proxy-noop --claim eager-noop --claim cache-ssim --case seed0-digit0 --case seed7-digit7 --jobs 2 --json mutation.json
	cd examples/encoder_mlx && $(abspath $(PY)) -m paritygate mutate parity.toml --candidate block-local --file model.py --limit 24 --jobs 2 --json mutation.json
	cd examples/box_port && $(abspath $(PY)) -m paritygate record parity.toml && $(abspath $(PY)) -m paritygate mutate parity.toml --file port_detector.py --jobs 2 --json mutation.json
	cd examples/lm_port && $(abspath $(PY)) -m paritygate mutate parity.toml --candidate mlx-lm --file runners.py --scope prompt_text --scope MlxRunner.run --scope LlamaCppRunner.run --scope make --case chat-01-split-multi --case chat-02-encode --jobs 2 --json mutation.json
	cd examples/vlm_port && $(abspath $(PY)) -m paritygate mutate parity.toml --candidate mlx-vlm --file runners.py --scope MlxRunner --scope boxes --scope first_frame --scope case_image --scope make --case leetcode --case odd --jobs 2 --json mutation.json
