# Both targets set themselves up: a virtual environment in .venv with CPU torch first
# (the pin keeps pip from pulling CUDA wheels), then this package with its dev, bench and ray
# extras (the tests cover the Ray executor), the frameworks of the wild corpus, and the
# history readers' MLflow and TensorBoard.
VENV ?= .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed
TORCH_SPEC ?= torch==2.13.0
ARGS ?=

.PHONY: demo test lint bench clean-venv

$(STAMP): pyproject.toml
	test -x $(PY) || python3 -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q "$(TORCH_SPEC)"
	$(PY) -m pip install -q -e '.[dev,bench,ray,wild,history]'
	touch $(STAMP)

demo: $(STAMP)
	$(PY) -m optimizer --train-file examples/train_mlp.py --preference cost $(ARGS)

test: $(STAMP)
	$(PY) -m pytest -q -n 3 --dist loadfile --durations=25 $(ARGS)

lint: $(STAMP)
	$(VENV)/bin/ruff check .

clean-venv:
	rm -rf $(VENV)
