"""The metrics only a process knows: counted where they happen, read by /metrics of the same process. With
several web processes each counts its own (Prometheus adds them up across its scrape targets). Imports nothing of
the app, so any layer may count here."""
from __future__ import annotations

from prometheus_client import Counter

ENDPOINT_CALLS_REFUSED = Counter(
    "studio_endpoint_calls_refused", "Calls to a run's OpenAI-compatible endpoint or a project's served checkpoints "
    "refused with 429, by reason: in_flight (STUDIO_EXTERNAL_MAX_IN_FLIGHT calls waiting already) or rate "
    "(STUDIO_EXTERNAL_PER_MINUTE). Counted by this process.", ["reason"], registry=None)
