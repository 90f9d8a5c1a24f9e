"""The model families users bring, checked token for token against each family's published chat template.

Fixtures (tests/training/chat_families/): the published templates and the special tokens of Qwen3, Qwen2.5,
Llama 3.x, Gemma 3 and Mistral. A small byte-level BPE tokenizer is built offline with each family's tokens.
For every assistant turn of a multi-turn conversation with tool calls, the tokens we train must be exactly the
tokens the published template renders for that turn when it is the turn being generated.
"""
from __future__ import annotations

import copy
import functools
import json
from pathlib import Path
from types import SimpleNamespace

import pytest

from training.model.chat_format import encode_conversation, end_of_turn_ids
from training.model.chat_templates import FAMILIES, family_of, install, prepare_messages, tool_calls

FIXTURES = Path(__file__).parent / "chat_families"
SPECS = json.loads((FIXTURES / "families.json").read_text())
NAMES = sorted(SPECS)

TOOLS = [{"type": "function", "function": {
    "name": "get_weather", "description": "The weather in a city now.",
    "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}}]


def call(city: str, call_id: str) -> dict:
    return {"id": call_id, "type": "function",
            "function": {"name": "get_weather", "arguments": json.dumps({"city": city})}}


# As trajectories store them: OpenAI messages, arguments as JSON strings, ids as the server gave them.
CONVERSATION = [
    {"role": "system", "content": "You answer questions about the weather."},
    {"role": "user", "content": "What is the weather in Paris?"},
    {"role": "assistant", "content": None, "tool_calls": [call("Paris", "call_5f2a9c0d1e7b")]},
    {"role": "tool", "tool_call_id": "call_5f2a9c0d1e7b", "content": "18 C, sunny"},
    {"role": "assistant", "content": "It is 18 C and sunny in Paris."},
    {"role": "user", "content": "And in Rome?"},
    {"role": "assistant", "content": None, "tool_calls": [call("Rome", "call_9b1c4e2f7a30")]},
    {"role": "tool", "tool_call_id": "call_9b1c4e2f7a30", "content": "21 C, clouds"},
    {"role": "assistant", "content": "Rome has 21 C and clouds."},
]
THOUGHTS = {2: "The user wants Paris. I will look it up.", 4: "The tool says 18 C.",
            6: "Now Rome.", 8: "The tool says 21 C."}


def with_reasoning(messages: list[dict]) -> list[dict]:
    """Qwen3 thinking: each assistant turn as the model wrote it, its reasoning first."""
    out = copy.deepcopy(messages)
    for k, thought in THOUGHTS.items():
        out[k]["content"] = f"<think>\n{thought}\n</think>\n\n" + (out[k]["content"] or "")
    return out


@functools.lru_cache(maxsize=None)
def _trained_core(name: str) -> str:
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

    spec = SPECS[name]
    core = Tokenizer(models.BPE())
    core.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    core.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=600, special_tokens=spec["special"],
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    corpus = [(FIXTURES / spec["template"]).read_text(), json.dumps(with_reasoning(CONVERSATION)), json.dumps(TOOLS)]
    core.train_from_iterator(corpus * 5, trainer)
    return core.to_str()


def published(name: str):
    """A tokenizer with the family's special tokens and its published template, and its generation config."""
    from tokenizers import Tokenizer
    from transformers import PreTrainedTokenizerFast

    spec = SPECS[name]
    tokenizer = PreTrainedTokenizerFast(tokenizer_object=Tokenizer.from_str(_trained_core(name)),
                                        bos_token=spec["bos"], eos_token=spec["eos"], pad_token=spec["pad"])
    if spec["added"]:
        tokenizer.add_tokens(spec["added"])
    tokenizer.chat_template = (FIXTURES / spec["template"]).read_text()
    generation = SimpleNamespace(eos_token_id=[tokenizer.convert_tokens_to_ids(t) for t in spec["generation_eos"]])
    return tokenizer, generation


def ids(tokenizer, text: str) -> list[int]:
    return tokenizer(text, add_special_tokens=False)["input_ids"]


def published_turns(name: str, messages: list[dict], **kwargs) -> list[str]:
    """Per assistant turn, the text the published template renders for it as the turn being generated: what the
    whole conversation up to it adds to the generation prompt, through the end-of-turn marker."""
    tokenizer, _ = published(name)
    family, end = FAMILIES[name], SPECS[name]["end_of_turn"]
    turns = []
    for k, message in enumerate(messages):
        if message["role"] != "assistant":
            continue
        prompt = tokenizer.apply_chat_template(prepare_messages(family, messages[:k], TOOLS), tools=TOOLS,
                                               tokenize=False, add_generation_prompt=True, **kwargs)
        full = tokenizer.apply_chat_template(prepare_messages(family, messages[: k + 1], TOOLS), tools=TOOLS,
                                             tokenize=False, add_generation_prompt=False, **kwargs)
        if full.startswith(prompt):
            added = full[len(prompt):]
        else:  # Mistral's puts the system prompt on the last user turn only while it is the last message
            assert name == "mistral", f"{name}: the published template changes the prompt of turn {k}"
            added = full[max(full.rfind("[/INST]") + len("[/INST]"),
                             full.rfind("[/TOOL_RESULTS]") + len("[/TOOL_RESULTS]")):]
        turns.append(added[: added.index(end) + len(end)])
    return turns


def trained_runs(input_ids: list[int], mask: list[int]) -> list[list[int]]:
    runs, current = [], []
    for token, trained in zip(input_ids, mask):
        if trained:
            current.append(token)
        elif current:
            runs.append(current)
            current = []
    return runs + ([current] if current else [])


def conversation_for(name: str) -> list[dict]:
    return with_reasoning(CONVERSATION) if name == "qwen3" else CONVERSATION


@pytest.mark.parametrize("name", NAMES)
def test_each_trained_assistant_turn_is_the_tokens_the_published_template_renders_for_it(name):
    tokenizer, generation = published(name)
    messages = conversation_for(name)
    input_ids, mask = encode_conversation(tokenizer, messages, TOOLS, end_ids=end_of_turn_ids(tokenizer, generation))
    expected = [ids(tokenizer, text) for text in published_turns(name, messages)]
    assert len(expected) == 4
    assert trained_runs(input_ids, mask) == expected  # the mask covers exactly the assistant's own tokens
    assert sum(mask) == sum(len(turn) for turn in expected)


@pytest.mark.parametrize("name", NAMES)
def test_the_first_turn_is_trained_after_exactly_the_prompt_the_published_template_samples_it_from(name):
    tokenizer, generation = published(name)
    messages = conversation_for(name)
    input_ids, mask = encode_conversation(tokenizer, messages, TOOLS, end_ids=end_of_turn_ids(tokenizer, generation))
    prompt = tokenizer.apply_chat_template(prepare_messages(FAMILIES[name], messages[:2], TOOLS), tools=TOOLS,
                                           tokenize=False, add_generation_prompt=True)
    assert input_ids[: mask.index(1)] == ids(tokenizer, prompt)


@pytest.mark.parametrize("name", ["gemma3", "llama3", "qwen2_5"])
def test_a_prefix_stable_family_trains_on_its_published_rendering_of_the_whole_conversation(name):
    tokenizer, generation = published(name)
    input_ids, _ = encode_conversation(tokenizer, CONVERSATION, TOOLS, end_ids=end_of_turn_ids(tokenizer, generation))
    whole = tokenizer.apply_chat_template(prepare_messages(FAMILIES[name], CONVERSATION, TOOLS), tools=TOOLS,
                                          tokenize=False)
    assert input_ids == ids(tokenizer, whole)


def test_qwen3_keeps_past_reasoning_in_the_context_of_later_turns():
    tokenizer, generation = published("qwen3")
    input_ids, mask = encode_conversation(tokenizer, with_reasoning(CONVERSATION), TOOLS,
                                          end_ids=end_of_turn_ids(tokenizer, generation))
    last_turn_start = len(mask) - 1 - mask[::-1].index(0)
    context = tokenizer.decode(input_ids[:last_turn_start])
    for thought in list(THOUGHTS.values())[:3]:  # the published template would have dropped these
        assert f"<think>\n{thought}\n</think>" in context


def test_qwen3_with_reasoning_dropped_trains_only_the_answers_after_an_empty_think_block():
    tokenizer, generation = published("qwen3")
    install(tokenizer, reasoning="drop")
    input_ids, mask = encode_conversation(tokenizer, CONVERSATION, TOOLS,
                                          end_ids=end_of_turn_ids(tokenizer, generation))
    expected = published_turns("qwen3", CONVERSATION, enable_thinking=False)
    assert trained_runs(input_ids, mask) == [ids(tokenizer, text) for text in expected]
    assert not any("<think>" in text for text in expected)
    # The empty block is the generation prompt of every turn: context, never trained.
    assert tokenizer.decode(input_ids).count("<|im_start|>assistant\n<think>\n\n</think>\n\n") == 4


def test_qwen3_with_reasoning_kept_trains_the_think_block_of_every_turn():
    tokenizer, generation = published("qwen3")
    install(tokenizer, reasoning="keep")
    input_ids, mask = encode_conversation(tokenizer, with_reasoning(CONVERSATION), TOOLS,
                                          end_ids=end_of_turn_ids(tokenizer, generation))
    turns = [tokenizer.decode(run) for run in trained_runs(input_ids, mask)]
    assert [t.startswith(f"<think>\n{thought}\n</think>\n\n") for t, thought in zip(turns, THOUGHTS.values())] \
        == [True] * 4


@pytest.mark.parametrize("name", NAMES)
def test_each_published_template_is_recognised_as_its_family(name):
    assert family_of((FIXTURES / SPECS[name]["template"]).read_text()).name == name


def test_the_catalogue_can_name_the_family_of_a_template_it_does_not_recognise():
    tokenizer, _ = published("mistral")
    tokenizer.chat_template = "{{ bos_token }}{% for m in messages %}[INST]{{ m.content }}[/INST]{% endfor %}"
    assert family_of(tokenizer.chat_template) is None
    assert install(tokenizer, name="mistral").name == "mistral"
    assert family_of(tokenizer.chat_template).name == "mistral"  # now its training variant


def test_tool_call_arguments_stored_as_json_text_are_rendered_as_the_objects_the_template_expects():
    tokenizer, generation = published("qwen2_5")
    input_ids, mask = encode_conversation(tokenizer, CONVERSATION[:3], TOOLS,
                                          end_ids=end_of_turn_ids(tokenizer, generation))
    assert tokenizer.decode(trained_runs(input_ids, mask)[0]) == \
        '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris"}}\n</tool_call><|im_end|>'


def test_gemma3_takes_two_tool_results_in_a_row_as_two_user_turns():
    tokenizer, generation = published("gemma3")
    parallel = [CONVERSATION[1], {"role": "assistant", "content": None,
                                  "tool_calls": [call("Paris", "a"), call("Rome", "b")]},
                {"role": "tool", "tool_call_id": "a", "content": "18 C"},
                {"role": "tool", "tool_call_id": "b", "content": "21 C"},
                {"role": "assistant", "content": "Paris 18 C, Rome 21 C."}]
    input_ids, mask = encode_conversation(tokenizer, parallel, TOOLS, end_ids=end_of_turn_ids(tokenizer, generation))
    text = tokenizer.decode(input_ids)
    assert "<start_of_turn>user\n18 C<end_of_turn>\n<start_of_turn>user\n21 C<end_of_turn>\n" in text
    assert tokenizer.decode(trained_runs(input_ids, mask)[0]) == \
        '[get_weather(city="Paris"), get_weather(city="Rome")]<end_of_turn>'


@pytest.mark.parametrize("name", NAMES)
def test_the_tool_call_the_template_renders_parses_back_with_the_familys_parser(name):
    family = FAMILIES[name]
    turn = published_turns(name, conversation_for(name))[0]  # the Paris call
    text = turn[: -len(SPECS[name]["end_of_turn"])]
    _, calls = tool_calls.parse(family.tool_format, text.split("</think>\n\n")[-1])
    assert [(c["name"], json.loads(c["arguments"])) for c in calls] == [("get_weather", {"city": "Paris"})]


@pytest.mark.parametrize("name", NAMES)
def test_rendering_a_tool_call_writes_what_the_template_renders_for_it(name):
    family = FAMILIES[name]
    turn = published_turns(name, conversation_for(name))[0]
    shaped = prepare_messages(family, CONVERSATION[:3], TOOLS)[-1]
    calls = [{**c["function"], "id": c["id"]} for c in shaped.get("tool_calls", [])] or \
        [{"name": "get_weather", "arguments": {"city": "Paris"}}]
    assert tool_calls.render(family.tool_format, calls) in turn


@pytest.mark.parametrize("name,variant", [("qwen3", True), ("mistral", True), ("gemma3", True), ("llama3", False),
                                          ("qwen2_5", False)])
def test_vllm_is_started_with_the_training_template_of_a_family_that_needs_one(tmp_path, name, variant):
    from training.model.chat_templates.families import training_template
    from training.model.chat_templates.serving import vllm_chat_template_args

    model, run = tmp_path / "model", tmp_path / "run"
    model.mkdir()
    (model / "tokenizer_config.json").write_text(json.dumps(
        {"chat_template": (FIXTURES / SPECS[name]["template"]).read_text()}))
    args = vllm_chat_template_args(str(model), run, reasoning="drop")
    assert args == (["--chat-template", str(run / "chat_template.jinja")] if variant else [])
    if variant:
        assert Path(args[1]).read_text() == training_template(FAMILIES[name], "drop")


@pytest.mark.parametrize("fmt", tool_calls.FORMATS)
def test_several_calls_with_nested_unicode_and_boolean_arguments_survive_render_then_parse(fmt):
    calls = [{"name": "book", "arguments": {"city": "Zürich", "nights": 2, "late": True, "tags": ["a", None],
                                            "guest": {"name": "Ana", "vip": False}}},
             {"name": "ping", "arguments": {}}]
    if fmt == "mistral":
        calls = [{**c, "id": f"abcdefgh{i}"} for i, c in enumerate(calls)]
    if fmt == "llama3_json":  # one call per turn (the published template), objects one level deep (vLLM's regex)
        calls = [{"name": "book", "arguments": {k: v for k, v in calls[0]["arguments"].items() if k != "guest"}}]
    content, parsed = tool_calls.parse(fmt, tool_calls.render(fmt, calls))
    assert content is None
    assert [{**c, "arguments": json.loads(c["arguments"])} for c in parsed] == calls


@pytest.mark.parametrize("fmt", tool_calls.FORMATS)
def test_text_that_is_not_a_call_stays_the_models_content(fmt):
    text = "The answer is [not a call] {\"also\": 1"
    assert tool_calls.parse(fmt, text) == (text, [])
