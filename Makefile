# tlgemm: two commands for a fresh machine (see README.md).
PYTHON ?= python3
PIP = $(PYTHON) -m pip

.PHONY: install install-test demo test gpu-test

# torch first, pinned where the machine's local CPU build lives; an installed torch is kept.
install:
	$(PYTHON) -c "import torch" 2>/dev/null || $(PIP) install torch==2.13.0
	$(PIP) install -e .

install-test: install
	$(PIP) install -e ".[test]"

demo: install
	tlgemm layout --dtype bf16 --block-m 128 --block-n 256 --block-k 64

test: install-test
	$(PYTHON) -m pytest -q

gpu-test:
	$(PYTHON) -m pytest -q -m gpu
