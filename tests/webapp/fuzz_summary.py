"""What a Schemathesis run saw, per operation: read from its NDJSON event report (`--report ndjson`).

The API contract test (tests/webapp/test_api_contract.py) and `make fuzz` print it: for each operation of the
schema, how many requests it got and its status codes, then three lists that say what to look at: operations that
answered mostly 429 (a throttle hid them from the fuzzer), server errors (5xx) and contract failures (a check that
failed), each failure with one request and its answer to replay by hand. An operation of the schema that got no
request at all is listed too: a filter or a skip hid it.
"""
from __future__ import annotations

import base64
import json
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

STATEFUL = "Stateful tests"  # the label of the stateful phase's scenarios, which call many operations each
EXAMPLE_CHARS = 400  # of a request's or an answer's body in an example: enough to see why, short enough to read


@dataclass
class Operation:
    """One operation's tally over one or more runs."""

    label: str  # "POST /api/agents/"
    statuses: Counter[int] = field(default_factory=Counter)
    failures: Counter[str] = field(default_factory=Counter)  # failed check (and its title) -> count
    examples: dict[str, str] = field(default_factory=dict)  # failed check or "5xx" -> one request and its answer

    @property
    def requests(self) -> int:
        return sum(self.statuses.values())

    @property
    def throttled(self) -> int:
        return self.statuses[429]

    @property
    def server_errors(self) -> int:
        return sum(n for status, n in self.statuses.items() if status >= 500)

    def mostly_throttled(self) -> bool:
        return self.requests > 0 and self.throttled * 2 > self.requests


@dataclass
class Summary:
    operations: dict[str, Operation] = field(default_factory=dict)
    seeds: list[int] = field(default_factory=list)

    def operation(self, label: str) -> Operation:
        return self.operations.setdefault(label, Operation(label))

    @property
    def mostly_throttled(self) -> list[Operation]:
        return [op for op in self._sorted() if op.mostly_throttled()]

    @property
    def with_server_errors(self) -> list[Operation]:
        return [op for op in self._sorted() if op.server_errors]

    @property
    def with_failures(self) -> list[Operation]:
        return [op for op in self._sorted() if op.failures]

    @property
    def unreached(self) -> list[Operation]:
        return [op for op in self._sorted() if not op.requests]

    def _sorted(self) -> list[Operation]:
        return [self.operations[label] for label in sorted(self.operations)]

    def render(self) -> str:
        ops = self._sorted()
        lines = [f"Schemathesis: {len(ops)} operations in the schema, seeds {self.seeds}, "
                 f"{sum(op.requests for op in ops)} requests",
                 f"  answering mostly 429: {len(self.mostly_throttled)}; with server errors: "
                 f"{len(self.with_server_errors)}; with contract failures: {len(self.with_failures)}; "
                 f"never called: {len(self.unreached)}", ""]
        width = max((len(op.label) for op in ops), default=10)
        for op in ops:
            codes = " ".join(f"{status}x{n}" for status, n in sorted(op.statuses.items()))
            flag = " <- mostly 429" if op.mostly_throttled() else ""
            lines.append(f"{op.label:<{width}}  {op.requests:>5}  {codes}{flag}")
        for title, chosen in (("Answering mostly 429", self.mostly_throttled),
                              ("Never called", self.unreached)):
            if chosen:
                lines += ["", f"{title}:", *(f"  {op.label}" for op in chosen)]
        for title, chosen, keys in (("Server errors", self.with_server_errors, lambda op: ["5xx"]),
                                    ("Contract failures", self.with_failures, lambda op: list(op.failures))):
            if chosen:
                lines += ["", f"{title}:"]
                for op in chosen:
                    for key in keys(op):
                        count = op.server_errors if key == "5xx" else op.failures[key]
                        lines.append(f"  {op.label}: {key} x{count}")
                        lines += [f"    {line}" for line in op.examples.get(key, "").splitlines()]
        return "\n".join(lines) + "\n"


def _text(value: Any) -> str:
    """A recorded body: bytes come as {"$base64": ...}, a generated body as the JSON it was."""
    if value is None:
        return ""
    if isinstance(value, dict) and set(value) == {"$base64"}:
        return base64.b64decode(value["$base64"]).decode("utf-8", "replace")
    return json.dumps(value, ensure_ascii=True)


def _example(interaction: dict[str, Any]) -> str:
    request, response = interaction.get("request") or {}, interaction.get("response") or {}
    body = _text(request.get("body"))[:EXAMPLE_CHARS]
    answer = _text(response.get("content"))[:EXAMPLE_CHARS]
    return (f"{request.get('method', '?')} {request.get('uri', '?')}" + (f"\n  body: {body}" if body else "")
            + f"\n  -> {response.get('status_code', 'no answer')} {answer}")


def _label(case: dict[str, Any]) -> str:
    value = case.get("value") or {}
    return f"{value.get('method', '?').upper()} {value.get('path', '?')}"


def read_events(path: Path, summary: Summary) -> None:
    """Adds one run's NDJSON report to `summary`: every operation the run loaded, every answer, every failed check."""
    with open(path, encoding="utf-8") as events:
        for line in events:
            try:
                event = json.loads(line)
            except json.JSONDecodeError:  # the last line of a run that was killed; its exit status says so
                continue
            if "Initialize" in event and event["Initialize"].get("seed") is not None:
                if event["Initialize"]["seed"] not in summary.seeds:
                    summary.seeds.append(event["Initialize"]["seed"])
            finished = event.get("ScenarioFinished")
            if finished is None:
                continue
            recorder = finished.get("recorder") or {}
            label = recorder.get("label")
            if not label:
                continue
            if label != STATEFUL:
                summary.operation(label)  # listed even if it was never called
            cases = recorder.get("cases") or {}
            checks = recorder.get("checks") or {}
            for case_id, interaction in (recorder.get("interactions") or {}).items():
                # A scenario of one operation counts its probes with other methods (405s) as that operation's; a
                # stateful scenario calls many operations, each case naming its own.
                if label == STATEFUL and case_id not in cases:
                    continue
                op = summary.operation(label if label != STATEFUL else _label(cases[case_id]))
                status = (interaction.get("response") or {}).get("status_code")
                if status is None:
                    op.failures["no answer"] += 1
                    op.examples.setdefault("no answer", _example(interaction))
                    continue
                op.statuses[status] += 1
                if status >= 500:
                    op.examples.setdefault("5xx", _example(interaction))
                for check in checks.get(case_id, []):
                    if check.get("status") != "failure":
                        continue
                    failure = (check.get("failure_info") or {}).get("failure") or {}
                    key = f"{check['name']}: {failure.get('title', '')}".rstrip(": ")
                    op.failures[key] += 1
                    op.examples.setdefault(key, _example(interaction) + (
                        f"\n  {failure['message'][:EXAMPLE_CHARS]}" if failure.get("message") else ""))


def summarise(paths: list[Path]) -> Summary:
    summary = Summary()
    for path in paths:
        read_events(path, summary)
    return summary


if __name__ == "__main__":  # python -m tests.webapp.fuzz_summary events.ndjson [...]: the table for saved reports
    import sys

    print(summarise([Path(arg) for arg in sys.argv[1:]]).render(), end="")
