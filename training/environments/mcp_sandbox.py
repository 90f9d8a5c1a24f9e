"""How a stdio MCP server is run: `python -S training/environments/mcp_sandbox.py [limits] -- COMMAND ARGS...`.

Standard library only, run as a script without site-packages (-S), so it adds milliseconds to a server's start.

mcp_session.py starts every stdio server through this wrapper. It starts COMMAND as its child with
- the environment it was given, nothing else (mcp_session passes a scrubbed one: PATH, HOME, LANG and the
  catalogue entry's own variables; never a database URL, a secret or encryption key, a judge or header key);
- CPU-time (`--cpu-s`, RLIMIT_CPU), address-space (`--memory-mb`, RLIMIT_AS) and file-size limits, no core dumps;
- a wall-time limit (`--wall-s`): past it the server is killed and the wrapper says so on stderr;
- optionally another user (`$STUDIO_MCP_RUN_AS`: switched to directly when the wrapper runs as root, else
  through `sudo -n -u USER`; the images set it to an unprivileged user other than the web app's,
  docker/Dockerfile), who can read neither the app's files nor its processes' environments.
It stays the server's parent, so what the server finds as its parent's environment is this scrubbed one, and
when the server ends it writes one line to stderr, `studio-mcp-sandbox: exited with code N` (or `killed by
signal S`, `stopped after the wall-time limit`), which the session turns into a named error. The session starts
the wrapper in its own session (process group), and stops the whole group on every path.
"""
from __future__ import annotations

import argparse
import os
import pwd
import resource
import signal
import subprocess
import sys

MARK = "studio-mcp-sandbox:"
RUN_AS_ENV = "STUDIO_MCP_RUN_AS"


def _limits(cpu_s: int, memory_mb: int) -> None:
    resource.setrlimit(resource.RLIMIT_CPU, (cpu_s, cpu_s + 1))
    if memory_mb:
        resource.setrlimit(resource.RLIMIT_AS, (memory_mb << 20, memory_mb << 20))
    resource.setrlimit(resource.RLIMIT_FSIZE, (256 << 20, 256 << 20))
    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))


def _switch_user(name: str) -> None:
    """As root: become `name` (its groups cleared) before the server's program starts."""
    entry = pwd.getpwnam(name)
    os.setgroups([])
    os.setgid(entry.pw_gid)
    os.setuid(entry.pw_uid)


def launch(command: list[str], env: dict[str, str], run_as: str) -> tuple[list[str], dict[str, str], bool]:
    """(argv, environment, switch user in the child) for the server's program. As root the wrapper switches user
    itself; otherwise through `sudo -n -u USER` (a sudoers rule lets the app's user run programs as USER, and
    nothing else), with the environment passed by `env -i` since sudo resets it."""
    if not run_as:
        return command, env, False
    if os.geteuid() == 0:
        entry = pwd.getpwnam(run_as)
        return command, {**env, "HOME": entry.pw_dir, "USER": run_as, "LOGNAME": run_as}, True
    pairs = [f"{key}={value}" for key, value in env.items() if key != RUN_AS_ENV]
    return ["sudo", "-n", "-u", run_as, "--", "env", "-i", *pairs, *command], env, False


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m training.environments.mcp_sandbox")
    parser.add_argument("--cpu-s", type=int, default=600)
    parser.add_argument("--memory-mb", type=int, default=2048)
    parser.add_argument("--wall-s", type=float, default=3600.0)
    parser.add_argument("command", nargs=argparse.REMAINDER)
    ns = parser.parse_args(argv)
    command = ns.command[1:] if ns.command[:1] == ["--"] else ns.command
    if not command:
        parser.error("give the server's command after --")
    run_as = os.environ.get(RUN_AS_ENV, "").strip()
    try:
        argv, env, switch = launch(command, {k: v for k, v in os.environ.items() if k != RUN_AS_ENV}, run_as)
    except KeyError:
        print(f"{MARK} exited with code 126: {RUN_AS_ENV} names no user {run_as!r}", file=sys.stderr, flush=True)
        return 126

    def prepare() -> None:
        _limits(ns.cpu_s, ns.memory_mb)
        if switch:
            _switch_user(run_as)

    try:
        child = subprocess.Popen(argv, env=env, preexec_fn=prepare)
    except OSError as err:
        print(f"{MARK} exited with code 127: cannot run the MCP server command {command[0]!r}: "
              f"{err.strerror or err}", file=sys.stderr, flush=True)
        return 127
    for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
        signal.signal(sig, lambda number, _frame: child.send_signal(number))
    try:
        code = child.wait(timeout=ns.wall_s)
    except subprocess.TimeoutExpired:
        child.kill()
        child.wait()
        print(f"{MARK} stopped after the wall-time limit of {ns.wall_s:g} s", file=sys.stderr, flush=True)
        return 124
    if code < 0:
        name = signal.Signals(-code).name if -code in signal.Signals._value2member_map_ else str(-code)
        hint = " (past its CPU-time limit)" if -code in (signal.SIGXCPU, signal.SIGKILL) else ""
        print(f"{MARK} killed by signal {name}{hint}", file=sys.stderr, flush=True)
        return 128 - code
    print(f"{MARK} exited with code {code}", file=sys.stderr, flush=True)
    return code


if __name__ == "__main__":
    sys.exit(main())
