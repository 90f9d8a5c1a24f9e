"""Django settings, read from the environment (see docs/webapp.md for every variable).

With no DATABASE_URL / REDIS_URL the app runs embedded: SQLite under var/, the in-process channel layer and an
in-process run executor. With them: PostgreSQL, channels_redis and Celery workers on the `gpu` queue.
Bad values stop the process at start (webapp/env.py).
"""
from __future__ import annotations

import hashlib
import hmac
import secrets
from pathlib import Path

from django.core.exceptions import ImproperlyConfigured

from studio.key_budget.limits import LIMITS_ENV, parse_key_limits
from studio.key_policy import POLICY_ENV, KeyPolicy, normalise_base, parse_key_policy

from webapp.env import (
    check_redis_url,
    database_from_url,
    env_bool,
    env_choice,
    env_float,
    env_int,
    env_list,
    env_str,
    sqlite_database,
)
from webapp.limits import VARIABLE as LIMITS_VARIABLE, parse_limits
from webapp.mcp_catalogue import VARIABLE as MCP_CATALOGUE_VARIABLE, parse_catalogue
from webapp.mcp_hosts import parse_host_rules
from webapp.model_catalogue import HF_VARIABLE, VARIABLE as MODEL_CATALOGUE_VARIABLE, parse_hf_patterns
from webapp.model_catalogue import parse_catalogue as parse_model_catalogue
from webapp.run_policy import parse_worker_config

BASE_DIR = Path(__file__).resolve().parent.parent
VAR_DIR = Path(env_str("STUDIO_VAR_DIR") or BASE_DIR / "var")

DEBUG = env_bool("DEBUG", False)
DATABASE_URL = env_str("DATABASE_URL") or None
REDIS_URL = check_redis_url(env_str("REDIS_URL")) if env_str("REDIS_URL") else None
EMBEDDED = DATABASE_URL is None and REDIS_URL is None


def _secret_key() -> str:
    key = env_str("SECRET_KEY")
    if key:
        if len(key) < 32:
            raise ImproperlyConfigured("SECRET_KEY must be at least 32 characters long")
        return key
    if not (EMBEDDED or DEBUG):
        raise ImproperlyConfigured("SECRET_KEY is required when DATABASE_URL or REDIS_URL is set")
    # The embedded laptop setup keeps a generated key under var/ so sessions and encrypted secrets survive restarts.
    path = VAR_DIR / "secret_key"
    if not path.exists():
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(secrets.token_urlsafe(50))
        path.chmod(0o600)
    return path.read_text().strip()


SECRET_KEY = _secret_key()


def _judge_key_endpoints() -> KeyPolicy:
    try:
        policy = parse_key_policy(env_str(POLICY_ENV) or "{}")
    except ValueError as err:
        raise ImproperlyConfigured(str(err)) from None
    demo_key = env_str("JUDGE_API_KEY_ENV")
    if demo_key:
        policy[demo_key] = (*policy.get(demo_key, ()), normalise_base(env_str("JUDGE_API_BASE")))
    return policy
ALLOWED_HOSTS = env_list("ALLOWED_HOSTS", ["localhost", "127.0.0.1", "[::1]"] + (["testserver"] if DEBUG else []))
CSRF_TRUSTED_ORIGINS = env_list("CSRF_TRUSTED_ORIGINS", [])

INSTALLED_APPS = [
    "daphne",
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django.contrib.sessions",
    "django.contrib.messages",
    "django.contrib.staticfiles",
    "rest_framework",
    "rest_framework.authtoken",
    "drf_spectacular",
    "drf_spectacular_sidecar",  # Swagger UI's files, served locally (no CDN)
    "django_htmx",
    "channels",
    "webapp.apps.WebappConfig",
]

MIDDLEWARE = [
    "webapp.operations.middleware.OperationsMiddleware",  # /healthz, /readyz, /metrics: first (its docstring says why)
    "django.middleware.security.SecurityMiddleware",
    "webapp.middleware.PageMethodsMiddleware",
    "webapp.middleware.SecurityHeadersMiddleware",
    "django.contrib.sessions.middleware.SessionMiddleware",
    "django.middleware.common.CommonMiddleware",
    "django.middleware.csrf.CsrfViewMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
    "django.contrib.messages.middleware.MessageMiddleware",
    "django.middleware.clickjacking.XFrameOptionsMiddleware",
    "django_htmx.middleware.HtmxMiddleware",
]

ROOT_URLCONF = "webapp.urls"
ASGI_APPLICATION = "webapp.asgi.application"
TEMPLATES = [
    {
        "BACKEND": "django.template.backends.django.DjangoTemplates",
        "DIRS": [BASE_DIR / "templates"],
        "APP_DIRS": True,
        "OPTIONS": {
            "context_processors": [
                "django.template.context_processors.request",
                "django.contrib.auth.context_processors.auth",
                "django.contrib.messages.context_processors.messages",
            ],
        },
    }
]

if DATABASE_URL:
    DATABASES = {"default": database_from_url(DATABASE_URL)}
else:
    VAR_DIR.mkdir(parents=True, exist_ok=True)
    DATABASES = {"default": sqlite_database(str(VAR_DIR / "studio.sqlite3"))}
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"

if REDIS_URL:
    CHANNEL_LAYERS = {
        "default": {
            "BACKEND": "channels_redis.core.RedisChannelLayer",
            # No socket timeout. redis-py 8's default (5 s, channels_redis's blocking-pop time) made a quiet
            # channel raise; and with any socket timeout redis-py sends through asyncio.wait_for, which on
            # Python 3.11 can swallow a cancel that arrives as the send completes: a closed socket's receive
            # then never ends (one in ~35 consumers cancelled at once, tests/webapp/test_live_stream.py). A dead
            # Redis is still noticed: redis-py's TCP keepalive is on by default (~45 s); connecting times out.
            "CONFIG": {"hosts": [{"address": REDIS_URL, "socket_timeout": None, "socket_connect_timeout": 10}],
                       "prefix": env_str("STUDIO_CHANNEL_PREFIX", "studio")},
        }
    }
else:
    CHANNEL_LAYERS = {"default": {"BACKEND": "webapp.live.layers.ThreadSafeInMemoryChannelLayer"}}

# Where runs execute: `celery` (queue `gpu`) needs REDIS_URL; `inprocess` is a thread in the web process.
STUDIO_EXECUTOR = env_choice("STUDIO_EXECUTOR", "celery" if REDIS_URL else "inprocess", ("celery", "inprocess"))
if STUDIO_EXECUTOR == "celery" and not REDIS_URL:
    raise ImproperlyConfigured("STUDIO_EXECUTOR=celery needs REDIS_URL (the Celery broker)")
STUDIO_RUNS_DIR = Path(env_str("STUDIO_RUNS_DIR") or VAR_DIR / "runs")
STUDIO_HEARTBEAT_S = env_float("STUDIO_HEARTBEAT_S", 5.0, minimum=0.1)
# A run whose worker has not beaten for this long is marked crashed (must exceed the heartbeat comfortably).
STUDIO_STALE_AFTER_S = env_float("STUDIO_STALE_AFTER_S", 60.0, minimum=1.0)
if STUDIO_STALE_AFTER_S <= 2 * STUDIO_HEARTBEAT_S:
    raise ImproperlyConfigured("STUDIO_STALE_AFTER_S must be more than twice STUDIO_HEARTBEAT_S")
# Torch threads of the engine subprocess: leave a core to the web process so pages stay responsive.
# A run still queued this long after it was last handed to the executor is re-sent by the reaper (a broker that
# lost its message strands it otherwise); a duplicate delivery finds nothing to claim.
STUDIO_REQUEUE_AFTER_S = env_float("STUDIO_REQUEUE_AFTER_S", 600.0, minimum=1.0)
# A run whose judge's provider is down (429, 5xx, unreachable beyond its retries) parks and is queued again after
# a backoff: as long as the judge has been down so far, at least the first and at most the second of these.
STUDIO_JUDGE_RETRY_S = env_float("STUDIO_JUDGE_RETRY_S", 30.0, minimum=0.1)
STUDIO_JUDGE_RETRY_MAX_S = env_float("STUDIO_JUDGE_RETRY_MAX_S", 600.0, minimum=0.1)
# Checkpoints kept after a run ends (services/checkpoint_retention.py), a run's default that a launch may change
# (retention.keep_last): the last k steps' adapters, with the best by held-out win rate and any served, forked
# from or exported; 0 keeps every checkpoint.
STUDIO_CHECKPOINT_KEEP_LAST = env_int("STUDIO_CHECKPOINT_KEEP_LAST", 3, minimum=0)
# The fair queue (webapp/queue_policy.py): runs of one project holding workers at once (0: no cap), and the queue
# priorities a project's owner may choose (higher first; by default an owner may only yield to others).
STUDIO_MAX_RUNS_IN_FLIGHT_PER_PROJECT = env_int("STUDIO_MAX_RUNS_IN_FLIGHT_PER_PROJECT", 0, minimum=0)
STUDIO_QUEUE_PRIORITY_MIN = env_int("STUDIO_QUEUE_PRIORITY_MIN", -10)
STUDIO_QUEUE_PRIORITY_MAX = env_int("STUDIO_QUEUE_PRIORITY_MAX", 0)
if not -1000 <= STUDIO_QUEUE_PRIORITY_MIN <= STUDIO_QUEUE_PRIORITY_MAX <= 1000:
    raise ImproperlyConfigured("STUDIO_QUEUE_PRIORITY_MIN must be at most STUDIO_QUEUE_PRIORITY_MAX, both within "
                               "-1000..1000")
# Set on GPU workers (the GPU image does): they refuse runs that would train on their CPU or sample with the
# local server, unless a run asks for the CPU (device: cpu).
STUDIO_GPU_WORKER = env_bool("STUDIO_GPU_WORKER", False)
STUDIO_ENGINE_THREADS = env_int("STUDIO_ENGINE_THREADS", 1, minimum=1)
STUDIO_ENGINE_NICE = env_int("STUDIO_ENGINE_NICE", 5, minimum=0)
STUDIO_ENCRYPTION_KEY = env_str("STUDIO_ENCRYPTION_KEY") or None
# The judge key variables of the workers' environment that a judge may name, each with the endpoints it may be
# sent to (studio/key_policy.py): administrators set this; editors choose among the pairs. Unset: none (a key an
# editor stores on a judge still works). The demo's JUDGE_API_KEY_ENV is bound to its JUDGE_API_BASE.
STUDIO_JUDGE_KEY_ENDPOINTS = _judge_key_endpoints()
# Each judge key variable's budget, shared by every run and re-scoring that sends that key (studio/key_budget;
# docs/webapp.md "Operating it"), e.g. {"OPENAI_API_KEY": {"concurrency": 8, "per_minute": 600}}; unset: none. The
# counts live in STUDIO_JUDGE_BUDGET_REDIS_URL (default REDIS_URL; the engines of limited keys are given it), else
# in file locks under the var dir (one machine).
try:
    STUDIO_JUDGE_KEY_LIMITS = parse_key_limits(env_str(LIMITS_ENV) or "{}")
except ValueError as err:
    raise ImproperlyConfigured(str(err)) from None
if _unlimitable := sorted(set(STUDIO_JUDGE_KEY_LIMITS) - set(STUDIO_JUDGE_KEY_ENDPOINTS)):
    raise ImproperlyConfigured(f"{LIMITS_ENV} limits {', '.join(_unlimitable)}, which no judge may name (a variable "
                               f"of {POLICY_ENV}, or the demo's JUDGE_API_KEY_ENV)")
STUDIO_JUDGE_BUDGET_REDIS_URL = (check_redis_url(env_str("STUDIO_JUDGE_BUDGET_REDIS_URL"))
                                 if env_str("STUDIO_JUDGE_BUDGET_REDIS_URL") else REDIS_URL)
STUDIO_JUDGE_BUDGET_PREFIX = env_str("STUDIO_CHANNEL_PREFIX", "studio")  # deployments sharing a Redis differ
# Modules whose functions a project may declare as custom tools (tools environment); none by default.
STUDIO_TOOL_MODULES = env_list("STUDIO_TOOL_MODULES", [])
# The hosts outbound calls to addresses a project gave may reach (judge and teacher API bases, the scenario
# generator, MCP servers; egress/, docs/security.md "Outbound addresses"): public addresses always; loopback and
# private ones only when listed; link-local (cloud metadata) never. STUDIO_MCP_ALLOWED_HOSTS, the older MCP-only
# name, is merged in. The embedded laptop setup lists its own loopback, where people run their servers (unless
# either variable is set); a shared deployment lists nothing unless an administrator does.
_LISTS_SET = env_str("STUDIO_EGRESS_ALLOWED_HOSTS") is not None or env_str("STUDIO_MCP_ALLOWED_HOSTS") is not None
STUDIO_EGRESS_ALLOWED_HOSTS = env_list("STUDIO_EGRESS_ALLOWED_HOSTS",
                                       ["localhost", "127.0.0.1", "[::1]"] if EMBEDDED and not _LISTS_SET else [])
STUDIO_MCP_ALLOWED_HOSTS = env_list("STUDIO_MCP_ALLOWED_HOSTS", [])
# Refuses every outbound address a project gives, public ones too (e.g. while fuzzing the API).
STUDIO_EGRESS_DENY_ALL = env_bool("STUDIO_EGRESS_DENY_ALL", False)
try:
    parse_host_rules(STUDIO_EGRESS_ALLOWED_HOSTS, name="STUDIO_EGRESS_ALLOWED_HOSTS")
    parse_host_rules(STUDIO_MCP_ALLOWED_HOSTS)
except ValueError as err:
    raise ImproperlyConfigured(str(err)) from None
# The stdio MCP servers projects may choose (webapp/mcp_catalogue.py): the only commands an MCP server runs. JSON
# {"name": {"command", "args", "env", "description"}} or @path to such a file; the shipped mailbox is always there.
try:
    STUDIO_MCP_STDIO_SERVERS = parse_catalogue(env_str(MCP_CATALOGUE_VARIABLE))
except ValueError as err:
    raise ImproperlyConfigured(str(err)) from None
# The base models agents may name (webapp/model_catalogue.py): JSON {"name": {"source", "description",
# "context_length"}} or @path (the tiny offline model is always listed as tiny-2048), and the Hugging Face id
# patterns allowed beside them (comma list, e.g. Qwen/*; none by default). Never a path a member types.
try:
    STUDIO_BASE_MODELS = parse_model_catalogue(env_str(MODEL_CATALOGUE_VARIABLE), base_dir=BASE_DIR)
    STUDIO_HF_MODELS = parse_hf_patterns(env_str(HF_VARIABLE))
except ValueError as err:
    raise ImproperlyConfigured(str(err)) from None
# The deployment's part of every run's engine config (webapp/run_policy.py): the inference server (kind, address,
# GPUs, sharing) and where the trainer runs (device, trainer.gpus/distributed/processes/require_gpu), as JSON,
# e.g. {"server": {"kind": "vllm", "gpu_sharing": "sleep"}} on GPU workers. A launch's overrides never set these.
try:
    STUDIO_RUN_WORKER_CONFIG = parse_worker_config(env_str("STUDIO_RUN_WORKER_CONFIG") or "{}")
except ValueError as err:
    raise ImproperlyConfigured(str(err)) from None
STUDIO_MAX_UPLOAD_BYTES = env_int("STUDIO_MAX_UPLOAD_BYTES", 5 * 1024 * 1024, minimum=1024)
STUDIO_MAX_UPLOAD_ROWS = env_int("STUDIO_MAX_UPLOAD_ROWS", 10000, minimum=1)
# One SFT conversation (a JSONL line) at most: a longer one is refused at upload, naming its line.
STUDIO_MAX_CONVERSATION_BYTES = env_int("STUDIO_MAX_CONVERSATION_BYTES", 1_000_000, minimum=1024)
# What one project may store (webapp/limits.py, docs/security.md "Per-project limits"): JSON {"dataset_rows": N,
# ...}; the keys left out keep their defaults, an unknown key or a bad value stops the start.
try:
    STUDIO_PROJECT_LIMITS = parse_limits(env_str(LIMITS_VARIABLE))
except ValueError as err:
    raise ImproperlyConfigured(str(err)) from None
# External rollouts (issue 21): the largest body the rollouts API and a run's OpenAI-compatible endpoint take,
# the most messages a submitted trajectory may have, and how long the endpoint waits for the run's server.
STUDIO_EXTERNAL_MAX_BYTES = env_int("STUDIO_EXTERNAL_MAX_BYTES", 2 * 1024 * 1024, minimum=1024)
STUDIO_EXTERNAL_MAX_MESSAGES = env_int("STUDIO_EXTERNAL_MAX_MESSAGES", 500, minimum=1)
# STUDIO_EXTERNAL_UPSTREAM_TIMEOUT_S is the deployment's maximum; an agent may ask for less (upstream_timeout_s).
STUDIO_EXTERNAL_UPSTREAM_TIMEOUT_S = env_float("STUDIO_EXTERNAL_UPSTREAM_TIMEOUT_S", 600.0, minimum=1.0)
STUDIO_EXTERNAL_PER_MINUTE = env_int("STUDIO_EXTERNAL_PER_MINUTE", 6000, minimum=1)  # calls to a run's endpoint
# The run's endpoint (issue 33, docs/security.md): calls one run may have waiting on its server at once (429
# beyond), the largest answer it passes on (502 beyond), the checkpoints it keeps loaded by name on a run's
# server (least recently used unloaded first), how many of its database steps run at once in a web process (each
# holds a connection for a few queries, never while waiting upstream), and how long recorded calls are kept after
# their run ended (`manage.py prune_external_calls`, daily with Celery beat).
STUDIO_EXTERNAL_MAX_IN_FLIGHT = env_int("STUDIO_EXTERNAL_MAX_IN_FLIGHT", 128, minimum=1)
STUDIO_EXTERNAL_MAX_ANSWER_BYTES = env_int("STUDIO_EXTERNAL_MAX_ANSWER_BYTES", 32 * 1024 * 1024, minimum=64 * 1024)
STUDIO_EXTERNAL_MAX_LOADED_CHECKPOINTS = env_int("STUDIO_EXTERNAL_MAX_LOADED_CHECKPOINTS", 4, minimum=1)
STUDIO_EXTERNAL_DB_CONCURRENCY = env_int("STUDIO_EXTERNAL_DB_CONCURRENCY", 4, minimum=1)
STUDIO_EXTERNAL_CALLS_KEEP_DAYS = env_int("STUDIO_EXTERNAL_CALLS_KEEP_DAYS", 30, minimum=0)
# Serving what runs trained (issue 37; docs/use.md): the project's on-demand inference server goes down after
# STUDIO_SERVE_IDLE_S without a request; a start that takes longer than STUDIO_SERVE_START_TIMEOUT_S (a worker on
# queue `serve` picking it up, then the model loading) fails with the reason. STUDIO_SERVE_SERVER is the server
# kind it runs: the kind the deployment's runs use (`local` on CPU workers, `vllm` on GPU workers).
STUDIO_SERVE_IDLE_S = env_float("STUDIO_SERVE_IDLE_S", 600.0, minimum=1.0)
STUDIO_SERVE_START_TIMEOUT_S = env_float("STUDIO_SERVE_START_TIMEOUT_S", 600.0, minimum=5.0)
STUDIO_SERVE_SERVER = env_choice("STUDIO_SERVE_SERVER", "local", ("local", "vllm"))
# What one account (the owner of the projects) and one project may hold at once (webapp/server_caps.py,
# docs/security.md "Servers per account and project"): inference servers up or starting, Try it sessions not yet
# answered, distillations queued or running. Over a cap the request is a 429 naming the cap and its usage.
STUDIO_MAX_SERVERS_PER_ACCOUNT = env_int("STUDIO_MAX_SERVERS_PER_ACCOUNT", 2, minimum=1)
STUDIO_MAX_SERVERS_PER_PROJECT = env_int("STUDIO_MAX_SERVERS_PER_PROJECT", 2, minimum=1)
STUDIO_MAX_TRY_SESSIONS_PER_ACCOUNT = env_int("STUDIO_MAX_TRY_SESSIONS_PER_ACCOUNT", 3, minimum=1)
STUDIO_MAX_TRY_SESSIONS_PER_PROJECT = env_int("STUDIO_MAX_TRY_SESSIONS_PER_PROJECT", 5, minimum=1)
STUDIO_MAX_DISTILLATIONS_PER_ACCOUNT = env_int("STUDIO_MAX_DISTILLATIONS_PER_ACCOUNT", 2, minimum=1)
STUDIO_MAX_DISTILLATIONS_PER_PROJECT = env_int("STUDIO_MAX_DISTILLATIONS_PER_PROJECT", 2, minimum=1)
# Experiment trackers (issue 37; docs/use.md): the deployment says where runs may report; a run (its launch form or
# the API's `trackers`) chooses among these. W&B is offered when STUDIO_WANDB_PROJECT is set (its key: WANDB_API_KEY
# in the workers' environment, passed to the engine of a run that reports to W&B only; `offline` mode writes run
# directories under STUDIO_WANDB_DIR, no account); MLflow when STUDIO_MLFLOW_TRACKING_URI is (an http(s) server,
# its MLFLOW_TRACKING_* credentials in the workers' environment, or a `file:` store). STUDIO_PUBLIC_URL is where
# people open this site: the runs' link back (a path alone without it).
STUDIO_WANDB_PROJECT = env_str("STUDIO_WANDB_PROJECT") or None
STUDIO_WANDB_ENTITY = env_str("STUDIO_WANDB_ENTITY") or None
STUDIO_WANDB_MODE = env_choice("STUDIO_WANDB_MODE", "online", ("online", "offline"))
STUDIO_WANDB_DIR = env_str("STUDIO_WANDB_DIR") or str(VAR_DIR / "wandb")
STUDIO_MLFLOW_TRACKING_URI = env_str("STUDIO_MLFLOW_TRACKING_URI") or None
if STUDIO_MLFLOW_TRACKING_URI and not STUDIO_MLFLOW_TRACKING_URI.startswith(("http://", "https://", "file:")):
    raise ImproperlyConfigured("STUDIO_MLFLOW_TRACKING_URI must be an http(s) URL or a file: URI")
STUDIO_MLFLOW_EXPERIMENT = env_str("STUDIO_MLFLOW_EXPERIMENT") or "rubric-studio"
# Langfuse (issue 49; training/monitoring/langfuse.py): each trajectory a trace, offered when STUDIO_LANGFUSE_HOST is
# set (its keys: LANGFUSE_PUBLIC_KEY / LANGFUSE_SECRET_KEY in the workers' environment, passed to the engine of a
# run that reports to Langfuse only).
STUDIO_LANGFUSE_HOST = (env_str("STUDIO_LANGFUSE_HOST") or "").rstrip("/") or None
if STUDIO_LANGFUSE_HOST and not STUDIO_LANGFUSE_HOST.startswith(("http://", "https://")):
    raise ImproperlyConfigured("STUDIO_LANGFUSE_HOST must be an http(s) URL, e.g. https://cloud.langfuse.com")
STUDIO_LANGFUSE_ENVIRONMENT = env_str("STUDIO_LANGFUSE_ENVIRONMENT") or None
if STUDIO_LANGFUSE_ENVIRONMENT and (len(STUDIO_LANGFUSE_ENVIRONMENT) > 40 or not set(STUDIO_LANGFUSE_ENVIRONMENT)
                                    <= set("abcdefghijklmnopqrstuvwxyz0123456789_-")):
    raise ImproperlyConfigured("STUDIO_LANGFUSE_ENVIRONMENT is lowercase letters, digits, - and _ (at most 40)")
STUDIO_PUBLIC_URL = (env_str("STUDIO_PUBLIC_URL") or "").rstrip("/")
# The Bearer token Prometheus sends to /metrics (webapp/operations/, docs/webapp.md "Metrics"); unset, /metrics is
# not served (404). /healthz and /readyz need none and say nothing secret.
STUDIO_METRICS_TOKEN = env_str("STUDIO_METRICS_TOKEN") or ""
if STUDIO_METRICS_TOKEN and len(STUDIO_METRICS_TOKEN) < 16:
    raise ImproperlyConfigured("STUDIO_METRICS_TOKEN must be at least 16 characters long")
# Notifications (webapp/notifications/, docs/webapp.md "Notifications"): e-mail through Django's backend (the
# console on the embedded default, SMTP from EMAIL_HOST/EMAIL_PORT/... otherwise); a failed e-mail or webhook is
# tried STUDIO_NOTIFY_ATTEMPTS times in all, waiting STUDIO_NOTIFY_BACKOFF_S, then twice as long each time.
EMAIL_BACKEND = env_str("EMAIL_BACKEND") or ("django.core.mail.backends.console.EmailBackend" if EMBEDDED
                                             else "django.core.mail.backends.smtp.EmailBackend")
EMAIL_HOST = env_str("EMAIL_HOST") or "localhost"
EMAIL_PORT = env_int("EMAIL_PORT", 25, minimum=1)
EMAIL_HOST_USER = env_str("EMAIL_HOST_USER") or ""
EMAIL_HOST_PASSWORD = env_str("EMAIL_HOST_PASSWORD") or ""
EMAIL_USE_TLS = env_bool("EMAIL_USE_TLS", False)
DEFAULT_FROM_EMAIL = env_str("DEFAULT_FROM_EMAIL") or "rubric-studio@localhost"
STUDIO_NOTIFY_ATTEMPTS = env_int("STUDIO_NOTIFY_ATTEMPTS", 5, minimum=1)
STUDIO_NOTIFY_BACKOFF_S = env_float("STUDIO_NOTIFY_BACKOFF_S", 30.0, minimum=0.0)
STUDIO_NOTIFY_TIMEOUT_S = env_float("STUDIO_NOTIFY_TIMEOUT_S", 10.0, minimum=0.1)
DATA_UPLOAD_MAX_MEMORY_SIZE = max(STUDIO_MAX_UPLOAD_BYTES, STUDIO_EXTERNAL_MAX_BYTES) + 1024 * 1024
FILE_UPLOAD_MAX_MEMORY_SIZE = STUDIO_MAX_UPLOAD_BYTES + 1024 * 1024

CELERY_BROKER_URL = REDIS_URL or "memory://"
CELERY_RESULT_BACKEND = None
# Every task names its queue: `gpu` for runs and merged exports; `judge` (light, always running) for re-scores,
# distillations (a teacher's and a judge's API calls), the reaper and Try it's rollouts; `serve` for the projects'
# inference servers (a task holds its server until it idles: a worker of its own).
CELERY_TASK_ROUTES = {"webapp.tasks.run_execute_task": {"queue": "gpu"},
                      "webapp.tasks.run_evaluate_task": {"queue": "gpu"},
                      "webapp.tasks.playground_rescore_task": {"queue": "judge"},
                      "webapp.tasks.reap_stale_runs_task": {"queue": "judge"},
                      "webapp.tasks.external_calls_prune_task": {"queue": "judge"},
                      "webapp.tasks.checkpoints_prune_task": {"queue": "judge"},
                      "webapp.tasks.distillation_task": {"queue": "judge"},
                      "webapp.tasks.project_server_hold_task": {"queue": "serve"},
                      "webapp.tasks.try_execute_task": {"queue": "judge"},
                      "webapp.tasks.try_judge_task": {"queue": "judge"},
                      "webapp.tasks.checkpoint_export_task": {"queue": "gpu"},
                      "webapp.tasks.mcp_server_test_task": {"queue": "judge"},
                      "webapp.tasks.notification_deliver_task": {"queue": "judge"}}
CELERY_TASK_DEFAULT_QUEUE = "default"
# Early ack + the DB state machine: a run's message is acknowledged on receipt, so a worker that dies is never
# followed by a second worker re-running the same run; the heartbeat marks it crashed instead.
CELERY_TASK_ACKS_LATE = False
CELERY_WORKER_PREFETCH_MULTIPLIER = 1
CELERY_BROKER_TRANSPORT_OPTIONS = {"visibility_timeout": 7 * 24 * 3600}
CELERY_BEAT_SCHEDULE = {
    "reap-stale-runs": {"task": "webapp.tasks.reap_stale_runs_task", "schedule": STUDIO_STALE_AFTER_S / 2},
    "prune-external-calls": {"task": "webapp.tasks.external_calls_prune_task", "schedule": 24 * 3600.0},
    "prune-checkpoints": {"task": "webapp.tasks.checkpoints_prune_task", "schedule": 3600.0},
}

AUTH_PASSWORD_VALIDATORS = [
    {"NAME": "django.contrib.auth.password_validation.MinimumLengthValidator", "OPTIONS": {"min_length": 8}},
]
LOGIN_URL = "login"
LOGIN_REDIRECT_URL = "project-list"
LOGOUT_REDIRECT_URL = "login"

LANGUAGE_CODE = "en-us"
TIME_ZONE = "UTC"
USE_I18N = False
USE_TZ = True

STATIC_URL = "static/"
STATIC_ROOT = VAR_DIR / "staticfiles"
STATICFILES_DIRS = [BASE_DIR / "static"]
STATICFILES_FINDERS = [
    "django.contrib.staticfiles.finders.FileSystemFinder",
    "django.contrib.staticfiles.finders.AppDirectoriesFinder",
    "webapp.staticfinders.VendorFinder",
]

REST_FRAMEWORK = {
    "DEFAULT_AUTHENTICATION_CLASSES": [
        "rest_framework.authentication.TokenAuthentication",
        "rest_framework.authentication.SessionAuthentication",
    ],
    "DEFAULT_PERMISSION_CLASSES": ["rest_framework.permissions.IsAuthenticated"],
    # JSON bodies only (a form field carries no type: `1.0` or `null` would arrive as text); the scenario upload
    # takes multipart itself.
    "DEFAULT_PARSER_CLASSES": ["webapp.api.parsers.InputJSONParser"],
    "TEST_REQUEST_DEFAULT_FORMAT": "json",  # DRF's test client sends what the API takes
    "DEFAULT_SCHEMA_CLASS": "webapp.api.schema.StudioAutoSchema",
    "DEFAULT_PAGINATION_CLASS": "webapp.api.pagination.Pagination",
    "PAGE_SIZE": 50,
    "EXCEPTION_HANDLER": "webapp.api.errors.exception_handler",
    "DEFAULT_THROTTLE_CLASSES": ["webapp.ratelimit.ApiUserThrottle", "webapp.ratelimit.ApiAnonThrottle"],
}
# Rate limits (requests per minute): API calls per user and per anonymous address; failed logins per
# (address, username) and per address, counted over STUDIO_LOGIN_WINDOW_S. Counters live in the cache below.
STUDIO_API_PER_MINUTE = env_int("STUDIO_API_PER_MINUTE", 600, minimum=1)
STUDIO_API_ANON_PER_MINUTE = env_int("STUDIO_API_ANON_PER_MINUTE", 60, minimum=1)
STUDIO_LOGIN_FAILURES = env_int("STUDIO_LOGIN_FAILURES", 5, minimum=1)
STUDIO_LOGIN_FAILURES_PER_ADDRESS = env_int("STUDIO_LOGIN_FAILURES_PER_ADDRESS", 30, minimum=1)
STUDIO_LOGIN_WINDOW_S = env_int("STUDIO_LOGIN_WINDOW_S", 300, minimum=1)
# A test deployment raises every limit answered with 429 at once (docs/security.md "Rate limits in a test
# deployment"): a fuzzer is one client sending thousands of requests a minute, and 429s would hide every other
# answer. Each limit above (and the run endpoint's, the servers', Try it's and distillations' caps) is multiplied
# by STUDIO_THROTTLE_SCALE (default 1: the limits as set). It is the deployment's own setting, as each limit is, so
# it is taken with DEBUG off too (the fuzzed app is the production one); the API's docs page states the raised
# numbers, so a deployment that left it on shows it.
STUDIO_THROTTLE_SCALE = env_int("STUDIO_THROTTLE_SCALE", 1, minimum=1)
STUDIO_API_PER_MINUTE *= STUDIO_THROTTLE_SCALE
STUDIO_API_ANON_PER_MINUTE *= STUDIO_THROTTLE_SCALE
STUDIO_LOGIN_FAILURES *= STUDIO_THROTTLE_SCALE
STUDIO_LOGIN_FAILURES_PER_ADDRESS *= STUDIO_THROTTLE_SCALE
STUDIO_EXTERNAL_PER_MINUTE *= STUDIO_THROTTLE_SCALE
STUDIO_EXTERNAL_MAX_IN_FLIGHT *= STUDIO_THROTTLE_SCALE
STUDIO_MAX_SERVERS_PER_ACCOUNT *= STUDIO_THROTTLE_SCALE
STUDIO_MAX_SERVERS_PER_PROJECT *= STUDIO_THROTTLE_SCALE
STUDIO_MAX_TRY_SESSIONS_PER_ACCOUNT *= STUDIO_THROTTLE_SCALE
STUDIO_MAX_TRY_SESSIONS_PER_PROJECT *= STUDIO_THROTTLE_SCALE
STUDIO_MAX_DISTILLATIONS_PER_ACCOUNT *= STUDIO_THROTTLE_SCALE
STUDIO_MAX_DISTILLATIONS_PER_PROJECT *= STUDIO_THROTTLE_SCALE
# Shared by every process with Redis (so limits hold across web processes), per process without it.
CACHES = {"default": {"BACKEND": "django.core.cache.backends.redis.RedisCache", "LOCATION": REDIS_URL,
                      "KEY_PREFIX": env_str("STUDIO_CHANNEL_PREFIX", "studio")}} if REDIS_URL else {
    "default": {"BACKEND": "django.core.cache.backends.locmem.LocMemCache"}}
SPECTACULAR_SETTINGS = {
    "TITLE": "Rubric Studio API",
    "DESCRIPTION": "Projects, agents, scenarios, rubrics, judges and RL runs. Token auth: `Authorization: Token <key>`.\n\n"
                   "## External rollouts\n\nAn agent in your own code reads the step to roll out "
                   "(`GET /api/runs/{id}/rollouts/`), samples through the run's OpenAI-compatible endpoint "
                   "`/api/runs/{id}/openai/v1/` (`POST chat/completions`, `GET models`; header `X-Trajectory-Id` "
                   "records a call for that trajectory; not in this schema: it is OpenAI's API) and submits each "
                   "group (`POST /api/runs/{id}/rollouts/groups/`). These take a project token, "
                   "`Authorization: Bearer rs_...` (a project's API tokens page), or an editor's own token.",
    "VERSION": "0.1.0",
    "SERVE_INCLUDE_SCHEMA": False,
    "SWAGGER_UI_DIST": "SIDECAR",
    "SWAGGER_UI_FAVICON_HREF": "SIDECAR",
    "REDOC_DIST": "SIDECAR",
    # Request bodies get components of their own, so the schema can say what a client must send (non-blank
    # strings: minLength 1; read-only fields left out) apart from what it gets back.
    "COMPONENT_SPLIT_REQUEST": True,
    "ENUM_NAME_OVERRIDES": {"RunStatusEnum": "webapp.models.RunStatus",
                            "RescoreStatusEnum": "webapp.models.Rescore.Status"},
    "POSTPROCESSING_HOOKS": ["drf_spectacular.hooks.postprocess_schema_enums",
                             "webapp.api.schema.error_responses"],
}

SESSION_COOKIE_HTTPONLY = True
X_FRAME_OPTIONS = "DENY"
LOGGING = {
    "version": 1,
    "disable_existing_loggers": False,
    "handlers": {"console": {"class": "logging.StreamHandler"}},
    "loggers": {"webapp": {"handlers": ["console"], "level": env_str("STUDIO_LOG_LEVEL", "INFO")}},
}

# The engine entry point the run process calls (async or sync `train(config, *, scorer, sink, control)`).
STUDIO_ENGINE = env_str("STUDIO_ENGINE", "training:train")
# Where a run's base model is checked (training.model.preflight: it exists, loads, fits the run): "launch" in the web
# request and again by the worker before it starts the engine; "worker" only there, where the web process cannot
# see the workers' models (docker/compose.yml); "off" not at all.
STUDIO_MODEL_CHECK = env_choice("STUDIO_MODEL_CHECK", "launch", ("launch", "worker", "off"))
# The managed download (webapp/execution/model_fetch.py, docs/webapp.md): a run whose base model is a Hugging Face
# id has its worker fetch it from HF_ENDPOINT (the hub's, unset) into STUDIO_MODEL_CACHE_DIR before the engine
# starts, whatever HF_HUB_OFFLINE says; the engine then loads it offline. Default cache: Hugging Face's own
# (HF_HUB_CACHE, else HF_HOME/hub), so models fetched beforehand are found. HF_TOKEN: the workers' environment only.
STUDIO_MODEL_DOWNLOAD = env_bool("STUDIO_MODEL_DOWNLOAD", True)
STUDIO_MODEL_CACHE_DIR = Path(env_str("STUDIO_MODEL_CACHE_DIR") or env_str("HF_HUB_CACHE") or Path(
    env_str("HF_HOME") or Path.home() / ".cache" / "huggingface") / "hub").expanduser()
STUDIO_MODEL_HUB = (env_str("HF_ENDPOINT") or "https://huggingface.co").rstrip("/")
if not STUDIO_MODEL_HUB.startswith(("https://", "http://")):
    raise ImproperlyConfigured(f"HF_ENDPOINT={STUDIO_MODEL_HUB!r}: give the model hub's URL, e.g. "
                               "https://huggingface.co")
# The address a worker's inference servers listen on for external rollouts (an agent in the user's own code reaches
# its run's server through the web app, which forwards to it): empty keeps the run's `server.host` (127.0.0.1, for
# a web process on the same machine); with web and workers apart, 0.0.0.0, and the worker's host name resolvable
# from the web process (docker/compose.yml). Keep it on the private network all the same.
STUDIO_ENGINE_HOST = env_str("STUDIO_ENGINE_HOST", "")
# The Bearer token of the inference servers the workers start (training.servers.serving): every request to them
# carries it, the web app's forwarded calls included, and only with it may one listen beyond loopback. The web
# process and every worker must agree: unset, it is derived from SECRET_KEY, which they share.
STUDIO_INFERENCE_TOKEN = env_str("STUDIO_INFERENCE_TOKEN") or hmac.new(
    SECRET_KEY.encode(), b"rubric-studio inference server token", hashlib.sha256).hexdigest()
if len(STUDIO_INFERENCE_TOKEN) < 16:
    raise ImproperlyConfigured("STUDIO_INFERENCE_TOKEN must be at least 16 characters long")
