"""The engine child of an external agent's run, driven as the runner drives it: the spec on stdin, events on a
pipe, the agent's groups sent back as `{"groups": ...}` lines (and a group sent twice changes nothing)."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import openai

from tests.training.configs import small_config
from training.rl.external import assemble_trajectory

REPO = Path(__file__).resolve().parents[2]


def _group(client: openai.OpenAI, wanted: dict, group: dict) -> tuple[list[dict], list[list[int]]]:
    trajectories, sampled = [], []
    for k in range(wanted["group_size"]):
        messages = [{"role": "user", "content": group["scenario"]["user_message"]}]
        response = client.chat.completions.create(model=wanted["model"], messages=messages, max_tokens=6,
                                                  logprobs=True, extra_body={"return_token_ids": True})
        choice = response.choices[0]
        call = {"model": response.model, "request": {"messages": messages, "tools": None}, "choices": [
            {"message": {"role": "assistant", "content": choice.message.content},
             "token_ids": choice.model_extra["token_ids"], "logprobs": [c.logprob for c in choice.logprobs.content],
             "finish_reason": choice.finish_reason}], "completion_tokens": response.usage.completion_tokens}
        sampled.append(choice.model_extra["token_ids"])
        trajectories.append(assemble_trajectory(scenario_id=group["scenario"]["id"], calls=[call], messages=None,
                                                reward=float(k), metadata={}, model=wanted["model"],
                                                allow_unsampled=False))
    return trajectories, sampled


def test_the_engine_child_trains_the_groups_its_parent_sends_on_stdin(tiny_model_dir, tmp_path):
    config = small_config(tiny_model_dir, tmp_path, steps=2, environment={"kind": "external", "options": {}})
    read_fd, write_fd = os.pipe()
    child = subprocess.Popen([sys.executable, "-m", "webapp.execution.engine_child", str(write_fd)], cwd=REPO,
                             stdin=subprocess.PIPE, pass_fds=(write_fd,), stdout=subprocess.DEVNULL,
                             stderr=open(tmp_path / "engine.log", "wb"), text=True)
    os.close(write_fd)

    def send(message: dict) -> None:
        child.stdin.write(json.dumps(message) + "\n")
        child.stdin.flush()

    send({"config": json.loads(config.model_dump_json())})
    events, sampled = [], {}
    try:
        with os.fdopen(read_fd, "r") as pipe:
            for line in pipe:
                event = json.loads(line)
                events.append(event)
                if event["kind"] == "rollouts_wanted":
                    client = openai.OpenAI(base_url=event["base_url"], api_key="unused", max_retries=0)
                    groups = []
                    for group in event["groups"]:
                        trajectories, sampled[(event["step"], group["group_index"])] = _group(client, event, group)
                        groups.append({"step": event["step"], "group_index": group["group_index"],
                                       "trajectories": trajectories})
                    send({"groups": groups})
                    send({"groups": [{**groups[0], "trajectories": groups[0]["trajectories"][:2]}]})  # ignored
                elif event["kind"] == "review_requested":
                    send({"review": {"step": event["step"], "rewards": {}}})
        assert child.wait(timeout=60) == 0, (tmp_path / "engine.log").read_text()[-3000:]
    finally:
        child.kill()
    kinds = [e["kind"] for e in events]
    assert kinds[-1] == "run_finished" and events[-1]["status"] == "completed", kinds
    scored = {(e["step"], e["group_index"]): [t["turn_token_ids"][0] for t in e["trajectories"]]
              for e in events if e["kind"] == "group_scored"}
    assert scored == sampled  # every group in full (the second, shorter copy changed nothing)
    assert [e["step"] for e in events if e["kind"] == "step_finished"] == [1, 2]
