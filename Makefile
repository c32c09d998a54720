# Two commands from a fresh clone: `make demo` and `make test`.
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
PIP := $(PY) -m pip --disable-pip-version-check -q

.PHONY: demo test venv clean

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

test: $(VENV)/.test-installed
	$(PY) -m pytest -q $(PYTEST_ARGS)

clean:
	rm -rf $(VENV) reports build
