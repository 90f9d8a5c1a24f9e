"""Web app benchmark: engine event → websocket client latency through Redis (one client, then --clients on the
same run), the engine's step time while a run trains with --clients real websocket clients on daphne vs none,
concurrent API users (--api-users against one), and server time of the run page and of the groups
API with --trajectories stored trajectories (`make bench` uses 100,000), each as a ratio against its unloaded case.

    DATABASE_URL=postgres://postgres@127.0.0.1:5432/rubric_studio_bench REDIS_URL=redis://127.0.0.1:6379/12 \
        python bench/web_bench.py            # both default to these; the database is recreated

Latency: a separate process (like a Celery worker) ingests events through webapp.live.ingest, each stamped with
its send time; a websocket client of the real consumer (channels_redis) measures arrival. Training: the
scripted engine (real events, ingest and channel layer; no model) runs here while a separate process holds
the websocket clients (aiohttp) on a daphne server on a loopback port. Server times are
measured in-process with Django's test client (no network); the login page is the baseline of the same run.
"""
from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
os.environ.setdefault("DATABASE_URL", "postgres://postgres@127.0.0.1:5432/rubric_studio_bench")
os.environ.setdefault("REDIS_URL", "redis://127.0.0.1:6379/12")
os.environ.setdefault("SECRET_KEY", "bench-only-secret-key-" + "x" * 30)
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "webapp.settings")
os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")
os.environ.setdefault("ALLOWED_HOSTS", "testserver,localhost,127.0.0.1")
# The training runs execute here (a thread and the engine child), with the scripted engine: the real event
# contract and ingest, no model, so the step time is the web side's cost alone.
os.environ.setdefault("STUDIO_EXECUTOR", "inprocess")
os.environ.setdefault("STUDIO_ENGINE", "tests.webapp.scripted_engine:train")


def _ensure_database() -> None:
    import psycopg
    from urllib.parse import urlparse

    url = urlparse(os.environ["DATABASE_URL"])
    name = url.path.lstrip("/")
    admin = os.environ["DATABASE_URL"].rsplit("/", 1)[0] + "/postgres"
    with psycopg.connect(admin, autocommit=True) as conn:
        conn.execute(f'drop database if exists "{name}" with (force)')  # each run starts from nothing
        conn.execute(f'create database "{name}"')


def _setup() -> None:
    import django
    from django.core.management import call_command

    django.setup()
    call_command("migrate", verbosity=0)


def _pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(round(q * (len(ordered) - 1))))]


def _fixture(trajectories: int):
    from django.contrib.auth import get_user_model

    from tests.webapp.factories import run_factory
    from webapp.models import Project, Trajectory, TrajectoryGroup, Step, RunStatus

    user = get_user_model().objects.filter(username="bench").first() or get_user_model().objects.create_user(
        "bench", password="bench-password")
    Project.objects.filter(owner=user).delete()
    from tests.webapp.factories import project_factory

    run = run_factory(project=project_factory(owner=user), status=RunStatus.RUNNING, steps=1000)
    group_size, per_step = 8, 5
    steps = trajectories // (group_size * per_step)
    text = "The refund policy: refunds within 30 days of purchase; digital products are non-refundable. " * 4
    for step in range(1, steps + 1):
        groups = TrajectoryGroup.objects.bulk_create(
            TrajectoryGroup(run=run, step_index=step, index=g, scenario_external_id=f"s{g}", reward_mean=0.5,
                            reward_std=0.1) for g in range(per_step))
        Trajectory.objects.bulk_create(
            Trajectory(group=g, index=i, rank=i + 1, reward=1 - i / 8, judge_score=1 - i / 8, advantage=0.1 * i,
                       explanation="Faithful and concise; cites the context. " * 3,
                       messages=[{"role": "system", "content": "Answer using only the context."},
                                 {"role": "user", "content": "What is the refund policy?"},
                                 {"role": "assistant", "content": text}])
            for g in groups for i in range(group_size))
        Step.objects.create(run=run, index=step, metrics={"reward_mean": 0.5, "reward_std": 0.1, "loss": 0.1})
    return user, run


def _time(client, url: str, repeat: int) -> list[float]:
    times = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        response = client.get(url)
        times.append(time.perf_counter() - t0)
        assert response.status_code == 200, (url, response.status_code)
    return times


def bench_pages(trajectories: int, repeat: int) -> None:
    from django.test import Client

    user, run = _fixture(trajectories)
    client = Client()
    client.force_login(user)
    baseline = _time(Client(), "/login/", repeat)
    page = _time(client, f"/runs/{run.id}/", repeat)
    api = _time(client, f"/api/runs/{run.id}/groups/?limit=50", repeat)
    base = statistics.median(baseline)
    print(f"stored trajectories: {trajectories:,} in {trajectories // 40} steps")
    for name, values in (("login page (baseline)", baseline), ("run page", page), ("groups API (50)", api)):
        p50, p95 = statistics.median(values), _pct(values, 0.95)
        print(f"{name:<24} p50 {p50 * 1000:7.1f} ms  p95 {p95 * 1000:7.1f} ms  ({p50 / base:5.1f}x baseline)")


async def _receive(run_id: int, user, count: int, clients: int = 1) -> list[float]:
    """Every client's latency for every event (clients × count values)."""
    from channels.testing import WebsocketCommunicator

    from webapp.asgi import application

    sockets = []
    for _ in range(clients):
        client = WebsocketCommunicator(application, f"/ws/runs/{run_id}/?after=999999999",
                                       headers=[(b"host", b"localhost"), (b"origin", b"http://localhost")])
        client.scope["user"] = user
        assert (await client.connect())[0]
        sockets.append(client)
    publisher = subprocess.Popen([sys.executable, __file__, "--publish", str(run_id), str(count)], cwd=ROOT)

    async def collect(client) -> list[float]:
        latencies = []
        while len(latencies) < count:
            frame = await client.receive_json_from(timeout=60)  # one window's events (folded)
            at = time.time()
            latencies += [at - m["data"]["metrics"]["sent_at"] for m in frame if m["kind"] == "step_finished"]
        return latencies

    results = await asyncio.gather(*(collect(c) for c in sockets))
    publisher.wait()
    for client in sockets:
        await client.disconnect()
    return [value for values in results for value in values]


def bench_latency(count: int, clients: int) -> None:
    from tests.webapp.factories import run_factory
    from webapp.models import Run

    p95 = {}
    for n in (1, clients):
        run = run_factory(status="running", steps=count + 10)
        Run.objects.filter(pk=run.pk).update(last_event_seq=999999999)  # the clients only want live events
        latencies = asyncio.run(_receive(run.id, run.project.owner, count, clients=n))
        p95[n] = _pct(latencies, 0.95)
        print(f"event → websocket via Redis, {n:>3} client(s) on one run ({count} events, separate publisher "
              f"process): p50 {statistics.median(latencies) * 1000:.1f} ms  p95 {p95[n] * 1000:.1f} ms"
              + (f"  ({p95[n] / p95[1]:.1f}x one client)" if n != 1 else ""))


def bench_api_users(users: int, requests: int) -> None:
    """`users` threads, each its own logged-in member, calling the run list and a groups page at once."""
    from concurrent.futures import ThreadPoolExecutor

    from django.db import connections
    from django.test import Client

    from tests.webapp.factories import member_factory, run_factory

    run = run_factory(status="running")
    members = [member_factory(project=run.project) for _ in range(users)]

    def one_user(user) -> list[float]:
        client = Client()
        client.force_login(user)
        try:
            times = []
            for i in range(requests):
                times += _time(client, f"/api/runs/{run.id}/" if i % 2 else "/api/runs/", 1)
            return times
        finally:
            connections.close_all()

    alone = one_user(members[0])
    with ThreadPoolExecutor(max_workers=users) as pool:
        together = [t for values in pool.map(one_user, members) for t in values]
    base = _pct(alone, 0.95)
    print(f"API, 1 user: p95 {base * 1000:.1f} ms; {users} concurrent users: p95 {_pct(together, 0.95) * 1000:.1f} ms "
          f"({_pct(together, 0.95) / base:.1f}x one user; one process, so the GIL serialises them)")


def _daphne(port: int) -> subprocess.Popen:
    """The web process as docs/webapp.md deploys it, on a loopback port."""
    import socket

    env = os.environ | {"STUDIO_EXECUTOR": "celery"}  # it only serves: the runs are this process's
    proc = subprocess.Popen([sys.executable, "-m", "daphne", "-b", "127.0.0.1", "-p", str(port),
                             "webapp.asgi:application"], cwd=ROOT, env=env, stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        with socket.socket() as s:
            if s.connect_ex(("127.0.0.1", port)) == 0:
                return proc
        time.sleep(0.2)
    proc.kill()
    raise SystemExit("daphne did not start")


def _cpu(daphne: subprocess.Popen) -> dict[str, float]:
    """CPU seconds so far of each part of the live path: this process (the executor thread's ingest and
    publish), its reaped children (the engine child and the websocket clients' process), daphne, Redis (the
    server's own counters) and PostgreSQL (every server process: shared with other users of this machine)."""
    import psutil
    import redis

    me = psutil.Process()
    times = me.cpu_times()
    postgres = 0.0
    for proc in psutil.process_iter(["name"]):
        if proc.info["name"] in ("postgres", "postmaster"):
            try:
                t = proc.cpu_times()
                postgres += t.user + t.system
            except psutil.Error:
                pass
    info = redis.Redis.from_url(os.environ["REDIS_URL"]).info("cpu")
    d = psutil.Process(daphne.pid).cpu_times()
    return {"ingest (this process)": times.user + times.system, "children": times.children_user + times.children_system,
            "daphne": d.user + d.system, "redis": info["used_cpu_user"] + info["used_cpu_sys"], "postgres": postgres}


def _training_run(clients: int, port: int, cookie: str, steps: int,
                  daphne: subprocess.Popen) -> tuple[float, list[float], dict[str, float]]:
    """One scripted-engine run (the real event contract, ingest and Redis channel layer; no model), with
    `clients` real websocket clients (a separate process, aiohttp) on daphne. Returns the engine's mean step
    time (between step_finished events as stored), every client's latency for every message it was sent
    (stored → received), and the CPU seconds each part of the live path spent during the run."""
    from tests.webapp.factories import agent_factory, scenario_set_factory
    from webapp.execution import executors
    from webapp.live.fanout import SUMMARY_ONLY
    from webapp.models import Project, Run, RunEvent
    from webapp.services.runs import run_launch

    project = Project.objects.get(name="bench-live")
    executors.hold_submissions()  # queued until the clients are in
    # exact_match: the agent scores itself, so the run needs no judge
    agent = agent_factory(project=project, environment_options={"exact_match": True})
    run = run_launch(user=project.owner, project=project, name=f"live-{clients}", agent=agent,
                     scenario_set=scenario_set_factory(project=project), steps=steps, group_size=4,
                     groups_per_step=8, learning_rate=1e-3)
    watcher = None
    if clients:
        watcher = subprocess.Popen([sys.executable, __file__, "--ws-clients", str(port), str(run.id), str(clients), cookie],
                                   cwd=ROOT, stdout=subprocess.PIPE, text=True)
        assert watcher.stdout.readline().strip() == "ready"
    before = _cpu(daphne)
    executors._held = False  # noqa: SLF001  (release the hold taken above: the run starts now)
    executors.submit(run.id)
    deadline = time.monotonic() + 600
    while Run.objects.values_list("status", flat=True).get(pk=run.pk) not in ("completed", "failed", "crashed"):
        assert time.monotonic() < deadline, "the bench run did not finish"
        time.sleep(0.2)
    run.refresh_from_db()
    assert run.status == "completed", run.error
    stored = {e.seq: (e.created_at.timestamp(), e.kind) for e in RunEvent.objects.filter(run=run)}
    finished = sorted(e.created_at.timestamp() for e in RunEvent.objects.filter(run=run, kind="step_finished"))
    step_time = (finished[-1] - finished[0]) / (len(finished) - 1)
    latencies = []
    clients_cpu = 0.0
    if watcher:
        out, _ = watcher.communicate(timeout=120)
        report = json.loads(out)
        clients_cpu = report["cpu_s"]
        shown = {seq for seq, (_, kind) in stored.items() if kind not in SUMMARY_ONLY}
        for arrivals in report["arrivals"]:
            seqs = {int(seq) for seq in arrivals}
            # Every event the page acts on reaches every client; the others may be folded into a later one.
            assert shown <= seqs, sorted(shown - seqs)[:10]
            latencies += [at - stored[int(seq)][0] for seq, at in arrivals.items()]
    after = _cpu(daphne)
    cpu = {name: after[name] - before[name] for name in before}
    cpu["websocket clients"] = clients_cpu
    cpu["engine child"] = cpu.pop("children") - clients_cpu
    return step_time, latencies, cpu


def bench_training(clients: list[int], steps: int, repeat: int) -> None:
    """Engine step time with each count of websocket clients on the run vs none, alternating (the machine is
    shared), and where the CPU went in each case."""
    import requests

    from tests.webapp.factories import project_factory, user_factory
    from tests.webapp.factories import PASSWORD

    from training.fixtures.tiny_model import ensure_tiny_model

    ensure_tiny_model(ROOT / "var" / "tiny-model")  # the agent's base model must exist for the launch check
    os.environ["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))
    project_factory(owner=user_factory(), name="bench-live")
    port = 8765 + os.getpid() % 1000
    daphne = _daphne(port)
    counts = [0] + [n for n in clients if n]
    try:
        http = requests.Session()
        http.get(f"http://127.0.0.1:{port}/login/", timeout=30)
        from webapp.models import Project

        username = Project.objects.get(name="bench-live").owner.username
        http.post(f"http://127.0.0.1:{port}/login/", data={"username": username, "password": PASSWORD,
                  "csrfmiddlewaretoken": http.cookies["csrftoken"]}, allow_redirects=False, timeout=30)
        cookie = f"sessionid={http.cookies['sessionid']}"
        times: dict[int, list[float]] = {n: [] for n in counts}
        latencies: dict[int, list[float]] = {n: [] for n in counts}
        cpu: dict[int, list[dict[str, float]]] = {n: [] for n in counts}
        for _ in range(repeat):
            for n in counts:
                step_time, values, used = _training_run(n, port, cookie, steps, daphne)
                times[n].append(step_time)
                latencies[n].extend(values)
                cpu[n].append(used)
    finally:
        daphne.kill()
    none = statistics.median(times[0])
    print(f"engine step time, scripted engine ({steps} steps x 8 groups of 4, Redis channel layer), median of {repeat} "
          f"runs each: no clients {none * 1000:.1f} ms")
    for n in counts[1:]:
        step, values = statistics.median(times[n]), latencies[n]
        print(f"  {n:>3} websocket client(s) on daphne: step {step * 1000:.1f} ms ({step / none:.2f}x no clients); "
              f"event stored → client p50 {statistics.median(values) * 1000:.1f} ms  p95 {_pct(values, 0.95) * 1000:.1f} ms"
              f", {len(values):,} messages")
    parts = list(cpu[0][0])
    print("CPU seconds per run (median of the runs), by part of the live path:")
    print("  clients " + "".join(f"{name:>22}" for name in parts))
    for n in counts:
        print(f"  {n:>7} " + "".join(f"{statistics.median(c.get(name, 0.0) for c in cpu[n]):>22.2f}" for name in parts))


def ws_clients(port: int, run_id: int, count: int, cookie: str) -> None:
    """`count` websocket clients on one run; prints 'ready' once all are in, then each one's arrival times."""
    import aiohttp

    async def main() -> list[dict[int, float]]:
        async with aiohttp.ClientSession() as session:
            headers = {"Cookie": cookie, "Origin": f"http://127.0.0.1:{port}"}
            sockets = [await session.ws_connect(f"http://127.0.0.1:{port}/ws/runs/{run_id}/?after=0", headers=headers)
                       for _ in range(count)]
            print("ready", flush=True)

            async def collect(ws) -> dict[int, float]:
                arrivals = {}
                async for message in ws:
                    at = time.time()
                    frame = json.loads(message.data)  # one window's events
                    arrivals.update((event["seq"], at) for event in frame)
                    if frame[-1]["kind"] == "run_finished":
                        break
                await ws.close()
                return arrivals
            return await asyncio.gather(*(collect(ws) for ws in sockets))

    import resource

    arrivals = asyncio.run(main())
    usage = resource.getrusage(resource.RUSAGE_SELF)
    print(json.dumps({"arrivals": arrivals, "cpu_s": usage.ru_utime + usage.ru_stime}))


def publish(run_id: int, count: int) -> None:
    from webapp.live.ingest import run_event_ingest

    time.sleep(0.5)  # let the client join the group
    for step in range(1, count + 1):
        run_event_ingest(run_id=run_id, event={"kind": "step_finished", "step": step,
                                               "metrics": {"sent_at": time.time(), "reward_mean": 0.5}})
        time.sleep(0.01)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--trajectories", type=int, default=10_000)
    parser.add_argument("--repeat", type=int, default=20)
    parser.add_argument("--events", type=int, default=200)
    parser.add_argument("--clients", default="1,10,50",
                        help="websocket clients on one run, comma-separated (latency: the largest vs one; training: each vs none)")
    parser.add_argument("--api-users", type=int, default=20, help="concurrent API users (vs one)")
    parser.add_argument("--train-steps", type=int, default=15, help="steps of each training run (0: skip)")
    parser.add_argument("--train-repeat", type=int, default=2, help="runs with and without clients, alternating")
    parser.add_argument("--live-only", action="store_true", help="only the training run watched by websocket clients")
    parser.add_argument("--publish", nargs=2, type=int, metavar=("RUN_ID", "COUNT"), help=argparse.SUPPRESS)
    parser.add_argument("--ws-clients", nargs=4, metavar=("PORT", "RUN_ID", "COUNT", "COOKIE"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.ws_clients:
        port, run_id, count, cookie = args.ws_clients
        ws_clients(int(port), int(run_id), int(count), cookie)
        return
    if args.publish:
        import django

        django.setup()
        publish(*args.publish)
        return
    _ensure_database()
    _setup()
    clients = [int(n) for n in args.clients.split(",")]
    if not args.live_only:
        bench_latency(args.events, max(clients))
    if args.train_steps:
        bench_training(clients, args.train_steps, args.train_repeat)
    if not args.live_only:
        bench_api_users(args.api_users, 10)
        bench_pages(args.trajectories, args.repeat)


if __name__ == "__main__":
    main()
