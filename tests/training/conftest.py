from __future__ import annotations

import pytest

MCP_FAULT_ROWS = pytest.StashKey[list]()


@pytest.fixture
def fault_table(request: pytest.FixtureRequest) -> list:
    """Rows (fault, outcome, what shows nothing was lost) that the terminal summary prints as a table."""
    return request.config.stash.setdefault(MCP_FAULT_ROWS, [])


def pytest_terminal_summary(terminalreporter, exitstatus, config) -> None:  # noqa: ARG001 - pytest's signature
    rows = config.stash.get(MCP_FAULT_ROWS, [])
    if rows:
        terminalreporter.write_sep("-", "MCP fault table (tests/training/test_mcp_faults.py)")
        widths = [max(len(r[i]) for r in [("fault", "outcome", "nothing lost"), *rows]) for i in range(3)]
        for row in [("fault", "outcome", "nothing lost"), *rows]:
            terminalreporter.write_line("  ".join(cell.ljust(w) for cell, w in zip(row, widths)))
