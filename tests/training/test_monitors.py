"""Monitors: signals from real groups, alerts on crossing, and a lengthening policy that a length-loving judge
rewards is caught by the length monitor, which asks for (and gets) a pause with its reason."""
from __future__ import annotations

import itertools
import json
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from training import run
from training.events import MonitorAlert, RunHeld, StaticControl, StepFinished
from training.monitoring.monitors import MonitorConfig, Monitors, repeat_rate, step_signals
from training.types import Scenario, Score, Trajectory, TrajectoryGroup

from tests.training.configs import small_config


def group(*answers: str, skipped: bool = False, judge=None) -> TrajectoryGroup:
    ts = [Trajectory(scenario_id="s", messages=[{"role": "user", "content": "q"}, {"role": "assistant", "content": a}],
                     judge_score=judge) for a in answers]
    return TrajectoryGroup(scenario=Scenario(id="s", user_message="q"), trajectories=ts, skipped=skipped)


def test_repeat_rate_is_zero_for_fresh_text_and_high_for_a_loop():
    assert repeat_rate("the cat sat on the mat", 3) == 0.0
    assert repeat_rate("buy now " * 20, 3) > 0.9
    assert repeat_rate("", 3) == 0.0


def test_signals_count_empty_answers_repeats_and_zero_variance_groups():
    s = step_signals([group("", "ok fine", skipped=True), group("a b c a b c a b c", "")], {"kl": 0.3}, ngram=3)
    assert s["mon_empty_rate"] == 0.5 and s["mon_zero_variance"] == 0.5 and s["mon_kl"] == 0.3
    assert s["mon_repeat_rate"] == pytest.approx((0 + 0 + 4 / 7 + 0) / 4)


def test_a_message_that_only_calls_a_tool_is_not_an_empty_answer():
    call = {"id": "c0", "type": "function", "function": {"name": "search_inbox", "arguments": '{"keywords": "x"}'}}
    t = Trajectory(scenario_id="s", messages=[{"role": "user", "content": "q"},
                                             {"role": "assistant", "content": "", "tool_calls": [call]},
                                             {"role": "tool", "tool_call_id": "c0", "content": "[]"},
                                             {"role": "assistant", "content": ""}])
    g = TrajectoryGroup(scenario=Scenario(id="s", user_message="q"), trajectories=[t])
    s = step_signals([g], {}, ngram=3)
    assert s["mon_empty_rate"] == 0.5  # the call wrote something; the last reply is empty
    assert s["mon_length_chars"] == len('search_inbox {"keywords": "x"}') / 2


def test_an_alert_fires_once_on_crossing_and_again_only_after_recovery():
    m = Monitors(MonitorConfig(max_empty_rate=0.4, pause_on=["empty"]))
    fired = [m.observe_step(k, {"mon_empty_rate": rate}) for k, rate in enumerate([0.1, 0.6, 0.7, 0.2, 0.9], 1)]
    assert [[a.monitor for a in f] for f in fired] == [[], ["empty"], [], [], ["empty"]]
    assert fired[1][0].pause and "60% of answers are empty" in fired[1][0].message


def test_judge_rising_while_env_reward_falls_is_flagged_as_divergence():
    m = Monitors(MonitorConfig(window=2))
    judge, env = [0.2, 0.2, 0.6, 0.7], [0.5, 0.5, 0.3, 0.2]
    alerts = [a for k, (j, e) in enumerate(zip(judge, env), 1)
              for a in m.observe_step(k, {"mon_judge_mean": j, "mon_env_mean": e})]
    assert [(a.step, a.monitor, a.pause) for a in alerts] == [(4, "judge_divergence", True)]
    assert "env reward fell" in alerts[0].message
    m2 = Monitors(MonitorConfig(window=2))
    for k, j in enumerate(judge, 1):
        m2.observe_step(k, {"mon_judge_mean": j})
    assert m2.observe_evaluation(4, 0.7) == []
    assert [a.monitor for a in m2.observe_evaluation(4, 0.4)] == ["judge_divergence"]


class LengtheningPolicy(BaseHTTPRequestHandler):
    """An OpenAI-compatible server whose answers grow with every adapter: step k's adapter writes ~6k words."""

    adapters: set[str] = set()
    counter = itertools.count()

    def log_message(self, *args):  # keep test output quiet
        pass

    def _send(self, body: dict, code: int = 200) -> None:
        data = json.dumps(body).encode()
        self.send_response(code)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def do_GET(self):
        if self.path == "/health":
            return self._send({})
        self._send({"object": "list", "data": [{"id": n, "object": "model"} for n in ["base", *self.adapters]]})

    def do_POST(self):
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        if self.path.endswith("load_lora_adapter"):
            (self.adapters.discard if "unload" in self.path else self.adapters.add)(body["lora_name"])
            return self._send({})
        model = body["model"]
        step = int(model.split("@")[1]) if "@" in model else 0
        choices, total = [], 0
        for index in range(body.get("n", 1)):  # a group's identical turns arrive as one request with n choices
            words = 3 + 6 * step * step + next(self.counter) % 4  # distinct lengths within a group: a spread
            total += words
            choices.append({"index": index, "finish_reason": "stop",
                            "message": {"role": "assistant", "content": " ".join(f"w{i}" for i in range(words))}})
        self._send({"id": "x", "object": "chat.completion", "created": 0, "model": model, "choices": choices,
                    "usage": {"prompt_tokens": 1, "completion_tokens": total, "total_tokens": total + 1}})


@pytest.fixture
def lengthening_server():
    server = ThreadingHTTPServer(("127.0.0.1", 0), LengtheningPolicy)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{server.server_address[1]}/v1"
    server.shutdown()


async def judge_loving_length(group):
    """A judge that rewards length, as a hackable rubric might."""
    return [Score(reward=len(t.messages[-1]["content"]) / 1000, judge_score=len(t.messages[-1]["content"]) / 1000)
            for t in group.trajectories]


def test_a_lengthening_policy_rewarded_by_the_judge_is_paused_by_the_length_monitor(tiny_model_dir, tmp_path,
                                                                                   lengthening_server):
    control = StaticControl()
    events = []

    def watcher(event):  # what the web app's runner does with a pausing alert (webapp/services/monitoring.py)
        events.append(event)
        if isinstance(event, MonitorAlert) and event.pause:
            control.set("pause")

    config = small_config(tiny_model_dir, tmp_path, steps=6, environment={"kind": "chat", "options": {}},
                          server={"kind": "external", "url": lengthening_server},
                          monitors={"window": 1, "max_length_growth": 3.0, "pause_on": ["length"]})
    done = threading.Event()
    thread = threading.Thread(target=lambda: (run(config, scorer=judge_loving_length, sink=watcher, control=control),
                                              done.set()), daemon=True)
    thread.start()
    for _ in range(600):  # until the engine holds for the alert's pause (or the run ended without one)
        if done.is_set() or any(isinstance(e, RunHeld) for e in events):
            break
        time.sleep(0.1)
    time.sleep(1.0)  # time enough for a step that should not start
    assert not done.is_set(), "the run finished: the length monitor never paused it"
    alerts = [e for e in events if isinstance(e, MonitorAlert)]
    assert [(a.monitor, a.pause) for a in alerts] == [("length", True)]
    assert "answer length grew" in alerts[0].message and alerts[0].value > 3.0
    held_at = alerts[0].step
    assert max(e.step for e in events if isinstance(e, StepFinished)) == held_at  # held: no step after the alert
    lengths = [e.metrics["mon_length_chars"] for e in events if isinstance(e, StepFinished)]
    assert lengths == sorted(lengths) and lengths[-1] > 3 * lengths[0]
    control.set("cancel")
    thread.join(timeout=60)
