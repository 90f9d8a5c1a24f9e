"""Reinforcement learning from scored groups: the loop (`loop`, read it top to bottom), a step's groups rolled out
and scored (`groups`, `group_client`, `pipeline`), GRPO's pure functions (`grpo`) and the LoRA trainer that applies
them (`trainer`), external rollouts as a second rollout source (`external`), what runs after each step (`checks`:
held-out `evaluation`, `monitors` over the `health` signals), a scored step kept across a park (`parking`), and the
metric trackers and traces (`trackers`, `langfuse`).
May import training's top modules (types, config, events) and its model, gpu, servers and environments packages;
of the SFT package only `sft.loop`, to which `loop.run` hands an SFT run. Never Django, the web app or judging.
"""
