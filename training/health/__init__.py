"""Health signals of an RL step: whether the step could teach the policy anything, read from what the step's
rollouts already carry (the server's sampled log-probs and finish reasons, the rewards, the groups' spread).

`signals.py` computes them; training/groups.py puts them in the step's metrics and training/monitors.py alerts
when they say learning has stalled. Pure Python: imports only training.types.
"""
