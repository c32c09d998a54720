# Two commands from a fresh clone: `make demo` and `make test`.
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
PIP := $(PY) -m pip --disable-pip-version-check -q

.PHONY: demo demo-vad test venv clean

$(PY):
	$(PYTHON) -m venv $(VENV)

# Stamp files make a second run skip the install when pyproject.toml did not change.
$(VENV)/.demo-installed: pyproject.toml | $(PY)
	$(PIP) install -e ".[demo]"
	touch $@

$(VENV)/.test-installed: pyproject.toml | $(PY)
	$(PIP) install -e ".[test,demo]"
	touch $@

demo: $(VENV)/.demo-installed
	$(PY) -m paritygate.demo

# The Silero VAD port (examples/silero_vad_mlx) gated in stored mode: MLX and ONNX Runtime, and
# the silero-vad wheel without its dependencies (only its ONNX file is used): no torch.
$(VENV)/.demo-vad-installed: $(VENV)/.demo-installed
	$(PIP) install "onnxruntime>=1.18"
	$(PIP) install --no-deps "silero-vad==6.2.3"
	touch $@

demo-vad: $(VENV)/.demo-vad-installed
	cd examples/silero_vad_mlx && $(abspath $(PY)) -m paritygate gate parity.toml

test: $(VENV)/.test-installed
	$(PY) -m pytest -q $(PYTEST_ARGS)

clean:
	rm -rf $(VENV) reports build
