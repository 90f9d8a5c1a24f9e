"""Forms of SFT datasets and distillation: input parsing and field-level checks only (as webapp/forms.py)."""
from __future__ import annotations

from typing import Any

from django import forms

from webapp.forms import JSONListField, UploadField
from webapp.model_catalogue import base_model_choices
from webapp.models import Checkpoint, RubricVersion


class DatasetForm(forms.Form):
    name = forms.CharField(max_length=200)
    description = forms.CharField(required=False, max_length=5000, widget=forms.Textarea(attrs={"rows": 2}))


class DatasetUploadForm(forms.Form):
    file = UploadField(help_text="JSONL: one conversation a line, {\"messages\": [...], \"tools\": [...]} in "
                                     "the OpenAI chat format.")
    mode = forms.ChoiceField(choices=[("append", "append to the latest version"),
                                      ("replace", "replace its conversations")], initial="append",
                             help_text="Either way the upload makes a new version; earlier versions stay as they are.")
    model = forms.ChoiceField(
        required=False, label="Check against model", choices=lambda: [("", "do not check")] + base_model_choices(),
        help_text="The model these conversations will train: each one is counted with its tokenizer and must fit "
                  "its context, or the file is refused naming the line.")

    def __init__(self, *args: Any, project=None, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        if project is not None and not self.is_bound:  # the model the project's newest agent trains
            agent = project.agents.order_by("-id").only("base_model").first()
            choices = base_model_choices()
            names = {name for name, _ in choices}
            if agent is not None and agent.base_model in names:
                self.fields["model"].initial = agent.base_model
            elif len(choices) == 1:
                self.fields["model"].initial = choices[0][0]


class DistillationForm(forms.Form):
    dataset = forms.ModelChoiceField(queryset=None, help_text="The accepted drafts become its next version.")  # type: ignore[arg-type]
    agent = forms.ModelChoiceField(queryset=None, label="Student agent",  # type: ignore[arg-type]
                                   help_text="Its system prompt, environment and sampling shape the teacher's answers, "
                                             "so they are in the format the student trains in.")
    scenario_set = forms.ModelChoiceField(queryset=None, help_text="Its training scenarios are asked.")  # type: ignore[arg-type]
    teacher = forms.ModelChoiceField(queryset=None, required=False, empty_label="(a checkpoint instead)",  # type: ignore[arg-type]
                                     help_text="A judge entry used as the teacher: its litellm model, API, key and "
                                               "budget (its budget caps the teacher's cost).")
    teacher_checkpoint = forms.ModelChoiceField(
        queryset=None, required=False, empty_label="(a judge entry instead)", label="Or a checkpoint as the teacher",  # type: ignore[arg-type]
        help_text="A checkpoint of this project's runs, answering from the project's inference server (started on a "
                  "worker when needed). Choose a judge entry or a checkpoint.")
    judge_config = forms.ModelChoiceField(queryset=None, label="Judge",  # type: ignore[arg-type]
                                          help_text="Ranks each scenario's answers against the rubric (its budget "
                                                    "caps the judge's cost).")
    rubric_version = forms.ModelChoiceField(queryset=None, required=False, empty_label="the default rubric",  # type: ignore[arg-type]
                                            label="Rubric version")
    answers_per_scenario = forms.IntegerField(min_value=2, max_value=16, initial=4,
                                              help_text="The teacher's answers per scenario, ranked together.")
    threshold = forms.FloatField(min_value=0.0, max_value=1.0, initial=0.5,
                                 help_text="The best answer becomes a draft only at or above this judge score.")
    max_scenarios = forms.IntegerField(min_value=1, max_value=500, initial=50)

    def __init__(self, *args: Any, project, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.fields["dataset"].queryset = project.datasets.all()
        self.fields["agent"].queryset = project.agents.all()
        self.fields["scenario_set"].queryset = project.scenario_sets.all()
        self.fields["teacher"].queryset = project.judge_configs.all()
        self.fields["teacher_checkpoint"].queryset = (Checkpoint.objects.filter(run__project=project)
                                                      .select_related("run").order_by("-run_id", "-step_index"))
        self.fields["teacher_checkpoint"].label_from_instance = lambda c: f"{c.adapter_name} (run {c.run.name})"
        self.fields["judge_config"].queryset = project.judge_configs.all()
        self.fields["rubric_version"].queryset = (RubricVersion.objects.filter(rubric__project=project)
                                                  .select_related("rubric").order_by("rubric__name", "-number"))


class DraftEditForm(forms.Form):
    messages = JSONListField(label="Messages (JSON)")
