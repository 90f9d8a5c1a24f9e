"""Reinforcement learning from scored groups: the GRPO run kind's loop (`loop.train_grpo`, read it top to bottom),
a step's groups rolled out and scored (`groups`, `group_client`, `pipeline`), GRPO's pure functions (`grpo`) and the
GRPO step on the shared adapter trainer (`trainer`), external rollouts as a second rollout source (`external`), and
a scored step kept across a park (`parking`). What watches a run (evaluation, monitors, checks, trackers) is in
training/monitoring; the entry that hands a run to this loop is `training.train`.
May import training's top modules (types, config, events) and its model, monitoring, servers and environments
packages. Never the SFT package, Django, the web app or judging.
"""
