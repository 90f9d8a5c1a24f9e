"""One real GRPO step end to end on a GPU, for `python -m bench.gpu_check --step` (part of `make gpu-check`):
where the time goes.

The demo's workload (2048, 4 groups of 8, held-out evaluation off) on a random Qwen2.5-0.5B-shaped model
(training/fixtures/synthetic_model.py) with the local server on CUDA (vLLM cannot travel to a lent machine), scored by the
real judge scorer over HTTP against the judge double (`python -m tests.judge_double --latency S`, its own process;
cache off, so every group waits on it; the reward is the judge's, `combine: judge`: a random model's games all
score alike, so the game's reward alone would leave nothing to train). Pipelined, as a judged run is by default.
Two steps: the first warms up (first CUDA kernels, the server's first adapter), the second is reported from the
loop's own step metrics: rollouts (sampling until the step's last group is scored), of which the judge's covered
seconds, training, adapter save and load, the whole step. The GPU's idle share is what NVML reports
(torch.cuda.utilization, polled every 100 ms; nvidia-smi every 250 ms where pynvml is missing) over the second
step: the share of polls at 0 %. Without either it is left out, and the table says so. Without litellm (the judge
scorer's client) the step runs on the game's reward alone, and says so.
`quick=True` runs the same path on a CPU with the tiny model (a smoke test; its numbers mean nothing).
"""
from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
JUDGE_LATENCY_S = 1.0  # a hosted judge's typical answer time for one group


def _nvml_reading() -> int:
    import torch

    return int(torch.cuda.utilization())


def _smi_reading() -> int:
    done = subprocess.run(["nvidia-smi", "--query-gpu=utilization.gpu", "--format=csv,noheader,nounits", "-i", "0"],
                          capture_output=True, text=True, timeout=5, check=True)
    return int(done.stdout.split()[0])


def utilisation_reader() -> tuple[Any, str] | None:
    """How this machine reports the GPU's utilisation: NVML through torch (pynvml), else nvidia-smi; None
    without CUDA or either."""
    import torch

    if not torch.cuda.is_available():
        return None
    for read, source in ((_nvml_reading, "NVML utilisation"), (_smi_reading, "nvidia-smi utilisation")):
        try:
            read()
        except Exception:  # noqa: BLE001 - not on this machine: try the next way, or leave the share out
            continue
        return read, source
    return None


class UtilisationPoller:
    """Polls the GPU's utilisation in a thread; `idle_share(since)` is the share of the polls after `since`
    (time.monotonic) that saw 0 %."""

    def __init__(self, read: Any, interval_s: float = 0.1) -> None:
        self.read, self.interval_s, self.samples = read, interval_s, []  # samples: (monotonic time, percent)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._poll, daemon=True)

    def _poll(self) -> None:
        while not self._stop.wait(self.interval_s):
            self.samples.append((time.monotonic(), self.read()))

    def __enter__(self) -> UtilisationPoller:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()

    def idle_share(self, since: float) -> float | None:
        window = [p for t, p in self.samples if t >= since]
        return sum(1 for p in window if p == 0) / len(window) if window else None


def step_config(model_dir: Path, out: Path, *, quick: bool, judge: dict[str, Any] | None) -> Any:
    from training.config import RunConfig
    from training.fixtures.demo import demo_config

    data = demo_config(out_dir=out, steps=2, model_dir=model_dir, name="gpu-step").model_dump()
    data.update(evaluation={}, judge=judge, device="cpu" if quick else "cuda")
    data["sampling"]["max_tokens"] = 12 if quick else 64  # the demo's moves are short; 64 gives the GPU work
    if quick:  # a smoke test: the same path, less of it
        data["grpo"].update(groups_per_step=2, group_size=4)
        data["environment"]["options"]["max_turns"] = 2
    data["server"]["kind"] = "local"
    return RunConfig.model_validate(data)


def _judge(latency: float) -> tuple[subprocess.Popen[str] | None, dict[str, Any] | None, str]:
    if importlib.util.find_spec("litellm") is None:  # the judge scorer's client
        return None, None, "not run: litellm is not installed here; the reward is the game's alone"
    proc = subprocess.Popen([sys.executable, "-m", "tests.judge_double", "--latency", str(latency)],
                            stdout=subprocess.PIPE, text=True, cwd=ROOT)
    api_base = proc.stdout.readline().strip()  # type: ignore[union-attr]
    judge = {"judge_model": "openai/judge", "api_base": api_base, "cache": False, "combine": "judge",
             "concurrency": 4}
    return proc, judge, f"the judge double over HTTP, {latency:.1f} s a group"


def end_to_end_step(*, quick: bool = False) -> dict[str, Any]:
    """Two GRPO steps of the demo's workload; the second's stage times and the GPU's idle share."""
    for key, value in {"HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1", "TOKENIZERS_PARALLELISM": "false",
                       "LITELLM_LOCAL_MODEL_COST_MAP": "True"}.items():
        os.environ.setdefault(key, value)  # nothing reaches for the network
    from training import run
    from training.fixtures.synthetic_model import build_synthetic_model

    size = "tiny" if quick else "0.5b"
    proc, judge, judged = _judge(0.0 if quick else JUDGE_LATENCY_S)
    scorer = None
    if judge is not None:
        from studio.scoring import judge_scorer_from_config

        scorer = judge_scorer_from_config(judge, api_key="bench")
    reader = None if quick else utilisation_reader()
    poll = UtilisationPoller(reader[0], 0.1 if reader[1].startswith("NVML") else 0.25) if reader else None
    try:
        with tempfile.TemporaryDirectory(prefix="gpu-step-") as tmp:
            model_dir = build_synthetic_model(Path(tmp) / "model", size)
            config = step_config(model_dir, Path(tmp) / "run", quick=quick, judge=judge)
            marks: dict[str, float] = {}

            def sink(event: Any) -> None:
                if getattr(event, "step", None) == 1 and type(event).__name__ == "CheckpointSaved":
                    marks["step2"] = time.monotonic()  # step 1's adapter saved: step 2 is what follows

            if poll is not None:
                with poll:
                    history = run(config, scorer=scorer, sink=sink).history
            else:
                history = run(config, scorer=scorer, sink=sink).history
    finally:
        if proc is not None:
            proc.terminate()
            proc.wait(timeout=10)
    last = history[-1]
    idle = poll.idle_share(marks.get("step2", 0.0)) if poll is not None else None
    return {"model": size, "judge": judged, "step": last["step"],
            "rollouts_s": last["time_rollout_s"], "judge_s": last["time_scoring_s"],
            "training_s": last["time_train_s"], "adapter_load_s": last["time_load_s"],
            "step_s": last["time_step_s"], "trained_sequences": last.get("trained_sequences", 0),
            # Why a step trained nothing, when it did not: groups skipped (no reward variance, or unscored) and
            # rollouts that failed.
            "skipped_groups": last.get("skipped_groups"), "rollout_errors": last.get("rollout_errors"),
            "gpu_idle_share": idle,
            "idle_source": f"{reader[1]} polled every {poll.interval_s * 1000:.0f} ms" if reader and poll
            else "not measured (no NVML, no nvidia-smi)"}


def step_table(step: dict[str, Any]) -> str:
    """The end-to-end step's stages as a markdown table."""
    idle = "n/a" if step["gpu_idle_share"] is None else f"{step['gpu_idle_share']:.0%}"
    return "\n".join([
        f"end-to-end GRPO step {step['step']} ({step['model']}, local server; judge: {step['judge']}; "
        f"idle share: {step['idle_source']})",
        "",
        "| rollouts (incl. judge) | judge covered | training (sequences) | adapter save + load | step (pipelined) "
        "| GPU idle |",
        "|---|---|---|---|---|---|",
        f"| {step['rollouts_s']:.1f} s | {step['judge_s']:.1f} s | {step['training_s']:.1f} s "
        f"({step['trained_sequences']}) | {step['adapter_load_s']:.1f} s | {step['step_s']:.1f} s | {idle} |"])
