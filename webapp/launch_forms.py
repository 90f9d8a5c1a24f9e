"""The launch form: a run's kind, agent, data, judge and settings; input parsing and field-level checks only (the
launch service saves and may add errors). Split from forms.py, which holds the other forms and the shared fields."""
from __future__ import annotations

import uuid
from typing import Any

from django import forms
from django.conf import settings

from webapp.forms import OVERRIDES_HELP, RunOverridesField
from webapp.model_catalogue import model_reasons
from webapp.models import RubricVersion
from webapp.selectors.catalogue import agent_trains_on_own_reward
from webapp.services import run_config as defaults
from webapp.services.trackers import TRACKERS, run_trackers_chosen, trackers_available


def _for(kind: str, widget: forms.Widget) -> forms.Widget:
    """Marks a launch field as one kind's (static/webapp/launch.js shows only the chosen kind's)."""
    widget.attrs["data-kind"] = kind
    return widget


class LaunchForm(forms.Form):
    kind = forms.ChoiceField(choices=[("grpo", "Reinforce (GRPO): roll out, score against the rubric, sharpen"),
                                      ("sft", "Teach (SFT): learn from a dataset's conversations")],
                             initial="grpo", widget=forms.RadioSelect, label="What the run does",
                             required=False)  # a form (or script) that does not say reinforces, as before
    name = forms.CharField(max_length=100)
    agent = forms.ModelChoiceField(queryset=None)  # type: ignore[arg-type]
    scenario_set = forms.ModelChoiceField(queryset=None, required=False,  # type: ignore[arg-type]
                                          help_text="Reinforce: the scenarios the run rolls out. Teach: optional; "
                                                    "its validation scenarios measure the held-out win rate against "
                                                    "the base model (none: no win rate).")
    dataset = forms.ModelChoiceField(queryset=None, required=False,  # type: ignore[arg-type]
                                     widget=_for("sft", forms.Select()),
                                     help_text="Its latest version, frozen into the run.")
    rubric = forms.ModelChoiceField(queryset=None, required=False,  # type: ignore[arg-type]
                                    help_text="Needs a judge.")
    rubric_version = forms.ModelChoiceField(queryset=None, required=False,  # type: ignore[arg-type]
                                            label="Rubric version", empty_label="the latest version",
                                            help_text="Default: the rubric's latest version, frozen into the run.")
    judge_config = forms.ModelChoiceField(queryset=None, required=False, label="Judge",  # type: ignore[arg-type]
                                          help_text="None: train on the environment's own reward (chat needs a judge; an "
                                                    "agent in your own code: the rewards your code sends).")
    steps = forms.IntegerField(min_value=1, max_value=100000, initial=defaults.DEFAULT_STEPS)
    group_size = forms.IntegerField(min_value=2, max_value=256, initial=defaults.DEFAULT_GROUP_SIZE,
                                    help_text="Trajectories per scenario that the judge ranks together.")
    groups_per_step = forms.IntegerField(min_value=1, max_value=1024, initial=defaults.DEFAULT_GROUPS_PER_STEP)
    learning_rate = forms.FloatField(min_value=1e-9, max_value=1.0, initial=defaults.DEFAULT_LEARNING_RATE)
    epochs = forms.IntegerField(min_value=1, max_value=1000, initial=3, required=False,
                                widget=_for("sft", forms.NumberInput()), help_text="Passes over the conversations.")
    batch_tokens = forms.IntegerField(min_value=16, max_value=1_000_000, initial=4096, required=False,
                                      widget=_for("sft", forms.NumberInput()), label="Tokens per step",
                                      help_text="The batch, by tokens (conversations are packed, no padding).")
    micro_batch_tokens = forms.IntegerField(min_value=16, max_value=1_000_000, initial=2048, required=False,
                                            widget=_for("sft", forms.NumberInput()), label="Tokens per forward pass",
                                            help_text="Bounds memory; a longer conversation is refused by number.")
    sft_learning_rate = forms.FloatField(min_value=1e-9, max_value=1.0, initial=2e-4, required=False,
                                         widget=_for("sft", forms.NumberInput(attrs={"step": "any"})),
                                         label="Peak learning rate")
    warmup_ratio = forms.FloatField(min_value=0.0, max_value=0.5, initial=0.05, required=False,
                                    widget=_for("sft", forms.NumberInput(attrs={"step": "any"})),
                                    help_text="Share of the steps the learning rate rises over.")
    schedule = forms.ChoiceField(choices=[("cosine", "cosine"), ("linear", "linear"), ("constant", "constant")],
                                 initial="cosine", required=False, widget=_for("sft", forms.Select()),
                                 label="Decay after warm-up")
    held_out_fraction = forms.FloatField(min_value=0.0, max_value=0.9, initial=0.1, required=False,
                                         widget=_for("sft", forms.NumberInput(attrs={"step": "any"})),
                                         label="Held-out conversations",
                                         help_text="Share kept out of training; their loss is the held-out curve.")
    seed = forms.IntegerField(initial=0, min_value=0, max_value=2**31 - 1)
    reasoning = forms.ChoiceField(
        choices=[("keep", "Think: each turn's <think> block is sampled, trained and kept in later turns"),
                 ("drop", "Don't think: the model's non-thinking mode, the answer alone trains")],
        initial="keep", required=False, label="Reasoning",
        help_text="For agents on a Qwen3-family model only (their chat has a reasoning block); the run page says "
                  "which was chosen.")
    keep_checkpoints = forms.IntegerField(
        min_value=0, max_value=100000, required=False, label="Checkpoints kept",
        help_text="After the run ends: the last this many steps' adapters, with the best by held-out win rate and any "
                  "served, forked from or exported; the others are deleted. 0 keeps every one; empty: the site's default.")
    overrides = RunOverridesField(required=False, label="Advanced (JSON)", help_text=OVERRIDES_HELP)
    review_gate = forms.BooleanField(required=False, label="Review gate",
                                     help_text="Wait for a reviewer's approval after each step's scoring; "
                                               "the step trains on the reviewed scores.")
    trackers = forms.MultipleChoiceField(
        required=False, widget=forms.CheckboxSelectMultiple, label="Report to",
        help_text="Experiment trackers this site offers: each step's metrics, the evaluations, the checkpoints' names "
                  "and a link back to the run go there too.")
    # One per rendered form: Back and Launch again (or a double click) submits the same token, one run.
    launch_token = forms.CharField(required=False, max_length=64, widget=forms.HiddenInput())

    def __init__(self, *args: Any, project, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        if not self.is_bound:
            self.initial.setdefault("launch_token", uuid.uuid4().hex)
            self.initial.setdefault("keep_checkpoints", settings.STUDIO_CHECKPOINT_KEEP_LAST)
        offered = trackers_available()
        if offered:
            self.fields["trackers"].choices = [(name, TRACKERS[name]) for name in offered]
            last = project.runs.order_by("-id").only("config").first()
            if last is not None and not self.is_bound:  # a project keeps reporting where its last run did
                self.initial.setdefault("trackers", [t for t in run_trackers_chosen(config=last.config or {})
                                                     if t in offered])
        else:  # nothing to choose: no field
            del self.fields["trackers"]
        self.fields["agent"].queryset = project.agents.all()
        self.fields["scenario_set"].queryset = project.scenario_sets.all()
        self.fields["dataset"].queryset = project.datasets.filter(versions__isnull=False).distinct()
        # Only a reasoning model (Qwen3) has the choice: no such agent, no field; launch.js shows it for those only.
        self.reasoning_agents = {a.pk for a in project.agents.only("pk", "base_model") if model_reasons(a.base_model)}
        if self.reasoning_agents:
            self.fields["reasoning"].widget.attrs["data-agents"] = " ".join(map(str, sorted(self.reasoning_agents)))
        else:
            del self.fields["reasoning"]
        for name in ("steps", "group_size", "groups_per_step", "learning_rate", "review_gate"):
            self.fields[name].widget.attrs["data-kind"] = "grpo"
        self.fields["rubric"].queryset = project.rubrics.all()
        self.fields["rubric_version"].queryset = (RubricVersion.objects.filter(rubric__project=project)
                                                  .select_related("rubric").order_by("rubric__name", "-number"))
        self.fields["judge_config"].queryset = project.judge_configs.all()
        rubrics, judges = list(project.rubrics.all()[:2]), list(project.judge_configs.all()[:2])
        own_reward = agent_trains_on_own_reward(agent=self.initial.get("agent"))
        # Nothing to choose: chosen, unless the agent trains on its own reward (a game): a judge would blend in.
        if not self.is_bound and len(rubrics) == 1 and len(judges) == 1 and not own_reward:
            self.initial.setdefault("rubric", rubrics[0])
            self.initial.setdefault("judge_config", judges[0])

    def clean_kind(self) -> str:
        return self.cleaned_data.get("kind") or "grpo"

    def clean(self) -> dict[str, Any]:
        data = super().clean()
        version = data.get("rubric_version")
        if version is not None and data.get("rubric") not in (None, version.rubric):
            self.add_error("rubric_version", f"{version} is not a version of {data['rubric']}")
        elif version is not None:
            data["rubric"] = version.rubric
        if data.get("rubric") and not data.get("judge_config"):
            self.add_error("judge_config", "a rubric needs a judge to apply it")
        if data.get("kind") != "sft" and not data.get("scenario_set") and "scenario_set" not in self.errors:
            self.add_error("scenario_set", "choose the scenario set the run rolls out")
        if data.get("kind") == "sft":
            if not data.get("dataset"):
                self.add_error("dataset", "choose the dataset this run teaches from")
            if data.get("review_gate"):
                self.add_error("review_gate", "an SFT run scores nothing, so there is nothing to review")
        chat = (data.get("overrides") or {}).get("chat")
        in_json = chat.get("reasoning") if isinstance(chat, dict) else None
        agent = data.get("agent")
        if (in_json or data.get("reasoning")) == "drop" and agent is not None and agent.pk not in self.reasoning_agents:
            self.add_error("overrides" if in_json or "reasoning" not in self.fields else "reasoning",
                           f"{agent.name}'s base model, {agent.base_model}, is not a Qwen3-family model: it has no "
                           "reasoning to drop (only a reasoning model's chat has a <think> block)")
        return data

    SFT_FIELDS = {"epochs": "epochs", "batch_tokens": "batch_tokens", "micro_batch_tokens": "micro_batch_tokens",
                  "sft_learning_rate": "learning_rate", "warmup_ratio": "warmup_ratio", "schedule": "schedule",
                  "held_out_fraction": "held_out_fraction"}

    def launch_arguments(self) -> dict[str, Any]:
        """The cleaned data as run_launch's keywords: the SFT fields as its `sft` options, the dataset as its
        latest version (frozen into the run)."""
        data = dict(self.cleaned_data)
        keep = data.pop("keep_checkpoints", None)
        if keep is not None:  # the run's retention.keep_last; the Advanced JSON's own value wins
            overrides = dict(data.get("overrides") or {})
            retention = overrides.get("retention", {})
            overrides["retention"] = {"keep_last": keep, **retention} if isinstance(retention, dict) else retention
            data["overrides"] = overrides
        reasoning = data.pop("reasoning", None)
        if reasoning and data["agent"].pk in self.reasoning_agents:  # chat.reasoning; the Advanced JSON's wins
            overrides = dict(data.get("overrides") or {})
            chat = overrides.get("chat", {})
            overrides["chat"] = {"reasoning": reasoning, **chat} if isinstance(chat, dict) else chat
            data["overrides"] = overrides
        sft = {option: data.pop(field) for field, option in self.SFT_FIELDS.items()}
        dataset = data.pop("dataset")
        if data["kind"] == "sft":
            data.update(sft={k: v for k, v in sft.items() if v not in (None, "")},
                        dataset_version=dataset.latest_version if dataset else None)
        return data
