"""An example MCP server: an ART•E-style synthetic mailbox with search, read and answer tools.

Run it with `python -m training.environments.mailbox_server --transport stdio` (what the `mcp` environment's
stdio spec starts) or `--transport http --port 8765` (streamable HTTP at http://127.0.0.1:8765/mcp).
`--write-scenarios FILE` writes its scenarios (question, reference answer, source ids, train/held-out split)
as JSONL and exits. It ships inside the engine package so every worker that can train can also run it.
"""
