"""`python -m training.environments.mailbox_server --transport stdio|http [--port N] [--seed S]`."""
from __future__ import annotations

import argparse
import json
import sys

from training.environments.mailbox_server.mailbox import generate, scenario_records
from training.environments.mailbox_server.server import build_server


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m training.environments.mailbox_server", description=__doc__)
    parser.add_argument("--transport", choices=["stdio", "http"], default="stdio")
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=8765, help="http: serves at http://HOST:PORT/mcp")
    parser.add_argument("--seed", type=int, default=0, help="The mailbox and its scenarios follow from it.")
    parser.add_argument("--count", type=int, default=300, help="Emails in the mailbox.")
    parser.add_argument("--write-scenarios", metavar="FILE", help="Write the scenarios as JSONL and exit.")
    args = parser.parse_args(argv)
    if args.write_scenarios:
        _, scenarios = generate(args.seed, args.count)
        with open(args.write_scenarios, "w") as f:
            for record in scenario_records(scenarios):
                f.write(json.dumps(record) + "\n")
        print(f"wrote {len(scenarios)} scenarios to {args.write_scenarios}", file=sys.stderr)
        return
    server = build_server(seed=args.seed, count=args.count)
    if args.transport == "stdio":
        server.run("stdio")
    else:
        server.run("streamable-http", host=args.host, port=args.port)


if __name__ == "__main__":
    main()
