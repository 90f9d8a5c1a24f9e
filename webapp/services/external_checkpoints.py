"""Checkpoints a caller of a run's endpoint asks for by name (`model: "<run>@<step>"`) are loaded into the run's
inference server on first use and unloaded least recently used first beyond STUDIO_EXTERNAL_MAX_LOADED_CHECKPOINTS
(`/v1/unload_lora_adapter`, which vLLM and the local server both serve), so a caller cycling through a long
run's checkpoints cannot fill the server's memory. Which ones were used when is kept in the cache (Redis when
configured), per run (or project server, issue 37) and server; the step's own adapter is the engine's and never
unloaded here."""
from __future__ import annotations

import hashlib
import time

import httpx
from django.conf import settings
from django.core.cache import cache

KEEP_S = 7 * 24 * 3600


def _key(scope: str, base_url: str) -> str:
    return f"external-adapters:{scope}:{hashlib.sha256(base_url.encode()).hexdigest()[:16]}"


def checkpoint_used(*, scope: str, base_url: str, name: str, current: str) -> list[str]:
    """Marks `name` used now on the server at `base_url` (`scope`: `run:<id>` for a run's server, `project-server:
    <id>` for a project's); returns the names to unload (least recently used beyond the cap), oldest first.
    Synchronous: called from the endpoint's database step."""
    key = _key(scope, base_url)
    used: dict[str, float] = cache.get(key) or {}
    used[name] = time.time()
    used.pop(current, None)
    order = sorted(used, key=lambda n: used[n])
    evicted = order[:max(0, len(order) - settings.STUDIO_EXTERNAL_MAX_LOADED_CHECKPOINTS)]
    for old in evicted:
        del used[old]
    cache.set(key, used, timeout=KEEP_S)
    return evicted


def checkpoints_loaded(*, scope: str, base_url: str) -> list[str]:
    """The checkpoints loaded on the server by name, least recently used first."""
    used: dict[str, float] = cache.get(_key(scope, base_url)) or {}
    return sorted(used, key=lambda n: used[n])


async def checkpoint_served(*, http: httpx.AsyncClient, base_url: str, name: str, path: str,
                            evicted: list[str], headers: dict[str, str]) -> None:
    """Unloads `evicted`, then loads `name` from `path` unless the server lists it already. Errors are left to the
    forwarded request, whose answer says what is wrong (a 404 from the server for an adapter it does not have)."""
    for old in evicted:
        try:
            await http.post(f"{base_url}/unload_lora_adapter", json={"lora_name": old}, headers=headers)
        except httpx.HTTPError:
            pass  # gone with a restarted server, or never loaded: nothing to free
    try:
        listed = await http.get(f"{base_url}/models", headers=headers)
        if listed.status_code == 200 and name in {m.get("id") for m in listed.json().get("data") or []
                                                  if isinstance(m, dict)}:
            return
        await http.post(f"{base_url}/load_lora_adapter", json={"lora_name": name, "lora_path": path}, headers=headers)
    except (httpx.HTTPError, ValueError, AttributeError):
        return
