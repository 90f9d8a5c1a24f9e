"""A stand-in engine for the runner's side of external rollouts: per step it asks for one group
(`rollouts_wanted`), waits for it in the inbox the engine child fills from its stdin, records what it got in
`received.json` in the output directory, and finishes the step. Selected with
STUDIO_ENGINE=tests.webapp.external_engine:train; the real loop's side is tested in tests/training."""
from __future__ import annotations

import asyncio
import json
import time
from pathlib import Path

from training.config import RunConfig
from training.events import RolloutsClosed, RolloutsWanted, RunFinished, RunStarted, StepFinished

WAIT_S = 60.0


async def train(config: RunConfig, *, scorer=None, sink, control, inbox=None, review=None):
    out = Path(config.output_dir)
    out.mkdir(parents=True, exist_ok=True)
    sink(RunStarted(run_name=config.name, start_step=1, total_steps=config.steps, resumed=False,
                    checkpoint_path="", adapter_name=""))
    received = {}
    for step in range(1, config.steps + 1):
        scenario = config.scenarios[0]
        sink(RolloutsWanted(step=step, model=f"{config.name}@{step - 1}", base_url="http://127.0.0.1:9/v1",
                            timeout_s=WAIT_S, on_missing="fail", allow_unsampled=False,
                            group_size=config.grpo.group_size, system_prompt=config.system_prompt,
                            sampling={"max_tokens": 8},
                            groups=[{"group_index": 0, "scenario": {"id": scenario.id, "user_message":
                                                                    scenario.user_message, "context": None,
                                                                    "metadata": {}}}]))
        deadline = time.monotonic() + WAIT_S
        group = None
        while group is None and time.monotonic() < deadline and control.state() != "cancel":
            group = inbox.take(step, 0)
            await asyncio.sleep(0.05)
        sink(RolloutsClosed(step=step, received=[0] if group else [], missing=[] if group else [0]))
        if group is None:
            sink(RunFinished(status="cancelled", steps_done=step - 1))
            return
        received[step] = group
        (out / "received.json").write_text(json.dumps(received))
        sink(StepFinished(step=step, metrics={}))
    sink(RunFinished(status="completed", steps_done=config.steps))
