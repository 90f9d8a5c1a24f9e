"""The run's endpoint under load (issue 33): --calls concurrent chat completions through a run's OpenAI-compatible
endpoint, served by daphne, against an inference server double that takes --upstream-s to answer each. While
they wait it samples, every 0.2 s, the web process's PostgreSQL connections (pg_stat_activity, by the
application_name daphne connects with) and its threads, and asks for the run's page every 0.5 s with a browser
session (its latency, against the same page on the idle app in the same run). `make bench` checks: at most 10
connections, run page p95 under 1 s.

    DATABASE_URL=postgres://postgres@127.0.0.1:5432/rubric_studio_endpoint_bench REDIS_URL=redis://127.0.0.1:6379/11 \\
        python -m bench.endpoint_load_bench [--calls 200] [--upstream-s 60] [--app-dir DIR]

Both default to these; the database is recreated. --app-dir runs the web app of another checkout of this
repository (the "before" numbers in docs/security.md were measured with the code before issue 33 that way, on a
PostgreSQL of its own with max_connections = 100, so its connections could not starve anyone else's).
STUDIO_EXTERNAL_MAX_IN_FLIGHT is set above --calls, so every call is admitted and waits.
"""
from __future__ import annotations

import argparse
import asyncio
import json
import os
import socket
import statistics
import subprocess
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
APP_NAME = "endpoint-bench-web"
os.environ.setdefault("DATABASE_URL", "postgres://postgres@127.0.0.1:5432/rubric_studio_endpoint_bench")
os.environ.setdefault("REDIS_URL", "redis://127.0.0.1:6379/11")
os.environ.setdefault("SECRET_KEY", "bench-only-secret-key-" + "x" * 30)
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "webapp.settings")
os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")
os.environ.setdefault("STUDIO_EXECUTOR", "celery")  # nothing is launched; the run's rows are written here
SYSTEM_PROMPT, QUESTION = "Answer the customer's question.", "What is the refund policy?"


class SlowUpstream:
    """The run's inference server, played: every chat completion takes `delay_s`."""

    def __init__(self, delay_s: float) -> None:
        delay = delay_s

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args: Any) -> None:
                pass

            def do_POST(self) -> None:
                body = json.loads(self.rfile.read(int(self.headers.get("Content-Length") or 0)))
                time.sleep(delay)
                data = json.dumps({"id": "c", "object": "chat.completion", "created": 0, "model": body["model"],
                                   "choices": [{"index": 0, "message": {"role": "assistant", "content": "30 days"},
                                                "finish_reason": "stop", "token_ids": [1, 2],
                                                "logprobs": {"content": [{"token": "a", "logprob": -0.1},
                                                                         {"token": "b", "logprob": -0.2}]}}],
                                   "usage": {"prompt_tokens": 4, "completion_tokens": 2}}).encode()
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

        ThreadingHTTPServer.request_queue_size = 1024
        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        threading.Thread(target=self.server.serve_forever, daemon=True).start()
        self.base_url = f"http://127.0.0.1:{self.server.server_port}/v1"


def _database() -> None:
    import psycopg

    url = os.environ["DATABASE_URL"]
    name = url.rsplit("/", 1)[1].split("?")[0]
    with psycopg.connect(url.rsplit("/", 1)[0] + "/postgres", autocommit=True) as conn:
        conn.execute(f'drop database if exists "{name}" with (force)')
        conn.execute(f'create database "{name}"')


def _world(upstream_url: str) -> tuple[int, str, str]:
    """The run (an external agent's, its step 1 open and served by the double), a project token and a browser
    session of its owner. Returns (run id, token, session key)."""
    import django
    from django.core.management import call_command

    django.setup()
    call_command("migrate", verbosity=0)
    from django.contrib.auth import get_user_model
    from django.contrib.sessions.backends.db import SessionStore

    from webapp.live.ingest import run_event_ingest
    from webapp.models import Agent, Membership, Project, Role, Run, Scenario, ScenarioSet
    from webapp.services.project_tokens import project_token_create
    from webapp.services.run_config import run_config_build

    user = get_user_model().objects.create_user("bench", password="bench-password-1")
    project = Project.objects.create(owner=user, name="endpoint bench")
    Membership.objects.create(project=project, user=user, role=Role.EDITOR)
    agent = Agent.objects.create(project=project, name="agent", base_model="var/tiny-model",
                                 system_prompt=SYSTEM_PROMPT, environment_kind="external", environment_options={})
    scenarios = ScenarioSet.objects.create(project=project, name="questions")
    Scenario.objects.create(scenario_set=scenarios, external_id="q1", user_message=QUESTION)
    config = run_config_build(name="bench", agent=agent, scenario_set=scenarios, rubric_version=None, judge=None,
                              steps=1, group_size=8, groups_per_step=1, learning_rate=1e-3, overrides=None)
    run = Run.objects.create(project=project, name="bench", agent=agent, scenario_set=scenarios, config=config,
                             status="running", total_steps=1, external_base_url=upstream_url)
    run_event_ingest(run_id=run.id, event={
        "kind": "rollouts_wanted", "step": 1, "model": "base", "base_url": upstream_url, "timeout_s": 3600,
        "on_missing": "skip", "allow_unsampled": False, "group_size": 8, "system_prompt": SYSTEM_PROMPT,
        "sampling": {"temperature": 1.0, "top_p": 1.0, "max_tokens": 64},
        "groups": [{"group_index": 0, "scenario": {"id": "q1", "user_message": QUESTION, "context": None,
                                                   "metadata": {}}}]})
    _, key = project_token_create(user=user, project=project, name="bench")
    session = SessionStore()
    session["_auth_user_id"] = str(user.pk)
    session["_auth_user_backend"] = "django.contrib.auth.backends.ModelBackend"
    session["_auth_user_hash"] = user.get_session_auth_hash()
    session.create()
    from django.db import connection

    connection.close()
    return run.pk, key, session.session_key


def _daphne(app_dir: Path, calls: int, upstream_s: float) -> tuple[subprocess.Popen, str]:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    url = os.environ["DATABASE_URL"]
    env = dict(os.environ, PYTHONPATH=str(app_dir),
               DATABASE_URL=url + ("&" if "?" in url else "?") + f"application_name={APP_NAME}",
               STUDIO_EXTERNAL_MAX_IN_FLIGHT=str(calls + 56), STUDIO_EXTERNAL_PER_MINUTE="1000000",
               STUDIO_API_PER_MINUTE="1000000", STUDIO_EXTERNAL_UPSTREAM_TIMEOUT_S=str(upstream_s + 60))
    log = open(Path(os.environ.get("TMPDIR", "/tmp")) / f"endpoint-bench-daphne-{os.getpid()}.log", "w")
    proc = subprocess.Popen([sys.executable, "-m", "daphne", "-b", "127.0.0.1", "-p", str(port),
                             "webapp.asgi:application"], cwd=app_dir, env=env, stdout=log, stderr=subprocess.STDOUT)
    for _ in range(300):
        with socket.socket() as s:
            if s.connect_ex(("127.0.0.1", port)) == 0:
                return proc, f"http://127.0.0.1:{port}"
        time.sleep(0.1)
    proc.kill()
    raise SystemExit(f"daphne did not start (see {log.name})")


class _Connections:
    """Counts the web process's connections on a connection of its own, opened before the load (the code before
    issue 33 leaves none to open once its calls wait)."""

    def __init__(self) -> None:
        import psycopg

        self.conn = psycopg.connect(os.environ["DATABASE_URL"], autocommit=True)

    def count(self) -> int:
        return self.conn.execute("select count(*) from pg_stat_activity where application_name = %s",
                                 [APP_NAME]).fetchone()[0]


def _p(values: list[float], q: float) -> float:
    values = sorted(values)
    return values[min(len(values) - 1, int(q * len(values)))] if values else float("nan")


async def _page(http, url: str, session: str) -> tuple[float, int]:
    started = time.perf_counter()
    try:
        response = await http.get(url, cookies={"sessionid": session}, timeout=30)
        return time.perf_counter() - started, response.status_code
    except Exception:  # noqa: BLE001 - a page that does not answer is a result here
        return time.perf_counter() - started, 0


async def _load(base: str, run_id: int, key: str, session: str, calls: int, upstream_s: float,
                daphne_pid: int) -> dict[str, Any]:
    import httpx
    import psutil

    page = f"{base}/runs/{run_id}/"
    async with httpx.AsyncClient() as http:
        await _page(http, page, session)  # templates compiled, connections made: not part of the baseline
        idle = [await _page(http, page, session) for _ in range(20)]
        async with httpx.AsyncClient(limits=httpx.Limits(max_connections=calls + 10),
                                     timeout=upstream_s + 120) as agents:
            started = time.monotonic()

            async def one(k: int):
                try:
                    return await agents.post(
                        f"{base}/api/runs/{run_id}/openai/v1/chat/completions",
                        headers={"Authorization": f"Bearer {key}", "X-Trajectory-Id": f"t{k}"},
                        json={"messages": [{"role": "system", "content": SYSTEM_PROMPT},
                                           {"role": "user", "content": QUESTION}]})
                except Exception as err:  # noqa: BLE001
                    return err

            flood = [asyncio.create_task(one(k)) for k in range(calls)]
            connections, threads, pages, monitor = [], [], [], _Connections()
            process = psutil.Process(daphne_pid)
            next_page = time.monotonic() + 2.0  # the calls' first database steps are done by then
            while not all(t.done() for t in flood):
                connections.append(await asyncio.to_thread(monitor.count))
                threads.append(process.num_threads())
                if time.monotonic() >= next_page and time.monotonic() - started < upstream_s - 2:
                    pages.append(await _page(http, page, session))
                    next_page = time.monotonic() + 0.5
                await asyncio.sleep(0.2)
            answers = [t.result() for t in flood]
            wall = time.monotonic() - started
            monitor.conn.close()
    statuses: dict[str, int] = {}
    for a in answers:
        name = str(a.status_code) if hasattr(a, "status_code") else type(a).__name__
        statuses[name] = statuses.get(name, 0) + 1
    return {"calls": calls, "upstream_s": upstream_s, "wall_s": round(wall, 1), "statuses": statuses,
            "pg_connections_max": max(connections), "pg_connections_median": statistics.median(connections),
            "daphne_threads_max": max(threads),
            "page_idle_p50_s": round(_p([t for t, _ in idle], 0.5), 3),
            "page_idle_p95_s": round(_p([t for t, _ in idle], 0.95), 3),
            "page_loaded_p50_s": round(_p([t for t, _ in pages], 0.5), 3),
            "page_loaded_p95_s": round(_p([t for t, _ in pages], 0.95), 3),
            "page_loaded_requests": len(pages), "page_loaded_errors": sum(s != 200 for _, s in pages)}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--calls", type=int, default=200)
    parser.add_argument("--upstream-s", type=float, default=60.0)
    parser.add_argument("--app-dir", type=Path, default=ROOT, help="the checkout whose web app is measured")
    parser.add_argument("--no-check", action="store_true", help="report only (for the code before issue 33)")
    args = parser.parse_args()
    app_dir = args.app_dir.resolve()
    sys.path.insert(0, str(app_dir))
    _database()
    upstream = SlowUpstream(args.upstream_s)
    run_id, key, session = _world(upstream.base_url)
    daphne, base = _daphne(app_dir, args.calls, args.upstream_s)
    try:
        result = asyncio.run(_load(base, run_id, key, session, args.calls, args.upstream_s, daphne.pid))
    finally:
        daphne.terminate()
        try:
            daphne.wait(timeout=30)
        except subprocess.TimeoutExpired:
            daphne.kill()
            daphne.wait(timeout=30)
    result["app_dir"] = "this checkout" if app_dir == ROOT else app_dir.name
    print(json.dumps(result, indent=1))
    print(f"endpoint load: {args.calls} calls x {args.upstream_s:g} s upstream -> answers {result['statuses']}; "
          f"PostgreSQL connections of the web process max {result['pg_connections_max']} (limit 10); run page "
          f"p95 {result['page_loaded_p95_s']:.3f} s under load vs {result['page_idle_p95_s']:.3f} s idle "
          f"({result['page_loaded_p95_s'] / max(result['page_idle_p95_s'], 1e-9):.1f}x; limit 1 s)")
    if args.no_check:
        return 0
    ok = (result["pg_connections_max"] <= 10 and result["page_loaded_p95_s"] < 1.0
          and result["statuses"].get("200") == args.calls and not result["page_loaded_errors"])
    print("endpoint load check:", "passed" if ok else "FAILED")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
