"""The project's inference server serves a checkpoint with the chat its run trained with (issue 45): started with
the run's frozen `chat` family and reasoning setting, so a Qwen3-family run that dropped reasoning is answered
after the empty think block it was trained after, not with the model's thinking prompt."""
from __future__ import annotations

import httpx
import pytest

from tests.webapp.conftest import wait_for
from tests.webapp.factories import project_factory
from tests.webapp.serving_world import completed_run, lora_adapters, serving  # noqa: F401  (fixtures)
from webapp.models import ProjectServer

pytestmark = pytest.mark.django_db(transaction=True)

EMPTY_THINK_PROMPT = "<|im_start|>assistant\n<think>\n\n</think>\n\n"


def test_a_served_checkpoint_of_a_run_that_drops_reasoning_is_answered_after_an_empty_think_block(
        serving, lora_adapters):  # noqa: F811
    from transformers import AutoTokenizer

    from webapp.services.checkpoint_retention import checkpoints_mark_served
    from webapp.services.serving import (project_server_request, served_adapter_name, server_headers,
                                         serving_adapters_load)

    project = project_factory()
    run = completed_run(project=project, model_dir=serving, adapters=lora_adapters[:1])
    # As frozen at launch for a catalogue model of the Qwen3 family with reasoning dropped (the tiny model has
    # ChatML tokens, so the family's template renders on it).
    run.config = {**run.config, "chat": {"family": "qwen3", "reasoning": "drop"}}
    run.save(update_fields=["config"])
    checkpoint = run.checkpoints.get()
    checkpoints_mark_served(checkpoint_ids=[checkpoint.pk])  # as Try it and the endpoints do before asking
    server, started = project_server_request(project=project, base_model=run.config["base_model"])
    assert started
    ready = wait_for(lambda: ProjectServer.objects.filter(pk=server.pk, status="ready").first(), timeout=120,
                     message="the server to be ready")
    serving_adapters_load(server=ready, checkpoints=[checkpoint])
    answer = httpx.post(f"{ready.base_url}/chat/completions", headers=server_headers(), timeout=60, json={
        "model": served_adapter_name(checkpoint), "messages": [{"role": "user", "content": "Hello?"}],
        "max_tokens": 1, "return_token_ids": True})
    assert answer.status_code == 200, answer.text
    prompt = AutoTokenizer.from_pretrained(str(serving)).decode(answer.json()["prompt_token_ids"])
    assert prompt.endswith("<|im_start|>user\nHello?<|im_end|>\n" + EMPTY_THINK_PROMPT)
