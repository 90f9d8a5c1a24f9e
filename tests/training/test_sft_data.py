"""SFT data files: every malformed row is named by line and field, and a file with any problem yields nothing."""
from __future__ import annotations

import json

from training.sft.data import MAX_DEPTH, MAX_ERRORS, json_depth, parse_jsonl, split_held_out

GOOD = {"messages": [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Hi"},
                     {"role": "assistant", "content": "Hello."}]}
WITH_TOOLS = {
    "messages": [
        {"role": "user", "content": "What is a fjord?"},
        {"role": "assistant", "tool_calls": [{"id": "c0", "type": "function",
                                              "function": {"name": "lookup", "arguments": "{\"q\": \"fjord\"}"}}]},
        {"role": "tool", "tool_call_id": "c0", "content": "a long narrow inlet"},
        {"role": "assistant", "content": "A long narrow inlet."},
    ],
    "tools": [{"type": "function", "function": {"name": "lookup", "parameters": {"type": "object"}}}],
}


def lines(*rows: object) -> str:
    return "\n".join(r if isinstance(r, str) else json.dumps(r) for r in rows)


def test_a_valid_file_gives_every_conversation_with_its_tools_and_skips_blank_lines():
    conversations, errors = parse_jsonl(lines(GOOD, "", WITH_TOOLS, "   "))
    assert errors == []
    assert [len(c.messages) for c in conversations] == [3, 4]
    assert conversations[1].tool_list()[0]["function"]["name"] == "lookup"
    # What is stored and exported is the row itself, unset keys left out.
    assert conversations[1].to_json()["messages"][1] == WITH_TOOLS["messages"][1]


def test_each_malformed_row_is_named_by_line_and_field_and_nothing_is_returned():
    bad_arguments = json.loads(json.dumps(WITH_TOOLS))
    bad_arguments["messages"][1]["tool_calls"][0]["function"]["arguments"] = "{q: fjord}"
    text = lines(
        GOOD,                                                                    # 1: fine
        "{not json",                                                             # 2
        {"messages": [{"role": "user", "content": "Hi"}]},                        # 3: nothing to learn
        {"messages": [{"role": "robot", "content": "Hi"}]},                       # 4: unknown role
        bad_arguments,                                                           # 5: arguments not JSON
        {"messages": [{"role": "user", "content": "Hi"}, {"role": "assistant"}]},  # 6: empty answer
        {"messages": GOOD["messages"], "weight": 1},                              # 7: unknown key
        [1, 2],                                                                  # 8: not an object
        GOOD,                                                                    # 9: fine
    )
    conversations, errors = parse_jsonl(text)
    assert conversations == []  # a caller stores nothing from a file it has to send back
    found = {e.line: str(e) for e in errors}
    assert sorted(found) == [2, 3, 4, 5, 6, 7, 8]
    assert found[2].startswith("line 2: not valid JSON")
    assert "no assistant message" in found[3]
    assert found[4].startswith("line 4: messages.0.role:")
    assert found[5].startswith("line 5: messages.1.tool_calls.0.function.arguments: not valid JSON")
    assert found[6].startswith("line 6: messages.1:") and "needs content or tool_calls" in found[6]
    assert found[7].startswith("line 7: weight:")
    assert "expected a JSON object" in found[8]


def test_an_empty_file_and_text_that_is_not_utf8_are_refused_with_a_reason():
    assert [str(e) for e in parse_jsonl("\n\n")[1]] == ["line 1: the file holds no conversation"]
    conversations, errors = parse_jsonl(lines(GOOD).encode() + b"\n\xff\xfe")
    assert conversations == [] and str(errors[0]) == "line 2: not UTF-8 text"


def test_a_file_wrong_everywhere_lists_its_first_problems_only():
    _, errors = parse_jsonl("\n".join(["{"] * (MAX_ERRORS * 3)))
    assert len(errors) == MAX_ERRORS and errors[-1].line == MAX_ERRORS


def test_too_many_rows_are_refused_at_the_first_one_over_the_limit():
    conversations, errors = parse_jsonl(lines(GOOD, GOOD, GOOD), max_rows=2)
    assert conversations == [] and str(errors[0]) == "line 3: more than 2 conversations; split the file"


def test_a_line_nested_deeper_than_the_limit_is_named_never_a_recursion_error():
    deep_line = '{"messages": ' + "[" * 5000 + "]" * 5000 + "}"
    deep_tools = json.loads(json.dumps(WITH_TOOLS))
    deep_tools["tools"][0]["function"]["parameters"] = json.loads("{\"a\": " * 70 + "1" + "}" * 70)
    deep_arguments = json.loads(json.dumps(WITH_TOOLS))
    deep_arguments["messages"][1]["tool_calls"][0]["function"]["arguments"] = '{"a": ' * 5000 + "1" + "}" * 5000
    conversations, errors = parse_jsonl(lines(GOOD, deep_line, deep_tools, deep_arguments))
    assert conversations == []
    assert [(e.line, e.field) for e in errors] == [(2, ""), (3, ""), (4, "messages.1.tool_calls.0.function.arguments")]
    assert "nested 5001 levels deep; the most allowed is 64" in errors[0].message
    assert "nested 74 levels deep" in errors[1].message and "nested 5000 levels deep" in errors[2].message
    # Brackets inside strings are text, not nesting; a file just within the limit is read.
    assert json_depth('{"a": "[[[{{{", "b": [1, {"c": []}]}') == 4
    within = json.loads(json.dumps(WITH_TOOLS))
    levels = MAX_DEPTH - 4  # the row, tools, the tool and its function hold the parameters
    within["tools"][0]["function"]["parameters"] = json.loads("{\"a\": " * levels + "1" + "}" * levels)
    assert parse_jsonl(lines(within))[1] == []


def test_the_held_out_split_follows_content_not_position():
    rows = [{"messages": [{"role": "user", "content": f"q{i}"}, {"role": "assistant", "content": f"a{i}"}]}
            for i in range(200)]
    train, held = split_held_out(rows, 0.1, seed=3)
    assert sorted(train + held) == list(range(200)) and 8 <= len(held) <= 35
    held_rows = [json.dumps(rows[i]) for i in held]
    reversed_rows = rows[::-1]
    _, held_again = split_held_out(reversed_rows, 0.1, seed=3)
    assert sorted(json.dumps(reversed_rows[i]) for i in held_again) == sorted(held_rows)
    assert split_held_out(rows[:1], 0.5, seed=3) == ([0], [])  # one conversation: trained, not held out
    assert len(split_held_out(rows[:3], 0.9, seed=3)[0]) >= 1  # one is always left to train on
