"""Notifications (issue 49): people are told when a run needs them, by e-mail and by webhook. Start reading here.

    events.py    the seam: `run_event_notify`, called by webapp/live/ingest.py for every RunEvent it appends (the
                 one place run status changes are written); it decides whether the event tells anyone and records
                 one Notification with its Deliveries, sent once the transaction commits
    sending.py   one delivery attempt (`notification_deliver`): the e-mail, or the signed webhook POST through the
                 egress policy's pinned client; retried with backoff by the Celery task (webapp/tasks.py) or, on
                 the embedded default, by a thread of the in-process executor
    services.py  what people change: their preferences, a project's webhooks (editors; egress-checked on save)
    views.py     the project's Notifications page (preferences for every member, webhooks for editors)

Models: webapp/models/notifications.py. Receivers check the signature as docs/webapp.md "Notifications" says.
"""
