"""The run's endpoint sends the inference server a request whose JSON keys are in the order the database hands
the recorded call back in, so the prompt the trainer renders from the record (tools through the chat
template's `tojson`) is the prompt the model sampled from. Found by the external rollouts' end-to-end test:
PostgreSQL's jsonb reorders object keys, and the Agents SDK's tool schemas trained on a prompt the model never
saw (sampler gap ~3e-2 instead of ~5e-7)."""
from __future__ import annotations

import json

import pytest

from tests.webapp.factories import run_factory
from webapp.models import ExternalCall
from webapp.services.external_proxy import stored_order

pytestmark = pytest.mark.django_db

# A tool as the OpenAI Agents SDK sends it: keys in no order the database keeps.
TOOLS = [{"type": "function", "function": {
    "name": "calculate", "description": "Evaluates an arithmetic expression.",
    "parameters": {"properties": {"expression": {"title": "Expression", "type": "string"}},
                   "required": ["expression"], "title": "calculate_args", "type": "object",
                   "additionalProperties": False},
    "strict": True}}]


def test_the_tools_the_server_is_sent_read_back_from_the_database_in_the_same_order():
    sent = stored_order(TOOLS)
    call = ExternalCall.objects.create(run=run_factory(), trajectory_key="t1", model="m",
                                       messages=[{"role": "user", "content": "hi"}], tools=sent)
    back = ExternalCall.objects.get(pk=call.pk).tools
    assert json.dumps(back) == json.dumps(sent)
    assert json.dumps(TOOLS) != json.dumps(sent)  # as sent by the client, the database would have reordered them
    assert sent == TOOLS  # the same JSON value


def test_the_chat_template_renders_the_same_prompt_from_the_record_as_from_what_the_server_got(tiny_model_dir):
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(str(tiny_model_dir))
    sent = stored_order(TOOLS)
    call = ExternalCall.objects.create(run=run_factory(), trajectory_key="t1", model="m",
                                       messages=[{"role": "user", "content": "hi"}], tools=sent)
    stored = ExternalCall.objects.get(pk=call.pk)
    back = {"messages": stored.messages, "tools": stored.tools}

    def prompt(tools):
        return tokenizer.apply_chat_template(back["messages"], tools=tools, tokenize=False, add_generation_prompt=True)

    assert prompt(back["tools"]) == prompt(sent)
    assert prompt(back["tools"]) != prompt(TOOLS)  # what the server would have seen without the reordering
