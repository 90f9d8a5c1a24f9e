"""Merges one checkpoint into its base model on a worker (issue 37): the engine's CLI `python -m training
export-merged` in a child process (torch and peft stay out of this process), its progress lines on the export's
row, then the model card beside the weights. An entry point: the Celery task `checkpoint_export_task` (queue
`gpu`) or the embedded executor's `eval` pool."""
from __future__ import annotations

import json
import logging
import subprocess
import sys

from django.conf import settings
from django.utils import timezone

from webapp.execution.serving import serving_env
from webapp.models import ModelExport
from webapp.services.exports import export_dir, export_model_card
from webapp.storable import storable

log = logging.getLogger(__name__)
Status = ModelExport.Status
TIMEOUT_S = 3600


def _failed(export_id: int, error: str) -> str:
    ModelExport.objects.filter(pk=export_id).update(status=Status.FAILED, error=storable(error)[:5000],
                                                    finished_at=timezone.now())
    return Status.FAILED


def checkpoint_export_execute(*, export_id: int) -> str:
    if not ModelExport.objects.filter(pk=export_id, status=Status.QUEUED).update(status=Status.RUNNING,
                                                                                phase="starting"):
        return "skipped"
    export = ModelExport.objects.select_related("checkpoint__run__project", "checkpoint__run__scenario_set",
                                                "checkpoint__run__rubric_version__rubric").get(pk=export_id)
    checkpoint = export.checkpoint
    out = export_dir(checkpoint)
    command = [sys.executable, "-m", "training", "export-merged", "--base", str(checkpoint.run.config["base_model"]),
               "--adapter", checkpoint.path, "--out", str(out)]
    proc = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=serving_env(),
                            cwd=str(settings.BASE_DIR))
    assert proc.stdout is not None
    for line in proc.stdout:
        try:
            record = json.loads(line)
        except ValueError:
            continue
        if record.get("kind") == "export_progress":
            ModelExport.objects.filter(pk=export_id).update(phase=str(record.get("phase", ""))[:200],
                                                            progress=float(record.get("progress") or 0))
    stderr = proc.stderr.read() if proc.stderr else ""
    try:
        code = proc.wait(timeout=TIMEOUT_S)
    except subprocess.TimeoutExpired:
        proc.kill()
        return _failed(export_id, f"the merge took longer than {TIMEOUT_S} s")
    if code != 0:
        log.warning("export %s failed:\n%s", export_id, stderr[-5000:])
        lines = [line for line in stderr.splitlines() if line.strip()]
        said = [line.removeprefix("error: ") for line in lines if line.startswith("error: ")]
        return _failed(export_id, (said or lines or [f"exit code {code}"])[-1])
    (out / "README.md").write_text(export_model_card(checkpoint=checkpoint))
    ModelExport.objects.filter(pk=export_id).update(status=Status.DONE, path=str(out), progress=1.0, phase="done",
                                                    finished_at=timezone.now())
    return Status.DONE
