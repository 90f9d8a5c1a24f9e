"""Issue 33 (item 8's leftover): checkpoints loaded by name on the run's endpoint (`model: "<run>@<step>"`) were
never unloaded, so a caller cycling through a long run's checkpoints filled the inference server's memory. They
are unloaded least recently used first beyond STUDIO_EXTERNAL_MAX_LOADED_CHECKPOINTS, through
/v1/unload_lora_adapter (what vLLM and the local server serve); the step's own adapter is never touched. The
fake server records the loads and unloads it receives."""
from __future__ import annotations

import pytest

from tests.security.endpoint_upstream import FakeUpstream, agent_client, attackers_run, chat, opening
from webapp.models import Checkpoint

pytestmark = pytest.mark.django_db


def test_checkpoints_asked_for_by_name_are_unloaded_least_recently_used_first(settings):
    settings.STUDIO_EXTERNAL_MAX_LOADED_CHECKPOINTS = 2
    with FakeUpstream() as upstream:
        run, key = attackers_run(upstream, step=7)  # samples with my-run@6
        for step in range(1, 8):
            Checkpoint.objects.create(run=run, step_index=step, path=f"/srv/runs/my-run/step-{step}",
                                      adapter_name=f"my-run@{step}")
        client = agent_client(key)
        for name in ("my-run@1", "my-run@2", "my-run@3", "my-run@2", "my-run@4", "my-run@6"):
            response = chat(client, run, {"messages": opening(), "model": name})
            assert response.status_code == 200 and response.json()["model"] == name, response.content
        moves = [(path.rsplit("/", 1)[1], body["lora_name"]) for method, path, body in upstream.requests
                 if path.endswith("_lora_adapter")]
        assert moves == [("load_lora_adapter", "my-run@1"), ("load_lora_adapter", "my-run@2"),
                         ("unload_lora_adapter", "my-run@1"), ("load_lora_adapter", "my-run@3"),
                         ("unload_lora_adapter", "my-run@3"), ("load_lora_adapter", "my-run@4")]
        assert sorted(upstream.loaded) == ["my-run@2", "my-run@4"]  # never the step's own adapter (my-run@6)
        # The engine's next adapter (my-run@7, saved but not yet the step's) cannot be loaded ahead of it.
        ahead = chat(client, run, {"messages": opening(), "model": "my-run@7"})
        assert ahead.status_code == 400 and "model" in ahead.json()
        # A recorded call samples with the step's adapter only.
        tagged = chat(client, run, {"messages": opening(), "model": "my-run@2"}, trajectory="t1")
        assert tagged.status_code == 409
