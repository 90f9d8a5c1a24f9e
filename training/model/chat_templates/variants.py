"""Prefix-stable training variants of the chat templates that rewrite or move earlier turns.

Each variant renders the turn being generated exactly as the family's published template does (header, body,
end-of-turn marker, and every system, user and tool turn before it), but never rewrites a turn once it is
rendered: a past assistant turn stays as it was sampled. The families whose published template is already
prefix-stable (Qwen2.5, Llama 3.x) need no variant; their own template is used. Written here, not copied: the
tests in tests/training/test_chat_families.py hold each variant to the published template, token for token.

Qwen3's published template drops the reasoning of assistant turns before the latest user query; the variant
keeps every turn's `<think>` block (reasoning "keep") or renders it empty for every turn, the generation prompt
included, which is Qwen3's non-thinking mode (reasoning "drop"). `enable_thinking` given at render time wins.
Mistral (Nemo-style) places the tool list and the system prompt before the latest user message; the variant
places them before the first. Gemma 3 has no tool format of its own: tool calls arrive as pythonic text and
tool results as user turns (families.prepare_messages); its variant only drops the template's check that turns
alternate, so two tool results in a row (parallel calls) render as two user turns instead of an error.
"""
from __future__ import annotations

QWEN3 = """\
{%- set thinking = enable_thinking if enable_thinking is defined else @THINKING@ %}
{%- if tools %}
{{- '<|im_start|>system\\n' }}
{%- if messages[0].role == 'system' %}{{- messages[0].content + '\\n\\n' }}{%- endif %}
{{- '# Tools\\n\\nYou may call one or more functions to assist with the user query.\\n\\n' }}
{{- 'You are provided with function signatures within <tools></tools> XML tags:\\n<tools>' }}
{%- for tool in tools %}{{- '\\n' + (tool | tojson) }}{%- endfor %}
{{- '\\n</tools>\\n\\nFor each function call, return a json object with function name and arguments within ' }}
{{- '<tool_call></tool_call> XML tags:\\n<tool_call>\\n{"name": <function-name>, "arguments": ' }}
{{- '<args-json-object>}\\n</tool_call><|im_end|>\\n' }}
{%- elif messages[0].role == 'system' %}
{{- '<|im_start|>system\\n' + messages[0].content + '<|im_end|>\\n' }}
{%- endif %}
{%- for message in messages %}
{%- if message.role == 'user' or (message.role == 'system' and not loop.first) %}
{{- '<|im_start|>' + message.role + '\\n' + message.content + '<|im_end|>\\n' }}
{%- elif message.role == 'assistant' %}
{%- set text = message.content or '' %}
{%- if message.reasoning_content is defined and message.reasoning_content is not none %}
{%- set reasoning = message.reasoning_content %}
{%- elif '</think>' in text %}
{%- set reasoning = text.split('</think>')[0].rstrip('\\n').split('<think>')[-1].lstrip('\\n') %}
{%- set text = text.split('</think>')[-1].lstrip('\\n') %}
{%- else %}
{%- set reasoning = '' %}
{%- endif %}
{%- if not thinking %}{%- set reasoning = '' %}{%- endif %}
{{- '<|im_start|>assistant\\n<think>\\n' + reasoning.strip('\\n') + '\\n</think>\\n\\n' + text.lstrip('\\n') }}
{%- for call in message.tool_calls or [] %}
{%- set function = call.function if call.function else call %}
{%- if not loop.first or text %}{{- '\\n' }}{%- endif %}
{{- '<tool_call>\\n{"name": "' + function.name + '", "arguments": ' }}
{{- function.arguments if function.arguments is string else function.arguments | tojson }}
{{- '}\\n</tool_call>' }}
{%- endfor %}
{{- '<|im_end|>\\n' }}
{%- elif message.role == 'tool' %}
{%- if loop.first or messages[loop.index0 - 1].role != 'tool' %}{{- '<|im_start|>user' }}{%- endif %}
{{- '\\n<tool_response>\\n' + message.content + '\\n</tool_response>' }}
{%- if loop.last or messages[loop.index0 + 1].role != 'tool' %}{{- '<|im_end|>\\n' }}{%- endif %}
{%- endif %}
{%- endfor %}
{%- if add_generation_prompt %}
{{- '<|im_start|>assistant\\n' }}
{%- if not thinking %}{{- '<think>\\n\\n</think>\\n\\n' }}{%- endif %}
{%- endif %}"""

MISTRAL = """\
{%- if messages[0].role == 'system' %}
{%- set system = messages[0].content %}
{%- set turns = messages[1:] %}
{%- else %}
{%- set system = none %}
{%- set turns = messages %}
{%- endif %}
{%- set first = namespace(user=true) %}
{{- bos_token }}
{%- for message in turns %}
{%- if message.role == 'user' %}
{%- if first.user and tools %}
{{- '[AVAILABLE_TOOLS][' }}
{%- for tool in tools %}
{{- '{"type": "function", "function": {' }}
{%- for key, value in tool.function.items() if key != 'return' %}
{{- '"' + key + '": ' + ('"' + value + '"' if value is string else value | tojson) }}
{%- if not loop.last %}{{- ', ' }}{%- endif %}
{%- endfor %}
{{- '}}' + (', ' if not loop.last else ']') }}
{%- endfor %}
{{- '[/AVAILABLE_TOOLS]' }}
{%- endif %}
{{- '[INST]' + (system + '\\n\\n' if first.user and system is not none else '') + message.content + '[/INST]' }}
{%- set first.user = false %}
{%- elif message.tool_calls %}
{{- '[TOOL_CALLS][' }}
{%- for call in message.tool_calls %}
{%- set encoded = call.function | tojson %}
{{- encoded[:-1] + ', "id": "' + call.id + '"}' + (', ' if not loop.last else ']' + eos_token) }}
{%- endfor %}
{%- elif message.role == 'assistant' %}
{{- message.content + eos_token }}
{%- elif message.role == 'tool' %}
{{- '[TOOL_RESULTS]{"content": ' + message.content | string + ', "call_id": "' + message.tool_call_id }}
{{- '"}[/TOOL_RESULTS]' }}
{%- endif %}
{%- endfor %}"""

GEMMA3 = """\
{{- bos_token }}
{%- if messages[0].role == 'system' %}
{%- set first_user_prefix = messages[0].content + '\\n\\n' %}
{%- set turns = messages[1:] %}
{%- else %}
{%- set first_user_prefix = '' %}
{%- set turns = messages %}
{%- endif %}
{%- for message in turns %}
{{- '<start_of_turn>' + ('model' if message.role == 'assistant' else message.role) + '\\n' }}
{{- first_user_prefix if loop.first else '' }}
{{- (message.content or '') | trim }}
{{- '<end_of_turn>\\n' }}
{%- endfor %}
{%- if add_generation_prompt %}{{- '<start_of_turn>model\\n' }}{%- endif %}"""


def qwen3(reasoning: str) -> str:
    """Qwen3's variant with the run's reasoning setting as the default of `enable_thinking`."""
    return QWEN3.replace("@THINKING@", "true" if reasoning == "keep" else "false")
