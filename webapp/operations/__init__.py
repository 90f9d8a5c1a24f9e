"""Operating the deployment: is it alive and ready, and what is it doing (issue 49).

- middleware.py: the one seam. It answers /healthz, /readyz and /metrics before any other middleware, so a probe
  that reaches the process by its container address (not a name in ALLOWED_HOSTS) is not refused as a bad host.
- health.py: the readiness checks (database, Redis, channel layer, workers), JSON naming what is down.
- metrics.py: the Prometheus exposition; most values are read from the database and Redis at scrape time, so
  they are right whichever process served the scrape. counters.py holds the few that only a process knows.
- heartbeats.py: what Celery workers and beat record in Redis (presence, task outcomes) for the two above;
  celery_signals.py records it from inside the worker and beat processes; probe.py is beat's health check.
May import models, selectors and services' read helpers; nothing here writes a project's data.
"""
