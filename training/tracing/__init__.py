"""Trajectories as traces in a trace viewer (issue 49), beside the metric trackers of training/trackers.py.

`langfuse.py` is a tracker that training/trackers.py's background thread hands every event: each scored
trajectory becomes a Langfuse trace (its messages, tool calls as child observations, the judge's score and
explanation as a score), grouped per step (a session and a tag); a reward a person changed at review becomes a
`human_override` score. Imports only training.events and the `langfuse` SDK (lazily, on the tracker's thread).
"""
