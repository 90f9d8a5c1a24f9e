"""External rollouts end to end: a run of an `external` agent on the tiny offline model, launched through the web
app's API (daphne, the in-process executor, the test database), is rolled out by an example agent in a process
of its own (examples/openai_agent.py: the plain openai client; examples/agents_sdk_agent.py: the OpenAI Agents
SDK), which samples through the run's endpoint with a project token and submits its groups. The judge double
scores them, the run trains 3 steps, and the tokens that trained are the tokens the model sampled: the groups
the engine got carry exactly the recorded calls' token ids and log-probs, those ids decode to the answers the
judge saw, and the trainer's log-probs of them match the sampler's."""
from __future__ import annotations

import json
import random
import subprocess
import sys
import time
from datetime import timedelta

import pytest
import requests

from tests.judge_double import JudgeDouble, marker_or_brevity
from tests.webapp.conftest import ROOT, wait_for
from tests.webapp.factories import TEST_TINY_MODEL, project_factory, rubric_factory
from webapp.models import Agent, Run, RunStatus, Scenario, ScenarioSet
from webapp.storable import storable

pytestmark = pytest.mark.django_db(transaction=True)

STEPS, GROUP_SIZE, GROUPS = 3, 4, 2


@pytest.fixture
def web(app_server):
    """The served app (tests/webapp/world.py): daphne on the test database, running launched runs in its own
    process (the embedded executor); `.url` and `.log`."""
    return app_server


def _boards(n: int) -> list[str]:
    """Opening positions of the tiny model's task, so its answers are moves of varying length."""
    from training.environments import game_2048_rules as rules
    from training.fixtures.tiny_model import DEMO_USER_MESSAGE

    rng = random.Random(7)
    return [f"{DEMO_USER_MESSAGE}\n{rules.render(rules.new_board(4, rng))}" for _ in range(n)]


def _launch(web, judge: JudgeDouble, tiny_model_dir, *, steps: int = STEPS, groups: int = GROUPS,
            group_size: int = GROUP_SIZE, options: dict | None = None) -> tuple[Run, str]:
    """The catalogue made in the database, the run launched through the API with the owner's API token; returns
    the run and a project token (what the user's process gets)."""
    from rest_framework.authtoken.models import Token

    from training.fixtures.tiny_model import DEMO_SYSTEM_PROMPT
    from webapp.models import JudgeConfig
    from webapp.services.project_tokens import project_token_create
    from webapp.services.secrets import secret_encrypt

    project = project_factory(name="external")
    agent = Agent.objects.create(project=project, name="my own 2048 agent", base_model=TEST_TINY_MODEL,
                                 system_prompt=DEMO_SYSTEM_PROMPT, environment_kind="external",
                                 environment_options=options or {"group_timeout_s": 240, "on_missing": "fail"},
                                 max_tokens=12)
    scenario_set = ScenarioSet.objects.create(project=project, name="boards")
    Scenario.objects.bulk_create(Scenario(scenario_set=scenario_set, external_id=f"board-{k}", user_message=text)
                                 for k, text in enumerate(_boards(2 * steps * groups)))
    rubric = rubric_factory(project=project, text="Prefer a legal move in the requested format, with nothing else.")
    judge_config = JudgeConfig.objects.create(project=project, name="double", model=judge.model,
                                              api_base=judge.api_base, api_key_encrypted=secret_encrypt(plaintext="t"))
    _, key = project_token_create(user=project.owner, project=project, name="agent process")
    api_key = Token.objects.create(user=project.owner).key
    answer = requests.post(f"{web.url}/api/runs/", headers={"Authorization": f"Token {api_key}"}, timeout=60, json={
        "project": project.pk, "name": "external tiny", "agent": agent.pk, "scenario_set": scenario_set.pk,
        "rubric_version": rubric.versions.get().pk, "judge_config": judge_config.pk, "steps": steps,
        "group_size": group_size, "groups_per_step": groups, "learning_rate": 2e-3,
        "overrides": {"lora": {"r": 8, "alpha": 16}}})
    assert answer.status_code == 201, answer.text
    return Run.objects.get(pk=answer.json()["id"]), key


@pytest.mark.parametrize("example", ["openai_agent.py", "agents_sdk_agent.py"])
def test_an_agent_in_its_own_process_rolls_out_a_run_that_judges_and_trains_on_exactly_the_sampled_tokens(
        web, tiny_model_dir, example, tmp_path):
    from transformers import AutoTokenizer

    from webapp.models import Checkpoint, ExternalCall, ExternalClient, ExternalGroup, RunEvent, Step, Trajectory

    with JudgeDouble(responder=JudgeDouble.score_by(marker_or_brevity)) as judge:
        run, key = _launch(web, judge, tiny_model_dir)
        client_log = tmp_path / "client.log"
        agent = subprocess.run(
            [sys.executable, str(ROOT / "examples" / example), "--url", web.url, "--token", key, "--run", str(run.pk),
             "--client-id", "e2e-agent", "--concurrency", "4"],
            cwd=tmp_path, env={"PATH": "/usr/bin:/bin", "HOME": str(tmp_path), "PYTHONUNBUFFERED": "1"},
            stdout=open(client_log, "w"), stderr=subprocess.STDOUT, timeout=540)
        output = client_log.read_text()
        run.refresh_from_db()
        assert agent.returncode == 0, f"{output[-3000:]}\n--- daphne ---\n{web.log.read_text()[-3000:]}\n{run.error}"
        assert f"run {run.pk} is completed; this process rolled out {STEPS} step(s)" in output
        judged = len(judge.requests)

    # Judged and trained over every step.
    assert run.status == RunStatus.COMPLETED and run.steps_done == STEPS, run.error
    assert sorted(Step.objects.filter(run=run).values_list("index", flat=True)) == [1, 2, 3]
    assert sorted(Checkpoint.objects.filter(run=run).values_list("step_index", flat=True)) == [1, 2, 3]
    trajectories = list(Trajectory.objects.filter(group__run=run).select_related("group"))
    assert len(trajectories) == STEPS * GROUPS * GROUP_SIZE
    assert not [t.error for t in trajectories if t.error]
    by_group: dict[tuple[int, int], set[str]] = {}
    for t in trajectories:
        by_group.setdefault((t.group.step_index, t.group.index), set()).add(json.dumps(t.messages))
    # The judge ranks every group whose answers differ; a group of identical answers has nothing to rank.
    assert all(t.judge_score is not None for t in trajectories if len(by_group[t.group.step_index, t.group.index]) > 1)
    ranked = sum(len(a) > 1 for a in by_group.values())
    assert ranked >= 1 and judged >= ranked, (ranked, judged)
    client = ExternalClient.objects.get(run=run)
    assert client.client_id == "e2e-agent" and client.requests >= STEPS * GROUPS * (GROUP_SIZE + 1)

    # The groups the engine trained on carry the recorded calls' sampled tokens, turn by turn.
    tokenizer = AutoTokenizer.from_pretrained(str(tiny_model_dir))
    groups = list(ExternalGroup.objects.filter(run=run).order_by("step", "group_index"))
    assert [(g.step, g.group_index) for g in groups] == [(s, i) for s in (1, 2, 3) for i in range(GROUPS)]
    assert all(g.forwarded_at is not None for g in groups)
    rows = {t.metadata["trajectory_id"]: t for t in trajectories}
    models = {e.payload["step"]: e.payload["model"] for e in RunEvent.objects.filter(run=run, kind="rollouts_wanted")}
    assert sorted(models) == [1, 2, 3] and len(set(models.values())) == 3  # a new adapter each step
    for group in groups:
        assert len(group.trajectories) == GROUP_SIZE
        for sent in group.trajectories:
            key = sent["metadata"]["trajectory_id"]
            calls = list(ExternalCall.objects.filter(run=run, trajectory_key=key).order_by("id"))
            assert calls and all(c.model == models[group.step] for c in calls)  # the step's own adapter
            sampled = [c.choices[0] for c in calls]
            assert sent["turn_token_ids"] == [c["token_ids"] for c in sampled]
            assert sent["turn_logprobs"] == [c["logprobs"] for c in sampled]
            assert all(ids and len(ids) == len(lps) for ids, lps in zip(sent["turn_token_ids"], sent["turn_logprobs"]))
            answers = [m for m in sent["messages"] if m["role"] == "assistant"]
            row = rows[key]  # the trajectory as the judge scored it and the run page shows it
            assert (row.group.step_index, row.group.index) == (group.step, group.group_index)
            assert [m["content"] for m in row.messages if m["role"] == "assistant"] == [m["content"] for m in answers]
            for ids, choice in zip(sent["turn_token_ids"], sampled):
                text = storable(tokenizer.decode(ids, skip_special_tokens=True))  # as kept: U+0000 -> U+FFFD
                assert text.strip() == (choice["message"].get("content") or "").strip() or choice["message"].get(
                    "tool_calls")

    # The trainer's log-probs of those tokens are the sampler's, to float noise: the same tokens after the same
    # prompt (a re-tokenisation would have no sampler log-probs; a prompt rendered differently, e.g. tools whose
    # keys the database reordered, differs by about 1e-2).
    trained = [s.metrics for s in Step.objects.filter(run=run) if s.metrics.get("trained_sequences")]
    assert trained and all(m["sampler_gap"] is not None and abs(m["sampler_gap"]) < 1e-4 for m in trained), trained


# A client that submits the step's first groups, starts the last one and hangs there (until it is killed).
HANGING_CLIENT = """
import asyncio, sys
from rubric_studio_client import StudioClient

async def main(url, token, run_id):
    async with StudioClient(url, token, client_id="doomed") as studio:
        run = await studio.run(run_id)
        step = await run.next_step(poll_s=0.2)
        *first, last = step.groups
        for group in first:
            done = []
            for _ in range(step.group_size):
                async with run.trajectory() as t:
                    await run.openai.chat.completions.create(messages=step.messages(group.scenario),
                                                             **step.completion_args())
                done.append(t)
            await run.submit_group(step, group.group_index, done)
        async with run.trajectory():
            await run.openai.chat.completions.create(messages=step.messages(last.scenario), **step.completion_args())
            print("hanging", flush=True)
            await asyncio.sleep(3600)

asyncio.run(main(sys.argv[1], sys.argv[2], int(sys.argv[3])))
"""


def test_a_client_killed_mid_step_leaves_its_group_to_the_steps_timeout_and_loses_nothing_it_submitted(
        web, tiny_model_dir, tmp_path):
    """kill -9 of the user's process halfway through a step: the step waits out its timeout, records the group
    that never came as failed rollouts (on_missing: skip), trains on the groups that came; another process
    (the example) then rolls out the rest of the run."""
    import signal

    from webapp.models import ExternalCall, ExternalGroup, RunEvent, Step, TrajectoryGroup

    timeout_s = 15.0
    with JudgeDouble(responder=JudgeDouble.score_by(marker_or_brevity)) as judge:
        run, key = _launch(web, judge, tiny_model_dir, steps=2, groups=3, group_size=2,
                           options={"group_timeout_s": timeout_s, "on_missing": "skip"})
        env = {"PATH": "/usr/bin:/bin", "HOME": str(tmp_path), "PYTHONPATH": str(ROOT), "PYTHONUNBUFFERED": "1"}
        doomed = subprocess.Popen([sys.executable, "-c", HANGING_CLIENT, web.url, key, str(run.pk)], cwd=tmp_path,
                                  env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        try:
            assert doomed.stdout.readline().strip() == "hanging", doomed.stdout.read()[-3000:]
        finally:
            doomed.send_signal(signal.SIGKILL)
            doomed.wait(timeout=30)
        killed_at = time.monotonic()
        assert sorted(ExternalGroup.objects.filter(run=run).values_list("step", "group_index")) == [(1, 0), (1, 1)]
        hung = ExternalCall.objects.filter(run=run).exclude(
            trajectory_key__in=[t["metadata"]["trajectory_id"] for g in ExternalGroup.objects.filter(run=run)
                                for t in g.trajectories])
        assert hung.count() == 1  # the killed trajectory's call: recorded, never submitted, never trained

        closed = wait_for(lambda: RunEvent.objects.filter(run=run, kind="rollouts_closed").first(),
                          timeout=timeout_s + 60, message="step 1 to stop waiting")
        assert (closed.payload["received"], closed.payload["missing"]) == ([0, 1], [2])
        wanted = RunEvent.objects.filter(run=run, kind="rollouts_wanted").first()
        assert closed.created_at - wanted.created_at >= timedelta(seconds=timeout_s - 0.5)
        assert time.monotonic() - killed_at < timeout_s + 30

        finisher = subprocess.run([sys.executable, str(ROOT / "examples" / "openai_agent.py"), "--url", web.url,
                                   "--token", key, "--run", str(run.pk)], cwd=tmp_path, env=env,
                                  capture_output=True, text=True, timeout=300)
        assert finisher.returncode == 0, finisher.stdout[-2000:] + finisher.stderr[-2000:]
        assert "this process rolled out 1 step(s)" in finisher.stdout

    run.refresh_from_db()
    assert run.status == RunStatus.COMPLETED and run.steps_done == 2, run.error
    first = {g.index: g for g in TrajectoryGroup.objects.filter(run=run, step_index=1)}
    assert sorted(first) == [0, 1, 2]
    assert [first[i].trajectories.count() for i in (0, 1)] == [2, 2]  # what the killed client submitted trained
    assert first[2].trajectories.count() == 0 and len(first[2].errors) == 2
    assert all("no group was submitted within 15 s" in e for e in first[2].errors)
    metrics = Step.objects.get(run=run, index=1).metrics
    assert metrics["rollout_errors"] == 2
    assert sorted(ExternalGroup.objects.filter(run=run, step=2).values_list("group_index", flat=True)) == [0, 1, 2]
