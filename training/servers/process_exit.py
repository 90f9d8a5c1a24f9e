"""How an engine process ends once its work is done: `python -m training` and the web app's engine child.

Such a process runs torch on threads of its own (the in-process server's engine thread trains and samples). In
the interpreter's finalisation, the native libraries' exit handlers can run while such a thread is still being
torn down, and about once in twenty runs that aborted a process whose run had completed (SIGABRT, 'terminate
called without an active exception', no Python frame left), which reads as a crash to whoever started it. Ending
with os._exit, as multiprocessing ends its children, skips that finalisation: what the process wrote is flushed
first, and every file and child process it opened was closed by the code that opened it.
"""
from __future__ import annotations

import logging
import os
import sys
from typing import NoReturn


def end_process(code: int) -> NoReturn:
    logging.shutdown()
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError):  # closed, or its reader is gone
            pass
    os._exit(code)
