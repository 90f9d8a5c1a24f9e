"""Watching a run of any kind: the held-out evaluation against the base model (`evaluation`), the per-step health
signals (`health`) and the monitors that alert on them (`monitors`), the after-step checks that run both
(`checks`), and the experiment trackers a run's events also go to (`trackers`, with Langfuse traces in `langfuse`).
May import training's top modules (types, config, events) and its model, servers and environments packages;
never a run kind (rl, sft), the fixtures, Django, the web app or judging.
"""
