"""Parsing an uploaded CSV / JSONL scenario file into validated rows, reporting every bad row by number.

Either every row is valid and all are imported in one transaction, or nothing is: a half-imported set would
train on a different task than the user thinks.
"""
from __future__ import annotations

import csv
import io
import json
from dataclasses import dataclass, field
from typing import Any

from django.conf import settings

from webapp.models.catalogue import MESSAGE_MAX, Scenario
from webapp.storable import holds_nul

COLUMNS = ("id", "user_message", "context", "reference", "split", "metadata")
ID_MAX = 200
# A cell a spreadsheet would evaluate as a formula when the scenarios are opened or exported there (CSV
# injection): refused, so no stored scenario can carry one. "- text" (a list item) is not a formula.
FORMULA_START = ("=", "+", "@", "\t", "\r")


@dataclass
class ParsedRow:
    external_id: str
    user_message: str
    context: str = ""
    reference: str = ""
    split: str = Scenario.Split.TRAIN
    metadata: dict[str, Any] = field(default_factory=dict)


@dataclass
class ParseResult:
    rows: list[ParsedRow]
    errors: list[str]  # "row 3: user_message is empty", or a whole-file error


def parse_scenario_file(*, name: str, data: bytes) -> ParseResult:
    limit = settings.STUDIO_MAX_UPLOAD_BYTES
    if len(data) > limit:
        return ParseResult([], [f"the file is larger than the limit of {limit:,} bytes"])
    try:
        text = data.decode("utf-8-sig")
    except UnicodeDecodeError as err:
        return ParseResult([], [f"the file is not UTF-8 text (byte {err.start} cannot be decoded)"])
    lowered = name.lower()
    if lowered.endswith(".csv"):
        raw_rows, errors = _csv_rows(text)
    elif lowered.endswith((".jsonl", ".ndjson", ".json")):
        raw_rows, errors = _jsonl_rows(text)
    else:
        return ParseResult([], [f"{name!r}: upload a .csv or .jsonl file"])
    if errors:
        return ParseResult([], errors)
    if not raw_rows:
        return ParseResult([], ["the file holds no scenarios"])
    if len(raw_rows) > settings.STUDIO_MAX_UPLOAD_ROWS:
        return ParseResult([], [f"the file holds {len(raw_rows):,} rows; the limit is {settings.STUDIO_MAX_UPLOAD_ROWS:,}"])
    rows: list[ParsedRow] = []
    seen: dict[str, int] = {}
    for number, raw in raw_rows:
        row, problems = _validate(raw, default_id=f"row-{number}")
        if row is not None and row.external_id in seen:
            problems.append(f"id {row.external_id!r} repeats row {seen[row.external_id]}")
        if problems:
            errors.extend(f"row {number}: {p}" for p in problems)
            continue
        assert row is not None
        seen[row.external_id] = number
        rows.append(row)
    return ParseResult([] if errors else rows, errors)


def _csv_rows(text: str) -> tuple[list[tuple[int, dict[str, Any]]], list[str]]:
    reader = csv.DictReader(io.StringIO(text, newline=""))
    header = reader.fieldnames or []
    unknown = [h for h in header if h not in COLUMNS]
    if "user_message" not in header:
        return [], [f"the header must name a user_message column (columns allowed: {', '.join(COLUMNS)})"]
    if unknown:
        return [], [f"unknown column(s) {', '.join(map(repr, unknown))}; allowed: {', '.join(COLUMNS)}"]
    rows = []
    try:
        for raw in reader:
            if None in raw:
                return [], [f"row {reader.line_num}: more cells than header columns"]
            if not any((v or "").strip() for v in raw.values()):
                continue
            rows.append((reader.line_num, dict(raw)))
    except csv.Error as err:
        return [], [f"line {reader.line_num}: not valid CSV ({err})"]
    return rows, []


def _jsonl_rows(text: str) -> tuple[list[tuple[int, dict[str, Any]]], list[str]]:
    rows, errors = [], []
    for number, line in enumerate(text.splitlines(), start=1):
        if not line.strip():
            continue
        try:
            value = json.loads(line)
        except json.JSONDecodeError as err:
            errors.append(f"row {number}: not valid JSON ({err.msg} at column {err.colno})")
            continue
        if not isinstance(value, dict):
            errors.append(f"row {number}: each line must be a JSON object")
            continue
        unknown = [k for k in value if k not in COLUMNS]
        if unknown:
            errors.append(f"row {number}: unknown key(s) {', '.join(map(repr, unknown))}")
            continue
        rows.append((number, value))
    return rows, errors


def _validate(raw: dict[str, Any], *, default_id: str) -> tuple[ParsedRow | None, list[str]]:
    problems: list[str] = []
    texts: dict[str, str] = {}
    for key in ("id", "user_message", "context", "reference", "split"):
        value = raw.get(key)
        if value is None:
            value = ""
        if isinstance(value, (int, float)) and key == "id":
            value = str(value)
        if not isinstance(value, str):
            problems.append(f"{key} must be text")
            continue
        texts[key] = value.strip() if key in ("id", "split") else value
    if problems:
        return None, problems
    if not texts["user_message"].strip():
        problems.append("user_message is empty")
    for key, value in texts.items():
        if value.startswith(FORMULA_START) or (value.startswith("-") and value[1:2] not in ("", " ")):
            problems.append(f"{key} starts with {value[:1]!r}, which spreadsheets run as a formula (CSV injection); "
                            "remove it or put an apostrophe before it")
    for key in ("user_message", "context", "reference"):
        if len(texts[key]) > MESSAGE_MAX:
            problems.append(f"{key} is {len(texts[key]):,} characters; the limit is {MESSAGE_MAX:,}")
    external_id = texts["id"] or default_id
    if len(external_id) > ID_MAX:
        problems.append(f"id is longer than {ID_MAX} characters")
    split = texts["split"] or Scenario.Split.TRAIN
    if split not in Scenario.Split.values:
        problems.append(f"split {split!r} must be one of {', '.join(Scenario.Split.values)}")
    metadata = raw.get("metadata") or {}
    if isinstance(metadata, str):
        try:
            metadata = json.loads(metadata) if metadata.strip() else {}
        except json.JSONDecodeError:
            problems.append("metadata must be a JSON object")
            metadata = {}
    if not isinstance(metadata, dict):
        problems.append("metadata must be a JSON object")
    elif holds_nul([texts, metadata]):  # refused as the forms refuse it (webapp.storable)
        problems.append("holds a null character (U+0000), which a scenario's text cannot; remove it")
    if problems:
        return None, problems
    return ParsedRow(external_id, texts["user_message"], texts["context"], texts["reference"], split, metadata), []
