"""On-disk judge cache: one JSON file per request key, so a rerun of the same group never pays twice.

The key is the hash of everything that decides the reply: the model, the litellm params that change the
answer (not the API key, timeouts or retry settings), the messages (rubric, instructions and group content
are all in them) and the reply schema. Writes are atomic (temp file + rename), so concurrent runs sharing a
cache directory never read half a file.
"""
from __future__ import annotations

import json
import logging
import os
import tempfile
from pathlib import Path
from typing import Any

from judging.prompt import sha256

ENV_VAR = "RUBRIC_STUDIO_JUDGE_CACHE"
log = logging.getLogger("judging.cache")

# Params that change how a request is sent, not what the judge answers.
_NOT_IN_KEY = {"api_key", "timeout", "num_retries", "max_retries", "metadata", "extra_headers", "stream_timeout"}


def default_cache_dir() -> Path:
    if os.environ.get(ENV_VAR):
        return Path(os.environ[ENV_VAR])
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "rubric-studio" / "judge"


def request_key(model: str, params: dict[str, Any], messages: list[dict[str, Any]], schema: dict[str, Any]) -> str:
    kept = {k: v for k, v in params.items() if k not in _NOT_IN_KEY}
    return sha256({"model": model, "params": kept, "messages": messages, "schema": schema})


class JudgeCache:
    def __init__(self, directory: str | Path | None = None) -> None:
        self.directory = Path(directory) if directory else default_cache_dir()

    def _path(self, key: str) -> Path:
        return self.directory / key[:2] / f"{key}.json"

    def get(self, key: str) -> dict[str, Any] | None:
        try:
            return json.loads(self._path(key).read_text())
        except FileNotFoundError:
            return None
        except (OSError, json.JSONDecodeError):
            # A corrupt entry is treated as a miss and overwritten; the judge is asked again.
            return None

    def put(self, key: str, value: dict[str, Any]) -> None:
        # A cache that cannot be written (full disk, read-only home) must not throw away a reply that was
        # already paid for: warn loudly and carry on uncached.
        path = self._path(key)
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=".tmp-", suffix=".json")
        except OSError as err:
            log.warning("judge cache: cannot write under %s (%s); results are not being cached", self.directory, err)
            return
        try:
            with os.fdopen(fd, "w") as f:
                json.dump(value, f)
            os.replace(tmp, path)
        except OSError as err:
            Path(tmp).unlink(missing_ok=True)
            log.warning("judge cache: cannot write %s (%s); results are not being cached", path, err)
