"""Experiment trackers (issue 37) on a real SFT run of the tiny model: W&B in offline mode and MLflow's file store
receive each step's metrics, the held-out loss, the checkpoints' names, the config and a link back, and the
files they write, read back here, hold what the run's own events say. A tracker that fails is reported as a
`tracker_failed` event and the run completes."""
from __future__ import annotations

import json
import struct
from pathlib import Path

import pytest

pytest.importorskip("torch")
wandb = pytest.importorskip("wandb")
pytest.importorskip("mlflow")

from tests.training.test_sft_loop import sft_config, write_games  # noqa: E402
from training import run  # noqa: E402
from training.config import parse_run_config  # noqa: E402
from training.events import CheckpointSaved, HeldOutLoss, StepFinished, TrackerFailed  # noqa: E402

RUN_URL = "http://studio.example/runs/7/"


def wandb_records(run_dir: Path) -> list:
    """The records of a W&B offline run file (`run-<id>.wandb`): W&B's framing of LevelDB's log format (a 7-byte
    file header, 32 KiB blocks, each record in chunks with a 7-byte header: checksum, length, type), each record
    one of W&B's protobuf `Record`s."""
    from wandb.proto import wandb_internal_pb2 as pb

    (path,) = run_dir.glob("run-*.wandb")
    data, block, pos = path.read_bytes(), 32768, 7
    assert data[:4] == b":W&B"
    chunks: list[bytes] = []
    records = []
    while pos + 7 <= len(data):
        if block - pos % block < 7:  # a block's tail too short for a header is padding
            pos += block - pos % block
            continue
        _, length, kind = struct.unpack("<IHB", data[pos:pos + 7])
        chunk, pos = data[pos + 7:pos + 7 + length], pos + 7 + length
        if kind == 0:
            continue
        chunks = [chunk] if kind in (1, 2) else chunks + [chunk]
        if kind in (1, 4):  # full, or the last of several
            record = pb.Record()
            record.ParseFromString(b"".join(chunks))
            records.append(record)
    return records


def _key(item) -> str:
    return item.key or "/".join(item.nested_key)  # W&B writes either form


def wandb_history(run_dir: Path) -> dict[int, dict]:
    rows: dict[int, dict] = {}
    for record in wandb_records(run_dir):
        if record.WhichOneof("record_type") == "history":
            row = {_key(item): json.loads(item.value_json) for item in record.history.item}
            rows.setdefault(record.history.step.num, {}).update(row)
    return rows


def wandb_summary(run_dir: Path) -> dict:
    summary: dict = {}
    for record in wandb_records(run_dir):
        if record.WhichOneof("record_type") == "summary":
            summary.update({_key(item): json.loads(item.value_json) for item in record.summary.update})
    return summary


def mlflow_run_dir(root: Path) -> Path:
    (meta,) = [p for p in root.glob("*/*/meta.yaml") if p.parent.parent.name != ".trash"]
    return meta.parent


def mlflow_metric(run_dir: Path, name: str) -> dict[int, float]:
    """MLflow's file store: one line per value, `timestamp value step`."""
    lines = (run_dir / "metrics" / name).read_text().split("\n")
    return {int(step): float(value) for _, value, step in (line.split() for line in lines if line.strip())}


def tracked_config(model_dir: Path, tmp_path: Path, mlflow_uri: str) -> dict:
    data = write_games(tmp_path / "games.jsonl", 16, seed=5)
    config = sft_config(model_dir, tmp_path / "out", data, save_every=2)
    config["trackers"] = {"wandb": {"project": "studio-tests", "mode": "offline", "dir": str(tmp_path / "wb")},
                          "mlflow": {"tracking_uri": mlflow_uri, "experiment": "tests"},
                          "run_id": "rs-7", "run_url": RUN_URL}
    return config


def test_a_run_reports_its_steps_loss_and_checkpoints_to_wandb_offline_and_mlflows_file_store(
        tiny_model_dir, tmp_path, monkeypatch):
    monkeypatch.setenv("WANDB_SILENT", "true")
    config = parse_run_config(tracked_config(tiny_model_dir, tmp_path, (tmp_path / "mlruns").as_uri()))
    events: list = []
    summary = run(config, sink=events.append)
    assert summary.status == "completed"
    assert not [e for e in events if isinstance(e, TrackerFailed)]
    losses = {e.step: e.metrics["loss"] for e in events if isinstance(e, StepFinished)}
    rates = {e.step: e.metrics["learning_rate"] for e in events if isinstance(e, StepFinished)}
    held_out = {e.step: e.loss for e in events if isinstance(e, HeldOutLoss)}
    checkpoints = [e.adapter_name for e in events if isinstance(e, CheckpointSaved)]
    assert len(losses) >= 4 and len(checkpoints) >= 2 and 0 in held_out

    (wb_dir,) = (tmp_path / "wb" / "wandb").glob("offline-run-*-rs-7")
    history = wandb_history(wb_dir)
    assert {s: row["loss"] for s, row in history.items() if "loss" in row} == pytest.approx(losses)
    assert {s: row["learning_rate"] for s, row in history.items() if "learning_rate" in row} == pytest.approx(rates)
    assert {s: row["held_out_loss"] for s, row in history.items() if "held_out_loss" in row} == pytest.approx(held_out)
    assert [row["checkpoint"] for _, row in sorted(history.items()) if "checkpoint" in row] == checkpoints
    found = wandb_summary(wb_dir)
    assert found["checkpoints"] == checkpoints and found["status"] == "completed"
    (started,) = [r.run for r in wandb_records(wb_dir) if r.WhichOneof("record_type") == "run"]
    assert started.display_name == "teach" and started.project == "studio-tests" and started.notes == RUN_URL
    settings = {_key(item): json.loads(item.value_json) for item in started.config.update}
    assert settings["rubric_studio_url"] == RUN_URL and settings["sft"]["batch_tokens"] == 600

    ml_dir = mlflow_run_dir(tmp_path / "mlruns")
    assert mlflow_metric(ml_dir, "loss") == pytest.approx(losses)
    assert mlflow_metric(ml_dir, "held_out_loss") == pytest.approx(held_out)
    tags = {p.name: p.read_text() for p in (ml_dir / "tags").iterdir()}
    assert [tags[f"checkpoint.{s}"] for s in sorted(e.step for e in events if isinstance(e, CheckpointSaved))] \
        == checkpoints
    assert tags["rubric_studio.url"] == RUN_URL and tags["rubric_studio.status"] == "completed"
    assert tags["mlflow.runName"] == "teach"
    assert (ml_dir / "params" / "sft.learning_rate").read_text() == "0.005"
    assert "status: 3" in (ml_dir / "meta.yaml").read_text()  # FINISHED


def test_a_tracker_that_fails_is_an_alert_and_the_run_completes(tiny_model_dir, tmp_path, monkeypatch):
    monkeypatch.setenv("WANDB_SILENT", "true")
    blocked = tmp_path / "not-a-directory"
    blocked.write_text("a file where MLflow's store should be")
    config = parse_run_config(tracked_config(tiny_model_dir, tmp_path, blocked.as_uri()))
    events: list = []
    summary = run(config, sink=events.append)
    assert summary.status == "completed"
    (failed,) = [e for e in events if isinstance(e, TrackerFailed)]
    assert failed.tracker == "mlflow" and failed.error
    (wb_dir,) = (tmp_path / "wb" / "wandb").glob("offline-run-*")  # the other tracker went on
    assert {s for s, row in wandb_history(wb_dir).items() if "loss" in row} == \
        {e.step for e in events if isinstance(e, StepFinished)}


def test_tracker_settings_are_checked_at_the_edge(tiny_model_dir, tmp_path):
    from training.types import TrainingError

    base = tracked_config(tiny_model_dir, tmp_path, (tmp_path / "mlruns").as_uri())
    for bad, named in (({"wandb": {"project": "p", "mode": "sometimes"}}, "trackers.wandb.mode"),
                       ({"mlflow": {"experiment": "x"}}, "trackers.mlflow.tracking_uri"),
                       ({"run_id": "../../etc"}, "trackers.run_id"),
                       ({"neptune": {}}, "trackers.neptune")):
        with pytest.raises(TrainingError) as err:
            parse_run_config({**base, "trackers": bad})
        assert named in str(err.value)


def test_a_tracker_whose_server_never_answers_does_not_hold_the_run_back(tiny_model_dir, tmp_path, monkeypatch):
    """MLflow pointed at a server that accepts connections and never answers: the run trains every step and ends
    (after the trackers' flush time) while that server has not answered a single request."""
    import socket
    import threading

    monkeypatch.setenv("WANDB_SILENT", "true")
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(16)
    held: list[socket.socket] = []

    def accept() -> None:
        while True:
            try:
                connection, _ = listener.accept()
            except OSError:
                return
            held.append(connection)  # read nothing, answer nothing

    threading.Thread(target=accept, daemon=True).start()
    body = tracked_config(tiny_model_dir, tmp_path, f"http://127.0.0.1:{listener.getsockname()[1]}")
    body["trackers"]["flush_timeout_s"] = 1.0
    events: list = []
    try:
        summary = run(parse_run_config(body), sink=events.append)
        assert summary.status == "completed"
        assert held, "the tracker never reached its server"  # it is waiting there, unanswered
        steps = [e.step for e in events if isinstance(e, StepFinished)]
        assert steps == list(range(1, summary.steps_done + 1)) and len(steps) >= 4
    finally:
        listener.close()
        for connection in held:
            connection.close()
