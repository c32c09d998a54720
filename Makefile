# Two commands from a fresh clone: `make demo` and `make test`.
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
PIP := $(PY) -m pip --disable-pip-version-check -q

.PHONY: demo demo-compare test venv clean

$(PY):
	$(PYTHON) -m venv $(VENV)

# Stamp files make a second run skip the install when pyproject.toml did not change.
$(VENV)/.demo-installed: pyproject.toml | $(PY)
	$(PIP) install -e ".[demo]"
	touch $@

$(VENV)/.test-installed: pyproject.toml | $(PY)
	$(PIP) install -e ".[test,demo]"
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

test: $(VENV)/.test-installed
	$(PY) -m pytest -q $(PYTEST_ARGS)

clean:
	rm -rf $(VENV) reports build
