"""A real `mcp` run through the web app: a project's mailbox MCP server (stdio), an agent on the `mcp` environment,
mailbox tasks with reference answers, launched by the launch service and executed by the embedded executor on
the tiny mailbox model. The trajectories hold the agent's tool calls and the real server's results, the
verifiable reward is recorded, the group page shows the calls as blocks, and no server process outlives the
run."""
from __future__ import annotations

import json
import uuid
from pathlib import Path

import pytest

from tests.training.mcp_helpers import MAILBOX, quick_mailbox_model
from tests.webapp.mcp_web_helpers import set_catalogue
from tests.webapp.factories import catalogue_model, project_factory
from training.environments.mailbox_server.mailbox import Mailbox, generate, scenario_records
from webapp.execution.executors import wait_idle
from webapp.models import Run, RunStatus, Scenario, ScenarioSet, Trajectory
from webapp.services import mcp_servers as svc
from webapp.services.catalogue import agent_create
from webapp.services.runs import run_launch

pytestmark = pytest.mark.django_db(transaction=True)
MAILBOX_TOOLS = {"search_inbox", "read_email", "answer"}


@pytest.fixture(scope="session")
def mailbox_model_dir() -> Path:
    return quick_mailbox_model()


def _processes_with(marker: str) -> list[int]:
    """Pids of live processes whose environment holds `marker` (the stdio server's own variable)."""
    pids = []
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit():
            continue
        try:
            if marker.encode() in (proc / "environ").read_bytes():
                pids.append(int(proc.name))
        except OSError:  # gone meanwhile, or another user's
            continue
    return pids


def _json_object(text: str) -> bool:
    try:
        return isinstance(json.loads(text), dict)
    except ValueError:
        return False


def _launch(project, model_dir: Path, marker: str, settings) -> Run:
    from training.fixtures.tiny_mailbox_model import MAILBOX_SYSTEM_PROMPT

    # the deployment's catalogue: the shipped mailbox with a variable the test finds its processes by
    set_catalogue(settings, mailbox={"args": [*MAILBOX, "--transport", "stdio"], "env": {"RS_MCP_RUN_MARK": marker}})
    server = svc.mcp_server_create(user=project.owner, project=project, name="mailbox", transport="stdio",
                                   catalogue_entry="mailbox", per_call_timeout_s=20)
    agent = agent_create(user=project.owner, project=project, name="mail agent",
                         base_model=catalogue_model(settings, model_dir, name="test-mailbox"),
                         system_prompt=MAILBOX_SYSTEM_PROMPT, environment_kind="mcp", environment_options={},
                         mcp_server=server, mcp_max_turns=3, mcp_answer_tool="answer", mcp_reward="reference",
                         temperature=1.0, top_p=1.0, max_tokens=48)
    scenario_set = ScenarioSet.objects.create(project=project, name="mailbox tasks")
    records = [r for r in scenario_records(generate(0)[1]) if r["metadata"]["split"] == "train"][:2]
    Scenario.objects.bulk_create(Scenario(scenario_set=scenario_set, external_id=r["id"],
                                          user_message=r["user_message"], reference=r["reference"],
                                          metadata=r["metadata"]) for r in records)
    return run_launch(user=project.owner, project=project, name="mailbox run", agent=agent, scenario_set=scenario_set,
                      steps=1, group_size=3, groups_per_step=2, learning_rate=2e-3,
                      overrides={"lora": {"r": 8, "alpha": 16}})


def test_a_mailbox_run_from_the_web_app_calls_the_real_server_records_the_reference_reward_and_leaks_no_process(
        inprocess_executor, mailbox_model_dir, client, settings):
    marker = f"rs-mcp-run-{uuid.uuid4().hex}"
    project = project_factory()
    run = _launch(project, mailbox_model_dir, marker, settings)
    assert run.config["environment"]["kind"] == "mcp"
    assert run.config["environment"]["options"]["server"]["env"] == {"RS_MCP_RUN_MARK": marker}
    wait_idle(timeout=300)
    run.refresh_from_db()
    assert run.status == RunStatus.COMPLETED, (run.status, run.error)

    trajectories = list(Trajectory.objects.filter(group__run=run).order_by("group__index", "index"))
    assert len(trajectories) == 6 and run.groups.count() == 2
    assert all(t.env_reward is not None and 0.0 <= t.env_reward <= 1.0 for t in trajectories)  # the reference reward
    calls = [(t, c) for t in trajectories for m in t.messages if m["role"] == "assistant"
             for c in m.get("tool_calls") or []]
    assert calls, "the tiny mailbox model made no tool call in 6 rollouts"
    assert any(c["function"]["name"] in MAILBOX_TOOLS for _, c in calls)
    # Each well-formed search the agent made was answered by the server process: exactly what the served
    # mailbox (seed 0) returns for those arguments, as a tool message answering that call.
    mailbox = Mailbox(generate(0)[0])
    searches = [(t, c, json.loads(c["function"]["arguments"])) for t, c in calls
                if c["function"]["name"] == "search_inbox" and _json_object(c["function"]["arguments"])]
    assert searches, [c["function"] for _, c in calls]
    for trajectory, call, args in searches:
        result = next(m for m in trajectory.messages if m["role"] == "tool" and m.get("tool_call_id") == call["id"])
        expected = json.dumps(mailbox.search(keywords=args.get("keywords") or "", sender=args.get("from"),
                                             to=args.get("to"), before=args.get("before"), after=args.get("after")))
        assert result["content"] == expected  # up to 10 short matches: under the 4000-character result cap
    for trajectory in trajectories:  # the reference reward: no `answer` call, no answer to match the reference
        if not any(c["function"]["name"] == "answer" for t, c in calls if t is trajectory):
            assert trajectory.env_reward == 0.0
    with_call = searches[0][0]

    client.force_login(project.owner)
    page = client.get(f"/groups/{with_call.group_id}/").content.decode()
    assert 'class="tool-call' in page and 'data-tool="search_inbox"' in page and "Tool calls (" in page
    assert client.get(f"/runs/{run.pk}/").status_code == 200

    assert _processes_with(marker) == []  # every session's server process ended with its trajectory
