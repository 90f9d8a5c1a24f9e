"""Every write goes through a service named `<entity>_<action>(*, ...)` (DESIGN §7).

Services raise django.core.exceptions.ValidationError (field → messages) for bad input and PermissionDenied for
a role that may not act; both reach the page or the API as a clear error, with nothing written.
"""
