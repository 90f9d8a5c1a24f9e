"""Reads of a run for its pages and the API: runs, steps, groups, events, chart, cost and settings.

Callers pass objects already fetched through `access` (membership checked).
"""
from __future__ import annotations

from typing import Any

from django.db.models import BooleanField, ExpressionWrapper, Prefetch, Q, QuerySet

from webapp.models import Project, Run, RunEvent, Step, Trajectory, TrajectoryGroup

def runs_for_project(*, project: Project, search: str = "") -> QuerySet[Run]:
    """For lists: a run's config JSON (every option, prompts, scenarios' settings) stays in the database;
    `judged` says whether the run scores with a judge, the one thing lists show from it. `search`: a part of
    the run's name, any case."""
    judged = Q(config__judge__isnull=False) & ~Q(config__judge=None)
    runs = project.runs.filter(name__icontains=search.strip()) if search.strip() else project.runs
    return (runs.select_related("agent", "scenario_set").defer("config", "agent__environment_options")
            .annotate(judged=ExpressionWrapper(judged, output_field=BooleanField()))
            .order_by("-created_at", "-id"))


def run_events_summarized(*, run: Run) -> int:
    """How many progress events the engine left out over the run, its writer being ahead of this side's
    recording (webapp/execution/engine_child.py): the pages' rows come from the events it always keeps."""
    return sum(sum(int(v) for v in (e.payload.get("left_out") or {}).values())
               for e in RunEvent.objects.filter(run=run, kind="events_summarized").only("payload"))


def run_memory_plan(*, run: Run) -> dict[str, Any] | None:
    """How the run's vLLM and trainer share its GPUs, as the engine chose at its (latest) start (docs/gpu.md)."""
    event = RunEvent.objects.filter(run=run, kind="memory_planned").order_by("-seq").only("payload").first()
    return event.payload if event is not None else None


def run_events_after(*, run_id: int, after: int, limit: int = 5000) -> list[dict[str, Any]]:
    events = RunEvent.objects.filter(run_id=run_id, seq__gt=after).order_by("seq")[:limit]
    return [e.as_message() for e in events]


def run_steps(*, run: Run) -> QuerySet[Step]:
    return run.steps.order_by("index")


def run_recent_steps(*, run: Run, limit: int) -> list[Step]:
    """The newest `limit` steps, oldest first: the page's table stays bounded on a run of thousands of steps
    (the chart and the API have them all)."""
    return list(reversed(run.steps.order_by("-index")[:limit]))


def run_groups(*, run: Run, limit: int | None = 20, offset: int = 0, step: int | None = None,
               search: dict[str, Any] | None = None) -> QuerySet[TrajectoryGroup]:
    """Newest step first; each group with its trajectories ranked. Bounded: a page never loads a whole run.
    `search` (GroupSearchForm.cleaned_data) keeps groups with a trajectory that matches all of it."""
    qs = run.groups.order_by("-step_index", "index")
    if step is not None:
        qs = qs.filter(step_index=step)
    if search:
        qs = qs.filter(pk__in=_matching_trajectories(run=run, **search).values("group_id"))
    qs = qs.prefetch_related(Prefetch("trajectories", queryset=Trajectory.objects.order_by("rank", "index")
                                      .defer("tools", "metadata")))
    return qs[offset: offset + limit] if limit is not None else qs[offset:]


def run_group_count(*, run: Run, search: dict[str, Any] | None = None) -> int:
    if search:
        return run.groups.filter(pk__in=_matching_trajectories(run=run, **search).values("group_id")).count()
    return run.groups.count()


def _matching_trajectories(*, run: Run, q: str = "", step: int | None = None, labelled: str = "",
                           min_score: float | None = None, max_score: float | None = None) -> QuerySet[Trajectory]:
    """Text (answer, conversation, explanation or scenario id), step, human label, effective reward range."""
    from django.db.models import F, TextField
    from django.db.models.functions import Cast, Coalesce

    qs = Trajectory.objects.filter(group__run=run).annotate(effective=Coalesce("override_score", F("reward")))
    if q:
        qs = qs.annotate(text=Cast("messages", TextField())).filter(
            Q(text__icontains=q) | Q(explanation__icontains=q) | Q(group__scenario_external_id__icontains=q))
    if step is not None:
        qs = qs.filter(group__step_index=step)
    if labelled == "yes":
        qs = qs.filter(override_score__isnull=False)
    elif labelled == "no":
        qs = qs.filter(override_score__isnull=True)
    if min_score is not None:
        qs = qs.filter(effective__gte=min_score)
    if max_score is not None:
        qs = qs.filter(effective__lte=max_score)
    return qs


def run_chart_data(*, run: Run) -> dict[str, Any]:
    """The reward curves so far, in the same shape the live stream appends to (see static/webapp/run.js)."""
    points = []
    for index, m in run_steps(run=run).values_list("index", "metrics"):
        m = m or {}
        points.append({"step": index, "reward_mean": m.get("reward_mean"), "reward_std": m.get("reward_std"),
                       "judge_mean": m.get("judge_mean"), "env_mean": m.get("env_mean"), "loss": m.get("loss")})
    criteria: dict[str, list[dict[str, Any]]] = {}
    for event in run.events.filter(kind="step_finished").order_by("seq").values_list("payload", flat=True):
        for name, value in (event.get("criteria_means") or {}).items():
            criteria.setdefault(name, []).append({"step": event["step"], "value": value})
    # An SFT run's held-out loss, step 0 (before training) included; a resumed step's newer value wins.
    held_out = {e["step"]: e.get("loss") for e in run.events.filter(kind="held_out_loss").order_by("seq")
                .values_list("payload", flat=True)}
    return {"kind": run.kind, "points": points, "criteria": criteria,
            "held_out": [{"step": step, "loss": loss} for step, loss in sorted(held_out.items())]}


def run_judge_cost(*, run: Run) -> dict[str, Any]:
    """Calls really sent and what they cost; cache hits (not sent, not paid) are counted apart.

    Prompt caching: `cacheable_share` is the share of the sent requests' tokens that is the run-constant prefix
    (locally counted, over the calls that have a count); `cached_share` the share of their prompt tokens the
    provider reported as served from its cache; `cost_usd` is what was billed (cache reads at the cached-token
    price, cache writes at the cache-write price) and `uncached_cost_usd` what the same calls would have cost at
    the full input price; `cache_write_tokens` the prompt tokens the provider reported writing to its cache."""
    rows = list(run.judge_calls.filter(cached=False).values_list(
        "cost_usd", "uncached_cost_usd", "prompt_tokens", "prefix_tokens", "counted_tokens", "cached_tokens",
        "cache_write_tokens"))
    known = [r[0] for r in rows if r[0] is not None]
    counted = [(r[3], r[4]) for r in rows if r[3] is not None and r[4]]
    prompt_tokens = sum(r[2] for r in rows)
    cached_tokens = sum(r[5] or 0 for r in rows)
    # Without the cache price only where every priced call has one: a partial sum would read as a saving.
    uncached = [r[1] for r in rows if r[0] is not None]
    return {"calls": len(rows), "cost_usd": sum(known) if known else None, "unpriced": len(rows) - len(known),
            "cache_hits": run.judge_calls.filter(cached=True).count(),
            "uncached_cost_usd": sum(uncached) if known and None not in uncached else None,  # type: ignore[arg-type]
            "cacheable_share": sum(p for p, _ in counted) / sum(c for _, c in counted) if counted else None,
            "cached_tokens": cached_tokens, "cache_write_tokens": sum(r[6] or 0 for r in rows),
            "cached_share": cached_tokens / prompt_tokens if prompt_tokens else None}


def run_fork_origin(*, run: Run) -> dict[str, Any] | None:
    """A fork's origin as people see it, {run, run_name, step}: never the checkpoint's path on the worker."""
    checkpoint = run.parent_checkpoint
    if checkpoint is None:
        return None
    return {"run": checkpoint.run_id, "run_name": checkpoint.run.name, "step": checkpoint.step_index}


def _fork_origin(run: Run) -> str | None:
    if (origin := run_fork_origin(run=run)) is not None:
        return f"run {origin['run_name']} (#{origin['run']}), step {origin['step']}"
    # Launched before forks went by id, with a checkpoint given by its path: the path is the worker's.
    return "a checkpoint named at launch (its path is not shown)" if (run.config or {}).get("init_checkpoint") \
        else None


def _scenario_split(config: dict[str, Any]) -> tuple[list[str], list[str]]:
    """The ids the run trains on and those it holds out for evaluation, split as the engine splits them."""
    from training.monitoring.checks import split_for_run
    from training.config import parse_run_config
    from training.types import TrainingError
    from training.environments.scenarios import load_scenarios

    try:
        parsed = parse_run_config(config)
        train, held_out = split_for_run(parsed, load_scenarios(parsed))
    except TrainingError:  # a config the engine no longer reads: show its scenarios as stored
        return [str(s.get("id")) for s in config.get("scenarios") or []], []
    return [s.id for s in train], [s.id for s in held_out]


def _id_list(ids: list[str]) -> str:
    return f"{len(ids)}: " + ", ".join(ids[:10]) + (" …" if len(ids) > 10 else "")


def _sft_section(run: Run, c: dict[str, Any]) -> dict[str, Any]:
    sft = c.get("sft") or {}
    return {"title": "Teaching (SFT)", "rows": [
        ("Dataset", sft.get("dataset")), ("Epochs", sft.get("epochs")), ("Most steps", sft.get("max_steps")),
        ("Batch", f"{sft.get('batch_tokens')} tokens a step, packed into rows of at most "
                  f"{sft.get('micro_batch_tokens')}"),
        ("Learning rate", f"{sft.get('learning_rate')} peak, warm-up over {sft.get('warmup_ratio')} of the steps, "
                          f"{sft.get('schedule')} decay to {sft.get('min_lr_ratio')} × peak"),
        ("Held-out conversations", f"{sft.get('held_out_fraction')} of them, loss every {sft.get('eval_every')} steps"),
        ("Checkpoints", f"every {sft.get('save_every')} steps and the last"), ("Seed", c.get("seed")),
        ("Started from", c.get("init_checkpoint") and _fork_origin(run))]}


def run_settings(*, run: Run) -> list[dict[str, Any]]:
    """Every setting the run actually used, read from its frozen config (DESIGN §8 invariant 1): editing the
    agent, judge or rubric afterwards changes none of this. Sections of (label, value) rows."""
    c = run.config or {}
    grpo, sampling, lora, judge = c.get("grpo") or {}, c.get("sampling") or {}, c.get("lora") or {}, c.get("judge")
    env = c.get("environment") or {}
    scenarios, held_out = _scenario_split(c)
    sections = [
        {"title": "Model", "rows": [
            ("Agent", f"{run.agent.name} v{run.agent_version}"), ("Base model", c.get("base_model_name") or c.get("base_model")), ("System prompt", c.get("system_prompt") or "(none)"),
            ("Environment", env.get("kind")), ("Device", c.get("device")),
            # Which chat family renders the model's turns, and whether a reasoning model thinks (Qwen3).
            ("Chat", "; ".join([(c.get("chat") or {}).get("family") or "family from the model's template",
                                f"reasoning {(c.get('chat') or {}).get('reasoning', 'keep')}"])),
            ("Sampling", f"temperature {sampling.get('temperature')}, top_p {sampling.get('top_p')}, "
                         f"max_tokens {sampling.get('max_tokens')}"),
            ("LoRA", f"rank {lora.get('r')}, alpha {lora.get('alpha')}")]},
        {"title": "Training", "rows": [
            ("Steps", c.get("steps")), ("Learning rate", grpo.get("learning_rate")),
            ("Group size", grpo.get("group_size")), ("Groups per step", grpo.get("groups_per_step")),
            ("Seed", c.get("seed")), ("KL weight (beta)", grpo.get("beta")),
            ("Review gate", "on" if run.review_gate else "off"),
            ("Started from", _fork_origin(run))]},
        {"title": "Scenarios", "rows": [
            ("Scenario set", f"{run.scenario_set.name} (as at launch)" if run.scenario_set else "none"),
            ("Training scenarios", _id_list(scenarios)), ("Held-out scenarios", held_out and _id_list(held_out))]},
    ]
    if run.kind == "sft":  # what it teaches from and how, instead of GRPO's groups
        sections[1:] = [_sft_section(run, c), {"title": "Held-out scenarios", "rows": [
            ("Scenario set", f"{run.scenario_set.name} (as at launch)" if run.scenario_set else "none"),
            ("Win rate against the base on", held_out and _id_list(held_out) or "none (no validation scenarios)")]}]
    if judge:
        sections.append({"title": "Judge", "rows": [
            ("Judge model", judge.get("judge_model")), ("API base", judge.get("api_base") or "provider default"),
            ("Passes", judge.get("passes", 1)), ("Temperature", judge.get("temperature", 0)),
            ("Rubric version", str(run.rubric_version) if run.rubric_version else "default rubric"),
            ("Criteria", ", ".join(f"{x.get('name')} ×{x.get('weight')}" for x in judge.get("criteria") or [])
             or "one overall score")]})
    else:
        sections.append({"title": "Reward", "rows": [("Reward", "the environment's verifiable reward (no judge)")]})
    for section in sections:
        section["rows"] = [(k, v) for k, v in section["rows"] if v not in (None, "")]
    return sections
