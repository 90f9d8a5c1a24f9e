"""Checks the health checks of docker/compose.yml as Compose resolved it (`config` output on stdin): every service
of the profile has one, and every service waits for what it depends on to be healthy. Used by `make
compose-check` and tests/webapp/test_compose.py.

    docker compose -f docker/compose.yml --profile gpu config | python docker/compose_health.py gpu
"""
from __future__ import annotations

import sys

import yaml


def health_problems(config: dict, profile: str) -> list[str]:
    problems = []
    # some Compose versions list every profile's services in `config`: the profile's are those it names
    services = {name: service for name, service in (config.get("services") or {}).items()
                if profile in service.get("profiles", [profile])}
    for name, service in sorted(services.items()):
        check = service.get("healthcheck") or {}
        if check.get("disable") or not check.get("test") or check["test"] == ["NONE"]:
            problems.append(f"{name}: no health check")
        depends = service.get("depends_on") or {}
        if isinstance(depends, list):
            depends = {other: {} for other in depends}
        for other, how in sorted(depends.items()):
            if (how or {}).get("condition") != "service_healthy":
                problems.append(f"{name}: starts before {other} is healthy (depends_on condition: service_healthy)")
            elif other in services and not (services[other].get("healthcheck") or {}).get("test"):
                problems.append(f"{name}: waits for {other} to be healthy, which has no health check")
    return problems


def main(argv: list[str]) -> int:
    profile = argv[0] if argv else ""
    problems = health_problems(yaml.safe_load(sys.stdin), profile)
    for problem in problems:
        print(f"docker/compose.yml ({profile} profile): {problem}", file=sys.stderr)
    if not problems:
        print(f"docker/compose.yml: every service of the {profile} profile has a health check, and waits for "
              "what it depends on to be healthy")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
