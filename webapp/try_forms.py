"""Forms of the Try it page (issue 37): choices come from the project's own rows (agents, checkpoints by id,
scenarios, rubric versions, judges, scenario sets); nothing typed names a model, a path or a host."""
from __future__ import annotations

from typing import Any

from django import forms
from django.urls import reverse

from webapp.models import Checkpoint, RubricVersion, Scenario
from webapp.services.trying import MAX_CHECKPOINTS


class TryForm(forms.Form):
    agent = forms.ModelChoiceField(queryset=None, help_text="Its tools, environment and sampling are used as in "  # type: ignore[arg-type]
                                   "training; checkpoints must be of runs on its base model.")
    include_base = forms.BooleanField(required=False, initial=True, label="Ask the base model too")
    checkpoints = forms.ModelMultipleChoiceField(queryset=None, required=False,  # type: ignore[arg-type]
                                                 help_text=f"Up to {MAX_CHECKPOINTS}, of any run and step.")
    system_prompt = forms.CharField(required=False, widget=forms.Textarea(attrs={"rows": 3}), max_length=20_000,
                                    help_text="The agent's; edit it to try another.")
    scenario = forms.ModelChoiceField(queryset=None, required=False,  # type: ignore[arg-type]
                                      help_text="A scenario of the project, or write a message below.")
    message = forms.CharField(required=False, widget=forms.Textarea(attrs={"rows": 3}), max_length=20_000)
    context = forms.CharField(required=False, widget=forms.Textarea(attrs={"rows": 2}), max_length=20_000,
                              help_text="Optional, sent after the message as the scenario's context is.")
    # Whose system prompt the box was filled with: a box still holding another agent's, unedited, is not a choice.
    prompt_agent = forms.ModelChoiceField(queryset=None, required=False,  # type: ignore[arg-type]
                                          widget=forms.HiddenInput)

    def __init__(self, *args: Any, project, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.fields["agent"].queryset = project.agents.all()
        self.fields["prompt_agent"].queryset = project.agents.all()
        # Choosing an agent swaps its system prompt into the box (and the line saying whose it is): the page's own
        # GET with ?agent=, of which htmx keeps the box, the line and this hidden field.
        self.fields["agent"].widget.attrs.update({
            "hx-get": reverse("try-page", args=[project.pk]), "hx-trigger": "change", "hx-swap": "outerHTML",
            "hx-target": "#id_system_prompt", "hx-select": "#id_system_prompt",
            "hx-select-oob": "#prompt-source,#id_prompt_agent"})
        self.fields["checkpoints"].queryset = (Checkpoint.objects.filter(run__project=project).select_related("run")
                                               .order_by("-run__created_at", "-run_id", "step_index"))
        self.fields["checkpoints"].label_from_instance = lambda c: f"{c.run.name} · step {c.step_index} ({c.adapter_name})"
        self.fields["checkpoints"].widget.attrs["size"] = 8
        self.fields["scenario"].queryset = (Scenario.objects.filter(scenario_set__project=project, retired=False)
                                            .select_related("scenario_set").order_by("scenario_set__name", "id"))
        self.fields["scenario"].label_from_instance = lambda s: f"{s.scenario_set.name} · {s.external_id}"

    def clean(self) -> dict[str, Any]:
        data = super().clean()
        agent, loaded = data.get("agent"), data.get("prompt_agent")
        if agent is not None and loaded is not None and loaded != agent \
                and (data.get("system_prompt") or "").strip() == (loaded.system_prompt or "").strip():
            data["system_prompt"] = agent.system_prompt  # sent before the chosen agent's prompt reached the box
        return data


class TryJudgeForm(forms.Form):
    rubric_version = forms.ModelChoiceField(queryset=None, label="Rubric version")  # type: ignore[arg-type]
    judge_config = forms.ModelChoiceField(queryset=None, label="Judge")  # type: ignore[arg-type]

    def __init__(self, *args: Any, project, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.fields["rubric_version"].queryset = (RubricVersion.objects.filter(rubric__project=project)
                                                  .select_related("rubric").order_by("rubric__name", "-number"))
        self.fields["judge_config"].queryset = project.judge_configs.all()


class TrySaveForm(forms.Form):
    column = forms.IntegerField(min_value=0, widget=forms.HiddenInput)
    scenario_set = forms.ModelChoiceField(queryset=None, label="Into the set")  # type: ignore[arg-type]
    external_id = forms.CharField(required=False, max_length=200, label="Scenario id",
                                  help_text="Empty: try-<session>-<answer>.")

    def __init__(self, *args: Any, project, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.fields["scenario_set"].queryset = project.scenario_sets.all()
