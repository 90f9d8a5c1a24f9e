"""Reads, mirroring `webapp.services`: `access` (membership-checked lookups), `runs`, `catalogue`,
`rewards` (what a trajectory is called and what reward it got), `review` and `evaluation`."""
