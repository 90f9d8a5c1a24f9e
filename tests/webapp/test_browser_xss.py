"""An XSS corpus in every untrusted field (model output, judge explanations and criteria, scenario text, names,
errors, playground results), rendered by every page of the app and by run.js/review.js in a real browser: no
payload may execute. The browser context bypasses the CSP, so what is tested is the escaping itself; the CSP
(test_security_headers.py) is the second wall."""
from __future__ import annotations


import pytest

from tests.webapp.authz_world import World, build_world
from tests.webapp.test_authorisation_matrix import EXPECTED, _path
from tests.webapp.browser import launch_chromium, log_in
from tests.webapp.test_browser import server  # noqa: F401 - the daphne fixture
from webapp.live.ingest import run_event_ingest
from webapp.models import Agent, JudgeConfig, McpServer, Rescore, Rubric, Run, Scenario, Trajectory

pytestmark = [pytest.mark.django_db(transaction=True),
              pytest.mark.browser]

SHORT = "<img src=x onerror=window.__xss=1>"  # fits name fields
CORPUS = " ".join([
    "<script>window.__xss=1</script>", '<img src=x onerror="window.__xss=1">', '"><svg onload=window.__xss=1>',
    "'><body onload=window.__xss=1>", "</textarea><script>window.__xss=1</script>",
    "</script><script>window.__xss=1</script>", "javascript:window.__xss=1",
    '<iframe srcdoc="<script>parent.__xss=1</script>"></iframe>', "<a href=javascript:window.__xss=1>x</a>",
    "{{7*7}} ${7*7} `${window.__xss=1}`",
])


def _hostile_world(tmp_path) -> World:
    world = build_world(tmp_path)
    ids = world.ids
    Agent.objects.filter(pk=ids["agent_id"]).update(name=SHORT, system_prompt=CORPUS)
    Scenario.objects.filter(scenario_set_id=ids["scenario_set_id"]).update(user_message=CORPUS, context=CORPUS)
    Rubric.objects.filter(pk=ids["rubric_id"]).update(name=SHORT)
    JudgeConfig.objects.filter(pk=ids["judge_id"]).update(name=SHORT)
    Run.objects.filter(pk=ids["run_id"]).update(name=SHORT, error=CORPUS, phase=CORPUS[:200])
    McpServer.objects.filter(pk=ids["server_id"]).update(name=SHORT, header_names=[SHORT], tools=[
        {"type": "function", "function": {"name": SHORT, "description": CORPUS,
                                          "parameters": {"type": "object", "description": CORPUS}}}])
    call = {"id": SHORT, "type": "function", "function": {"name": SHORT, "arguments": CORPUS}}
    records = [{"scenario_id": "s1", "messages": [{"role": "user", "content": CORPUS},
                                                  {"role": "assistant", "content": "", "tool_calls": [call]},
                                                  {"role": "tool", "tool_call_id": SHORT, "content": CORPUS},
                                                  {"role": "assistant", "content": CORPUS + f" answer {i}"}],
                "reward": r, "judge_score": r, "explanation": CORPUS, "criteria": {SHORT: r}, "metadata": {},
                "error": None}
               for i, r in enumerate((0.9, 0.4))]
    run_event_ingest(run_id=ids["run_id"], event={
        "kind": "group_scored", "step": 1, "group_index": 1, "scenario_id": "s1", "trajectories": records,
        "reward_mean": 0.65, "reward_std": 0.25, "errors": [CORPUS], "scoring_error": CORPUS})
    run_event_ingest(run_id=ids["run_id"], event={"kind": "step_finished", "step": 1, "metrics": {
        "reward_mean": 0.6}, "criteria_means": {SHORT: 0.6}})
    trajectory = Trajectory.objects.filter(group__run_id=ids["run_id"], group__index=1).order_by("index").first()
    ids.update(group_id=trajectory.group_id, trajectory_id=trajectory.id)
    row = {"id": trajectory.id, "index": 0, "answer": CORPUS, "human": None, "current": 0.9, "new": 0.2,
           "rank_current": 1, "rank_new": 2, "delta": -0.7, "explanation": CORPUS, "criteria": {SHORT: 0.2}}
    Rescore.objects.filter(pk=ids["rescore_id"]).update(results=[{
        "group_id": trajectory.group_id, "run_id": ids["run_id"], "step": 1, "group_index": 1, "scenario": CORPUS,
        "trajectories": [row], "rank_changes": 1, "error": CORPUS}])
    return world


def _is_download(path: str) -> bool:
    """Files (JSONL exports, adapter archives) are downloads, not pages a browser renders."""
    return path.endswith(".jsonl") or "/download/" in path


def test_no_payload_executes_on_any_page(server, tmp_path):  # noqa: F811
    world = _hostile_world(tmp_path)
    pages = sorted(name for name, entry in EXPECTED.items() if not entry.api and "GET" in entry.allowed
                   and name != "login" and not _is_download(_path(name, world)))
    executed, dialogs, shown = [], [], set()
    with launch_chromium() as browser:
        context = browser.new_context(bypass_csp=True)
        page = context.new_page()
        page.on("dialog", lambda d: (dialogs.append(d.message), d.dismiss()))
        log_in(page, server, world.users["admin"].username)
        for name in pages:
            page.goto(server + _path(name, world))
            page.wait_for_load_state("networkidle")  # run.js / review.js done with the stream and fragments
            if page.evaluate("() => window.__xss !== undefined || window.parent.__xss !== undefined"):
                executed.append(name)
            if "window.__xss" in page.content():
                shown.add(name)
        browser.close()
    assert executed == [] and dialogs == []
    # The pages that show untrusted text did show the corpus (as text), so the check above meant something.
    assert {"run-detail", "group-detail", "trajectory-detail", "run-compare", "playground-detail",
            "scenario-set-detail", "run-scenario"} <= shown, sorted(set(pages) - shown)
