"""An on-demand held-out evaluation of one checkpoint (the run page's "evaluate now"): the engine's own CLI,
`python -m training evaluate`, in a child process with the run's engine environment; its evaluation record is
recorded on the run like the evaluations the loop sends."""
from __future__ import annotations

import json
import logging
import subprocess
import sys
from pathlib import Path

from django.conf import settings

from webapp.execution.runner import engine_env
from webapp.live.ingest import run_event_ingest
from webapp.models import Checkpoint

log = logging.getLogger(__name__)
TIMEOUT_S = 3600


def checkpoint_evaluate_execute(*, checkpoint_id: int) -> str:
    checkpoint = Checkpoint.objects.select_related("run__judge_config").get(pk=checkpoint_id)
    run, run_id = checkpoint.run, checkpoint.run_id
    out = Path(run.output_dir)
    out.mkdir(parents=True, exist_ok=True)
    config_path = out / f"evaluate-{checkpoint.step_index}.json"
    config_path.write_text(json.dumps(run.config))
    try:
        proc = subprocess.run(
            [sys.executable, "-m", "training", "evaluate", "--config", str(config_path),
             "--checkpoint", checkpoint.path], capture_output=True, text=True, env=engine_env(run),
            cwd=str(settings.BASE_DIR), timeout=TIMEOUT_S)
    except (subprocess.TimeoutExpired, ValueError) as err:
        return _failed(run_id, checkpoint.step_index, str(err))
    records = [json.loads(line) for line in proc.stdout.splitlines() if line.startswith('{"kind": "evaluation"')]
    if proc.returncode != 0 or not records:
        return _failed(run_id, checkpoint.step_index, failure_reason(proc.stderr, proc.returncode),
                       output=proc.stderr[-5000:])
    record = records[-1]
    metrics = {k: v for k, v in record.items() if k.startswith("eval_")}
    run_event_ingest(run_id=run_id, event={"kind": "evaluation", "step": checkpoint.step_index,
                                           "model": checkpoint.adapter_name, "baseline": "base",
                                           "metrics": metrics, "scenarios": [], "on_demand": True})
    return "done"


def failure_reason(stderr: str, returncode: int) -> str:
    """The one line the run page shows for a failed evaluation: the CLI's own `error: …` line (a TrainingError),
    else the output's last line (an uncaught exception's `Type: message`), else the exit code. The output's tail
    before it (progress bars, warnings, a traceback) goes to the worker's log: on the page it hid the reason."""
    lines = [line.strip() for line in stderr.splitlines() if line.strip()]
    said = [line.removeprefix("error: ") for line in lines if line.startswith("error: ")]
    return (said or lines or [f"exit code {returncode}"])[-1][:1000]


def _failed(run_id: int, step: int, error: str, output: str = "") -> str:
    log.warning("run %s: the evaluation of step %s failed: %s%s", run_id, step, error, output and f"\n{output}")
    run_event_ingest(run_id=run_id, event={"kind": "evaluation_failed", "step": step, "error": error})
    return "failed"
