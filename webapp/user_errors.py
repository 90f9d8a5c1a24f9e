"""What a person reads when something failed: the engine's, the judge's and litellm's messages are written for
developers ("TrainingError … litellm.InternalServerError … OpenAIException"). Every page that shows an error
passes it through `user_error`, which says what happened and what to do in the pages' words; the original text
stays available, folded, as the technical details. The one place that maps errors to user text.
"""
from __future__ import annotations

import re
from dataclasses import dataclass


@dataclass(frozen=True)
class UserError:
    what: str  # what happened, one sentence
    todo: str  # what to do about it ("" when the sentence says it already)
    details: str  # the original text, for the folded technical details ("" when nothing more to show)


# First match wins, so the specific rules come before the general ones. Matched against the whole raw text; the
# judge's errors read "judge MODEL: KIND ..." (judging/llm.py), so a rule about the judge's API keys on that.
_RULES: list[tuple[re.Pattern[str], str, str]] = [(re.compile(p, re.S), what, todo) for p, what, todo in [
    (r"has no env reward|needs a judge",
     "This agent's answers have no reward of their own, and the run has no judge to score them.",
     "Launch the run again with a judge chosen in the form (or give the agent an environment with its own reward)."),
    (r"not allowed by this deployment's egress policy|this address is not allowed|EgressRefused|"
     r"STUDIO_EGRESS_DENY_ALL is set",
     "Rubric Studio may not send requests to this address (the judge's, teacher's or server's API base).",
     "Use a public address, or ask the administrator to list this host in STUDIO_EGRESS_ALLOWED_HOSTS; link-local "
     "addresses such as cloud metadata endpoints are never allowed. The details name the address and why."),
    # The judge's request failures name their cause (judging/failures.py); the older wording of stored errors
    # ("judge MODEL: SomeError …") is matched too.
    (r"no API key was sent|api_key_env names '\w+', but that environment variable is not set|"
     r"Missing credentials|Missing \w+ API Key",
     "The judge has no API key: its requests went out without one.",
     "Store the key on the judge's page (or set the environment variable it names where runs execute), use Test "
     "judge there, then try again."),
    (r"the API refused the key|rejected the credentials|judge \S+: AuthenticationError",
     "The judge's API refused its key.",
     "Fix the key (or the environment variable that holds it) on the judge's page, use Test judge there, then "
     "try again."),
    (r"the API does not know this model|does not know this model|judge \S+: NotFoundError",
     "The judge's API does not know this model or address.",
     "Check the judge's model name (provider/model) and API base URL on its page, use Test judge there, then "
     "try again."),
    (r"did not reply with usable scenarios",
     "The judge's model did not send back scenarios in the form this page needs.",
     "Try again, or choose a judge whose model supports structured (JSON) replies."),
    (r"gave no usable reply",
     "The judge answered, but its replies could not be read as scores.",
     "Choose a stronger judge model, or one that supports structured (JSON) replies; Test judge on the judge's "
     "page shows a sample reply."),
    (r"the API rejected the request|the judge API rejected the request|judge \S+: BadRequestError",
     "The judge's API rejected the request.",
     "Check the judge's model name and settings on its page; the model must support structured (JSON) replies."),
    (r"the API is rate-limiting|judge \S+: RateLimitError",
     "The judge's API is rate-limiting: it kept answering 429 (too many requests) through the retries.",
     "Wait a few minutes and try again, or lower the judge's concurrency on its page (or raise the account's "
     "limit with the provider)."),
    (r"the server could not be reached|judge \S+: (APIConnectionError|Timeout)|OpenAIException - Connection error",
     "The judge's server could not be reached (connection refused, unknown host or no answer in time).",
     "Check that the judge's server is up and its API base URL is right (Test judge on the judge's page), then "
     "try again."),
    (r"the server failed with an error of its own|judge \S+: (InternalServerError|ServiceUnavailableError|"
     r"BadGatewayError)",
     "The judge's server answered with an error of its own (HTTP 5xx), through the retries.",
     "The fault is on the server's side: try again later; if the server is yours, read its logs. Test judge on "
     "the judge's page shows when it answers again."),
    (r"judge \S+: \w+ persisted after \d+ retr",
     "The judge's API could not be reached or kept failing (server error, timeout or rate limit).",
     "Check that the judge's server is up and its API base URL is right (Test judge on the judge's page), then "
     "try again."),
    (r"McpServerExited",
     "The MCP server's program exited before it answered (the details give its exit code and last stderr line).",
     "Its last stderr line usually says why (a missing module, a bad option, a missing file). A catalogue server "
     "is the deployment's: tell a site administrator what it printed."),
    (r"McpNotMcp",
     "That URL answers, but not as an MCP server (a 404 or a web page instead of MCP).",
     "Check the URL's path: a streamable-HTTP MCP server usually answers at a path ending in /mcp. Open it in a "
     "browser: a web page there means the path is wrong."),
    (r"McpProgramNotMcp",
     "That program is not an MCP server: it printed ordinary text where MCP messages belong.",
     "Check the command and its arguments: they must start an MCP server over stdio, not another program. A "
     "server that prints logs must write them to standard error; the details show the line it printed."),
    (r"McpStartTimeout",
     "The MCP server timed out: it started or was reached, but did not list its tools in time.",
     "Check that the server is up and not overloaded; a slow server may need a longer per-call timeout on its page."),
    (r"McpInvalidUtf8",
     "The MCP server wrote bytes that are not UTF-8 text to its standard output.",
     "MCP messages are UTF-8 JSON: the server (or something it runs) prints binary or another encoding to stdout; "
     "log to standard error instead."),
    (r"McpToolsTooLarge",
     "The MCP server offers more tools, or larger ones, than an agent may be given (every prompt carries them).",
     "Serve fewer tools from this server, or shorten the description or input schema the details name."),
    (r"McpServerDidNotStart: .*refused the request",
     "The MCP server refused the request: it wants credentials it was not given.",
     "Enter the header it expects (e.g. Authorization: Bearer …) on the server's page; stored headers are removed "
     "when the URL moves to another scheme, host or port."),
    (r"McpServerDidNotStart",
     "The MCP server could not be reached or did not start.",
     "Check the server's URL on its page (is the server running, on that host and port?), then use Test "
     "connection; the technical details end with what the server printed."),
    (r"McpHostNotAllowed",
     "Rubric Studio may not connect to this MCP server's address.",
     "Loopback and private addresses need an entry in STUDIO_MCP_ALLOWED_HOSTS (set by the administrator); "
     "link-local addresses such as cloud metadata endpoints are never allowed. The details name the address."),
    (r"McpInvalidToolSchema",
     "The MCP server lists a tool a model cannot be given (an invalid input schema or tool name).",
     "Fix that tool's name or input schema in the server; the technical details name the tool."),
    (r"McpServerTimeout",
     "The MCP server stopped answering: a tool call took longer than the per-call timeout.",
     "Check the server, or raise the per-call timeout on the server's page."),
    (r"McpServerCrashed",
     "The MCP server went away in the middle of its work (the process died or the connection dropped).",
     "Read the technical details for what it printed, fix the server, then use Test connection."),
    (r"McpProtocolError",
     "The MCP server sent something that is not MCP (e.g. it prints to its standard output).",
     "A stdio server must write only MCP messages to its standard output; log to standard error instead."),
    (r"rollouts failed in step",
     "The agent's model failed to answer too many scenarios.",
     "Read the technical details for the first failure."),
    (r"(?i:out of memory)|OutOfMemoryError",
     "The machine ran out of memory.",
     "Lower the group size, the groups per step or the agent's max tokens, then resume."),
]]

# Signs that a text was written for a developer: exception class names, library names, pydantic's links.
_DEVELOPER = re.compile(r"\b\w+(Error|Exception)\b|litellm|pydantic|Traceback|validation error for|\{'|\[type=",
                        re.S)


RESUMES = "A failed run resumes from its last checkpoint: fix the cause, then use Resume."


def user_error(raw: object, *, resumable: bool = False) -> UserError:
    """`raw`: an exception or its text. A text that already reads as a sentence for people is kept as it is
    (its first line shown, the rest folded). `resumable`: the error stopped a run mid-way, which Resume continues
    from its last checkpoint; only then is that said (not for a launch, Test judge or a draft)."""
    explained = _explain(str(raw or "").strip())
    if not resumable or not explained.what:
        return explained
    return UserError(explained.what, f"{explained.todo} {RESUMES}".strip(), explained.details)


def _explain(text: str) -> UserError:
    if not text:
        return UserError("", "", "")
    for pattern, what, todo in _RULES:
        if pattern.search(text):
            return UserError(what, todo, text)
    first, _, rest = text.partition("\n")
    # The engine's own errors are written to be acted on: without their class name they read as sentences.
    first = re.sub(r"^(TrainingError|JudgeError): ", "", first)
    if not _DEVELOPER.search(first):
        return UserError(first, "", text if rest.strip() or first != text else "")
    return UserError("Something failed that this page cannot explain.",
                     "The technical details below say what; if they do not help, ask whoever runs this server.",
                     text)
