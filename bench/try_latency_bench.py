"""Try it's latency on CPU with the tiny offline model (issue 37): the first answer of a session that has to start
the project's inference server, of sessions on a warm server, and, as the baseline measured in the same run, one
chat completion sent straight to that server (what Try it adds on top: the executor's queue, the rollout child
process, the stored turns).

    python -m bench.try_latency_bench [--warm 5]

A scratch embedded install (SQLite, the in-process executor in this process: the server and the rollouts are its
child processes). Each session asks the base and two checkpoints (real LoRA adapters of the tiny model, built
once under var/test-cache) one question; `first answer` is from the request to the first column's last turn.
"""
from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))


def _wait(predicate, timeout: float) -> object:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if value := predicate():
            return value
        time.sleep(0.05)
    raise TimeoutError("timed out")


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--warm", type=int, default=5, help="sessions on the warm server")
    args = parser.parse_args(argv)
    scratch = Path(tempfile.mkdtemp(prefix="try-bench-"))
    for name in ("REDIS_URL", "DATABASE_URL"):
        os.environ.pop(name, None)
    os.environ.update(DATABASE_URL=f"sqlite:///{scratch / 'bench.db'}", STUDIO_RUNS_DIR=str(scratch / "runs"),
                      STUDIO_VAR_DIR=str(scratch), SECRET_KEY="bench-only-" + "x" * 40,
                      DJANGO_SETTINGS_MODULE="webapp.settings", STUDIO_EXECUTOR="inprocess",
                      STUDIO_SERVE_IDLE_S="600", HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1",
                      TOKENIZERS_PARALLELISM="false")
    os.environ.pop("REDIS_URL", None)
    import django
    from django.core.management import call_command

    django.setup()
    call_command("migrate", verbosity=0, interactive=False)
    import httpx
    from django.contrib.auth import get_user_model

    from tests.webapp.serving_world import build_adapters
    from training.fixtures.tiny_model import ensure_tiny_model
    from webapp.models import Agent, Checkpoint, Membership, Project, ProjectServer, Role, Run, ScenarioSet, TrySession
    from webapp.services.serving import SERVED_BASE, server_headers
    from webapp.services.trying import try_create

    model_dir = ensure_tiny_model(ROOT / "var" / "test-cache" / "tiny-model")
    adapters = build_adapters(model_dir)[:2]
    user = get_user_model().objects.create_user("bench", password="bench-password-1")
    project = Project.objects.create(owner=user, name="try bench")
    Membership.objects.create(project=project, user=user, role=Role.EDITOR)
    agent = Agent.objects.create(project=project, name="agent", base_model=str(model_dir), max_tokens=24,
                                 system_prompt="Answer briefly.")
    scenario_set = ScenarioSet.objects.create(project=project, name="s")
    run = Run.objects.create(project=project, name="demo", agent=agent, scenario_set=scenario_set, status="completed",
                             config={"name": "demo", "base_model": str(model_dir), "lora": {"r": 8}})
    checkpoints = [Checkpoint.objects.create(run=run, step_index=i + 1, path=str(p), adapter_name=f"demo@{i + 1}")
                   for i, p in enumerate(adapters)]

    def session_first_answer() -> TrySession:
        session = try_create(user=user, project=project, agent=agent, checkpoint_ids=[c.pk for c in checkpoints],
                             message="What is the refund policy?")
        return _wait(lambda: TrySession.objects.filter(pk=session.pk, status__in=["done", "failed"]).first(), 300)

    cold = session_first_answer()
    server = ProjectServer.objects.get(project=project)
    warm = [session_first_answer() for _ in range(args.warm)]
    direct = []
    with httpx.Client(headers=server_headers(), timeout=120) as http:
        for _ in range(args.warm):
            started = time.perf_counter()
            http.post(f"{server.base_url}/chat/completions", json={
                "model": SERVED_BASE, "max_tokens": 24, "messages": [{"role": "system", "content": "Answer briefly."},
                                                                     {"role": "user", "content": "What is the refund policy?"}]})
            direct.append(time.perf_counter() - started)
    warm_first = statistics.median(s.first_answer_s for s in warm)
    direct_s = statistics.median(direct)
    print(f"cold session: server start {server.startup_s:.2f} s, first answer {cold.first_answer_s:.2f} s")
    print(f"warm sessions (median of {args.warm}): first answer {warm_first:.2f} s")
    print(f"one completion straight to the server (median of {args.warm}): {direct_s:.3f} s")
    print(f"ratios: cold / warm {cold.first_answer_s / warm_first:.1f}x; warm / direct {warm_first / direct_s:.1f}x")
    ProjectServer.objects.filter(pk=server.pk).update(status="stopped")
    from webapp.execution.executors import wait_servers_stopped

    wait_servers_stopped(timeout=60)


if __name__ == "__main__":
    main()
