"""External rollouts: what the run's endpoint (through the web app) costs over calling the run's inference server
directly, per request and per step, on CPU with the tiny offline model (under a minute).

    python -m bench.external_bench [--requests 30] [--steps 3]

A scratch embedded install (SQLite, in-process executor, no Redis) serves the app with daphne; a run of an
`external` agent (server kind `inprocess`: the engine's HTTP front) is launched through the API, and this
process plays the user's: with `rubric_studio_client` and a project token it samples through the endpoint
(tagged, so every call is recorded) and submits the groups. The same requests go straight to the inference
server's address (the `base_url` the engine announced with its `rollouts_wanted` event), in the same run:

- per request: one chat completion at a time (8 tokens, `ignore_eos` so both paths generate the same count,
  log-probs and token ids on both), endpoint and direct alternating; medians and their ratio;
- per step: a step's group_size x groups rollouts at once through the endpoint plus the groups' submission,
  against the same rollouts sent directly (order alternating per step; submission always last, since it
  closes the step); medians over the steps and their ratio.
The judge is the HTTP double (tests/judge_double.py) in a thread; judging and training are outside the timings.
"""
from __future__ import annotations

import argparse
import asyncio
import os
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

GROUP_SIZE, GROUPS, MAX_TOKENS = 4, 2, 8


def _environment(scratch: Path) -> dict[str, str]:
    env = dict(os.environ, DATABASE_URL=f"sqlite:///{scratch / 'bench.db'}", STUDIO_RUNS_DIR=str(scratch / "runs"),
               SECRET_KEY="bench-only-" + "x" * 40, DJANGO_SETTINGS_MODULE="webapp.settings",
               STUDIO_EXECUTOR="inprocess", STUDIO_API_PER_MINUTE="1000000", STUDIO_API_ANON_PER_MINUTE="1000000",
               LITELLM_LOCAL_MODEL_COST_MAP="True", HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1",
               TOKENIZERS_PARALLELISM="false", RUBRIC_STUDIO_JUDGE_CACHE=str(scratch / "judge-cache"),
               # the deployment's part of the run: the CPU, the engine's HTTP front (webapp/run_policy.py)
               STUDIO_RUN_WORKER_CONFIG='{"device": "cpu", "server": {"kind": "inprocess"}}')
    for name in ("REDIS_URL", "JUDGE_MODEL"):
        env.pop(name, None)
    return env


def _setup(judge_api_base: str, judge_model: str, model_dir: Path, steps: int) -> tuple[dict, str, str]:
    """The catalogue and the tokens, written here before the server starts; returns the launch body, the
    owner's API token and a project token."""
    import django
    from django.core.management import call_command

    django.setup()
    call_command("migrate", verbosity=0, interactive=False)
    from django.contrib.auth import get_user_model
    from rest_framework.authtoken.models import Token

    from training.environments import game_2048_rules as rules
    from training.fixtures.tiny_model import DEMO_SYSTEM_PROMPT, DEMO_USER_MESSAGE
    from webapp.models import Agent, JudgeConfig, Membership, Project, Role, Rubric, RubricVersion, Scenario, ScenarioSet
    from webapp.services.project_tokens import project_token_create
    from webapp.services.secrets import secret_encrypt

    import random

    user = get_user_model().objects.create_user("bench", password="bench-password-1")
    project = Project.objects.create(owner=user, name="external bench")
    Membership.objects.create(project=project, user=user, role=Role.EDITOR)
    agent = Agent.objects.create(project=project, name="bench agent", base_model=str(model_dir),
                                 system_prompt=DEMO_SYSTEM_PROMPT, environment_kind="external",
                                 environment_options={"group_timeout_s": 300}, max_tokens=MAX_TOKENS)
    scenario_set = ScenarioSet.objects.create(project=project, name="boards")
    rng = random.Random(3)
    Scenario.objects.bulk_create(Scenario(scenario_set=scenario_set, external_id=f"b{k}",
                                          user_message=f"{DEMO_USER_MESSAGE}\n{rules.render(rules.new_board(4, rng))}")
                                 for k in range(GROUPS * steps))
    rubric = Rubric.objects.create(project=project, name="moves")
    version = RubricVersion.objects.create(rubric=rubric, number=1, text="Prefer a legal move, nothing else.")
    judge = JudgeConfig.objects.create(project=project, name="double", model=judge_model, api_base=judge_api_base,
                                       api_key_encrypted=secret_encrypt(plaintext="bench"))
    _, key = project_token_create(user=user, project=project, name="bench")
    body = {"project": project.pk, "name": "external bench", "agent": agent.pk, "scenario_set": scenario_set.pk,
            "rubric_version": version.pk, "judge_config": judge.pk, "steps": steps, "group_size": GROUP_SIZE,
            "groups_per_step": GROUPS, "learning_rate": 1e-3,
            "overrides": {"lora": {"r": 8, "alpha": 16}, "sampling": {"ignore_eos": True}}}
    return body, Token.objects.create(user=user).key, key


def _inference_url(run_id: int) -> str:
    """Where the run's endpoint forwards to: the inference server the engine announced (Run.external_base_url)."""
    from webapp.models import Run

    url = Run.objects.values_list("external_base_url", flat=True).get(pk=run_id)
    assert url, "the run announced no inference server"
    return url


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


async def _bench(url: str, token: str, run_id: int, requests: int) -> tuple[list[float], ...]:
    import openai
    from asgiref.sync import sync_to_async

    from rubric_studio_client import StudioClient

    per_request = ([], [])  # endpoint, direct
    per_step = ([], [], [])  # endpoint rollouts + submission, direct rollouts, submission alone
    async with StudioClient(url, token, client_id="bench") as studio:
        run = await studio.run(run_id)
        turn = 0
        while (step := await run.next_step(poll_s=0.2)) is not None:
            direct = openai.AsyncOpenAI(base_url=await sync_to_async(_inference_url)(run_id),
                                        api_key="unused", max_retries=0)
            # The run samples with ignore_eos (its sampling, which the endpoint forwards); the direct path asks.
            extra = {"ignore_eos": True, "return_token_ids": True}

            async def via_endpoint(scenario: dict) -> object:
                async with run.trajectory() as t:
                    await run.openai.chat.completions.create(messages=step.messages(scenario), logprobs=True,
                                                             extra_body={"return_token_ids": True},
                                                             **step.completion_args())
                return t

            async def via_server(scenario: dict) -> None:
                await direct.chat.completions.create(messages=step.messages(scenario), logprobs=True,
                                                     extra_body=extra, **step.completion_args())

            scenario = step.groups[0].scenario
            if not per_request[0]:  # once, in the first step: one request at a time, alternating
                for _ in range(3):  # warm both paths (connections, the server's first generation)
                    await via_endpoint(scenario)
                    await via_server(scenario)
                for i in range(requests):
                    for k in ((0, 1) if i % 2 == 0 else (1, 0)):
                        t0 = time.perf_counter()
                        await (via_endpoint(scenario) if k == 0 else via_server(scenario))
                        per_request[k].append(time.perf_counter() - t0)

            async def direct_step() -> float:
                t0 = time.perf_counter()
                await asyncio.gather(*(via_server(g.scenario) for g in step.groups for _ in range(step.group_size)))
                return time.perf_counter() - t0

            async def endpoint_rollouts() -> tuple[float, list[list]]:
                t0 = time.perf_counter()
                done = await asyncio.gather(*(asyncio.gather(*(via_endpoint(g.scenario)
                                                               for _ in range(step.group_size)))
                                              for g in step.groups))
                return time.perf_counter() - t0, done

            if turn % 2 == 0:
                direct_s = await direct_step()
                rollout_s, done = await endpoint_rollouts()
            else:
                rollout_s, done = await endpoint_rollouts()
                direct_s = await direct_step()
            t0 = time.perf_counter()
            await asyncio.gather(*(run.submit_group(step, g.group_index, list(ts)) for g, ts in zip(step.groups, done)))
            per_step[2].append(time.perf_counter() - t0)
            per_step[0].append(rollout_s + per_step[2][-1])
            per_step[1].append(direct_s)
            turn += 1
            await direct.close()
    return per_request[0], per_request[1], per_step[0], per_step[1], per_step[2]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--requests", type=int, default=30, help="requests per path for the per-request figure")
    parser.add_argument("--steps", type=int, default=3)
    args = parser.parse_args()

    import requests as http

    from tests.judge_double import JudgeDouble, marker_or_brevity
    from training.fixtures.tiny_model import ensure_tiny_model

    started = time.perf_counter()
    model_dir = ensure_tiny_model(ROOT / "var" / "tiny-model")
    with tempfile.TemporaryDirectory(prefix="external-bench-") as scratch_dir, \
            JudgeDouble(responder=JudgeDouble.score_by(marker_or_brevity)) as judge:
        scratch = Path(scratch_dir)
        env = _environment(scratch)
        os.environ.update(env)
        for name in ("REDIS_URL", "JUDGE_MODEL"):
            os.environ.pop(name, None)
        body, api_key, project_key = _setup(judge.api_base, judge.model, model_dir, args.steps)
        port = _free_port()
        url = f"http://127.0.0.1:{port}"
        log = open(scratch / "daphne.log", "w")
        server = subprocess.Popen([sys.executable, "-m", "daphne", "-b", "127.0.0.1", "-p", str(port),
                                   "webapp.asgi:application"], cwd=ROOT, env=env, stdout=log, stderr=subprocess.STDOUT,
                                  start_new_session=True)
        try:
            for _ in range(300):
                with socket.socket() as s:
                    if s.connect_ex(("127.0.0.1", port)) == 0:
                        break
                time.sleep(0.1)
            launched = http.post(f"{url}/api/runs/", json=body, headers={"Authorization": f"Token {api_key}"},
                                 timeout=60)
            if launched.status_code != 201:
                raise SystemExit(f"launch refused: {launched.status_code} {launched.text[:500]}")
            run_id = launched.json()["id"]
            endpoint, direct, step_endpoint, step_direct, submission = asyncio.run(_bench(url, project_key, run_id,
                                                                              args.requests))
        finally:
            server.terminate()
            try:
                server.wait(timeout=30)
            except subprocess.TimeoutExpired:
                server.kill()
        if not step_endpoint:
            raise SystemExit(f"the run asked for no rollouts; daphne's log:\n{(scratch / 'daphne.log').read_text()[-3000:]}")

    e, d = statistics.median(endpoint), statistics.median(direct)
    se, sd = statistics.median(step_endpoint), statistics.median(step_direct)
    print(f"external rollouts overhead (tiny model, CPU, {MAX_TOKENS} tokens per answer; "
          f"{time.perf_counter() - started:.0f} s in all)")
    print(f"per request ({len(endpoint)} each, one at a time): endpoint p50 {e * 1000:6.1f} ms, server directly "
          f"p50 {d * 1000:6.1f} ms: {e / d:4.2f}x (+{(e - d) * 1000:.1f} ms)")
    print(f"per step ({len(step_endpoint)} steps, {GROUPS} groups x {GROUP_SIZE} at once): endpoint + submission "
          f"p50 {se:6.2f} s (submission {statistics.median(submission):.2f} s), server directly p50 {sd:6.2f} s: "
          f"{se / sd:4.2f}x")
    n = GROUPS * GROUP_SIZE  # at once vs one at a time: near 1 means the path serialises concurrent requests
    print(f"concurrency ({n} requests at once / {n} x one request): endpoint "
          f"{(se - statistics.median(submission)) / (n * e):4.2f}, server directly {sd / (n * d):4.2f}")


if __name__ == "__main__":
    main()
