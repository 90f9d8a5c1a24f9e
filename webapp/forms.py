"""Forms: input parsing and field-level checks only; saving is done by services (which may add errors)."""
from __future__ import annotations

import json
from typing import Any

from django import forms
from django.conf import settings
from django.core.exceptions import ValidationError

from webapp.base_model_fields import BaseModelField, BaseModelFormMixin
from webapp.input_rules import BadInput, json_loads_bounded
from webapp.judge_keys import judge_key_policy
from webapp.model_catalogue import BaseModelChoiceError, resolve_base_model
from webapp.models import Agent, JudgeConfig, McpServer, Role, Scenario
from webapp.models.catalogue import MESSAGE_MAX, PROMPT_MAX
from webapp.run_policy import override_problems
from webapp.services import run_config as defaults
from webapp.storable import holds_nul

ENVIRONMENT_KINDS = [("chat", "chat: answer the scenario"), ("tools", "tools: function calling"),
                     ("game_2048", "game_2048: play 2048 (verifiable reward)"),
                     ("tictactoe", "tictactoe: play Tic Tac Toe (verifiable reward; self-play gives two roles)"),
                     ("codenames", "codenames: spymaster and guesser (verifiable reward, two roles)"),
                     ("temporal_clue", "temporal_clue: deduction puzzles (verifiable reward)"),
                     ("mcp", "mcp: use the tools of one of the project's MCP servers"),
                     ("external", "Your own code (external rollouts)")]


# The keys themselves are webapp/run_policy.py's ALLOWED_OVERRIDES (RunOverridesField, and the launch service).
OVERRIDES_HELP = ('Training settings to change, e.g. {"lora": {"r": 16}, "grpo": {"beta": 0.04}}: grpo, sampling, '
                  "lora, evaluation, monitors, pipeline, the trainer's numerics, steps, seed. The inference server, "
                  "devices, paths and checkpoints are the deployment's (a fork starts from its checkpoint).")


def apply_service_errors(form: forms.Form, err: ValidationError) -> None:
    """Shows a service's ValidationError on the matching fields (or on the form when none matches)."""
    if hasattr(err, "error_dict"):
        for field, errors in err.message_dict.items():
            form.add_error(field if field in form.fields else None, errors)
    else:
        form.add_error(None, err.messages)


class JSONObjectField(forms.CharField):
    widget = forms.Textarea(attrs={"rows": 3, "class": "mono"})

    def to_python(self, value: Any) -> dict[str, Any]:
        text = (value or "").strip()
        if not text:
            return {}
        try:
            parsed = json_loads_bounded(text, name=self.label or "JSON")
        except json.JSONDecodeError as err:
            raise ValidationError(f"not valid JSON: {err.msg} (line {err.lineno}, column {err.colno})") from None
        except BadInput as err:  # beside the field, as its other errors
            raise ValidationError(err.message) from None
        if not isinstance(parsed, dict):
            raise ValidationError("must be a JSON object, e.g. {\"key\": \"value\"}")
        if holds_nul(parsed):  # "\u0000" in JSON text passes CharField's own check on the raw text
            raise ValidationError("holds a null character (U+0000); remove it")
        return parsed

    def prepare_value(self, value: Any) -> str:
        if isinstance(value, dict):
            return json.dumps(value, indent=2) if value else ""
        return value or ""


class JSONListField(forms.CharField):
    """A JSON array (a conversation's messages), shown indented for editing."""

    widget = forms.Textarea(attrs={"rows": 10, "class": "mono"})

    def to_python(self, value: Any) -> list[Any]:
        try:
            parsed = json_loads_bounded((value or "").strip() or "null", name=self.label or "JSON")
        except json.JSONDecodeError as err:
            raise ValidationError(f"not valid JSON: {err.msg} (line {err.lineno}, column {err.colno})") from None
        except BadInput as err:
            raise ValidationError(err.message) from None
        if not isinstance(parsed, list):
            raise ValidationError("must be a JSON array of messages")
        if holds_nul(parsed):
            raise ValidationError("holds a null character (U+0000); remove it")
        return parsed

    def prepare_value(self, value: Any) -> str:
        return json.dumps(value, indent=2, ensure_ascii=False) if isinstance(value, list) else value or ""


class RunOverridesField(JSONObjectField):
    """A run's Advanced (JSON): the allow-list's refusals show beside the field as it is typed (the launch
    service checks the same list for the API and on submit)."""

    def validate(self, value: Any) -> None:
        super().validate(value)
        if problems := override_problems(value or {}):
            raise ValidationError(problems)


class ProjectForm(forms.Form):
    name = forms.CharField(max_length=200)
    description = forms.CharField(required=False, max_length=5000, widget=forms.Textarea(attrs={"rows": 2}))


class MemberForm(forms.Form):
    username = forms.CharField(max_length=150)
    role = forms.ChoiceField(choices=Role.choices)
    create = forms.BooleanField(required=False, label="create an account (invite link)")
    email = forms.EmailField(required=False, widget=forms.EmailInput(attrs={"placeholder": "email (optional)"}))


class ExampleAgentForm(BaseModelFormMixin, forms.Form):
    example = forms.ChoiceField(choices=[], help_text="What the agent plays or solves (docs/examples.md).")
    base_model = BaseModelField(required=False, help_text="Left as it is: the model warmed up for the example where "
                                "this deployment offers it (docs/examples.md), else its only model.")
    scenarios = forms.IntegerField(min_value=1, max_value=400, initial=40,
                                   help_text="Training scenarios to generate: positions, boards or puzzles.")
    held_out = forms.IntegerField(min_value=1, max_value=100, initial=10, label="Held out",
                                  help_text="Others kept for the evaluation (the validation split), never trained on: "
                                            "the held-out win rate against the base model is measured on them.")

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        from training.fixtures.examples import EXAMPLES
        from webapp.model_catalogue import base_model_choices

        super().__init__(*args, **kwargs)
        self.fields["example"].choices = [(e.key, f"{e.title}: {e.summary}") for e in EXAMPLES.values()]
        self.base_model_setup()
        self.fields["base_model"].initial = ""  # the example's own model, chosen on save
        self.fields["base_model"].choices = [("", "the example's own model")] + base_model_choices()

    def clean(self) -> dict[str, Any]:
        cleaned = super().clean()
        if cleaned.get("base_model") or (cleaned.get("base_model_id") or "").strip():
            return self.base_model_clean(cleaned)
        cleaned.pop("base_model_id", None)
        cleaned["base_model"] = ""  # the service takes the example's own model (webapp/services/examples.py)
        return cleaned


class AgentForm(BaseModelFormMixin, forms.Form):
    name = forms.CharField(max_length=200)
    base_model = BaseModelField()
    system_prompt = forms.CharField(required=False, max_length=PROMPT_MAX, widget=forms.Textarea(attrs={"rows": 5}))
    environment_kind = forms.ChoiceField(choices=ENVIRONMENT_KINDS, initial="chat")
    environment_options = JSONObjectField(
        required=False, help_text="Options of the environment, as JSON. Your own code (external rollouts): "
        '{"group_timeout_s": 600, "on_missing": "skip" or "fail", "allow_unsampled": false, "upstream_timeout_s": '
        "null}: how long a step waits for its groups, what a group that does not come does, whether turns the "
        "model never sampled may train (re-tokenised), and how long the run's endpoint waits for one answer "
        "(null: the deployment's maximum).")
    mcp_server = forms.ModelChoiceField(queryset=None, required=False, label="MCP server",  # type: ignore[arg-type]
                                        help_text="For the mcp environment: whose tools the agent uses.")
    mcp_max_turns = forms.IntegerField(required=False, min_value=1, max_value=64, label="Max turns",
                                       help_text="For mcp: assistant turns before the rollout stops (default 6).")
    mcp_answer_tool = forms.CharField(required=False, max_length=64, label="Answer tool",
                                      help_text="For mcp: calling this tool ends the rollout (default: answer).")
    mcp_reward = forms.ChoiceField(required=False, label="Reward", choices=[
        ("", "none: the judge scores the answers"),
        ("reference", "reference: the answer matches the scenario's reference (and its sources)")])
    temperature = forms.FloatField(min_value=0.0, max_value=2.0, initial=1.0)
    top_p = forms.FloatField(min_value=0.0001, max_value=1.0, initial=1.0)
    max_tokens = forms.IntegerField(min_value=1, max_value=32768, initial=256)

    def __init__(self, *args: Any, project: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.fields["mcp_server"].queryset = McpServer.objects.filter(project=project).order_by("name")
        self.base_model_setup()

    def clean(self) -> dict[str, Any]:
        return self.base_model_clean(super().clean())

    @classmethod
    def from_agent(cls, agent: Agent, **kwargs: Any) -> "AgentForm":
        initial = {f: getattr(agent, f) for f in cls.base_fields if hasattr(agent, f)}
        try:  # an agent saved with a path before the catalogue shows the entry it matches, else asks to choose
            name = resolve_base_model(agent.base_model).name
        except BaseModelChoiceError:
            name = ""
        # an allowed Hugging Face id is shown in its own entry; the list holds the deployment's names
        initial.update({"base_model": "", "base_model_id": name} if "/" in name else {"base_model": name})
        options = dict(agent.environment_options or {})
        if agent.environment_kind == "mcp":  # the mcp choices have their own fields, not the JSON
            initial.update(mcp_server=options.pop("mcp_server", None), mcp_max_turns=options.pop("max_turns", None),
                           mcp_answer_tool=options.pop("answer_tool", None), mcp_reward=options.pop("reward", ""))
            initial["environment_options"] = options
        return cls(initial=initial, project=agent.project, **kwargs)

    def clean_mcp_reward(self) -> str | None:
        return self.cleaned_data.get("mcp_reward") or None


def _header_lines(text: str) -> dict[str, str]:
    headers = {}
    for number, line in enumerate(text.splitlines(), start=1):
        if not line.strip():
            continue
        name, colon, value = line.partition(":")
        if not colon or not name.strip():
            raise ValidationError(f"line {number}: write each header as Name: value")
        headers[name.strip()] = value.strip()
    return headers


class McpServerForm(forms.Form):
    name = forms.CharField(max_length=200)
    transport = forms.ChoiceField(choices=McpServer.Transport.choices, initial=McpServer.Transport.HTTP)
    catalogue_entry = forms.ChoiceField(required=False, label="Server of this deployment (stdio)",
                                        help_text="A program the workers run, from the list site administrators "
                                                  "keep (STUDIO_MCP_STDIO_SERVERS).")
    url = forms.CharField(required=False, max_length=500, label="URL (HTTP)",
                          help_text="The streamable-HTTP endpoint, e.g. http://127.0.0.1:8765/mcp.")
    headers = forms.CharField(required=False, max_length=5000, label="Headers (HTTP)",
                              widget=forms.Textarea(attrs={"rows": 2, "class": "mono", "autocomplete": "off"}),
                              help_text="One per line, Name: value. Stored encrypted and never shown again; "
                                        "leave blank to keep the stored ones. A URL on another scheme, host or "
                                        "port drops the stored ones: give them again with it.")
    clear_headers = forms.BooleanField(required=False, label="Remove the stored headers")
    per_call_timeout_s = forms.FloatField(min_value=0.1, max_value=600, initial=30.0, label="Per-call timeout (s)")
    max_result_chars = forms.IntegerField(min_value=100, max_value=200_000, initial=4000, label="Result cap (chars)")
    max_concurrent_calls = forms.IntegerField(min_value=1, max_value=256, initial=8, label="Concurrent calls")

    def __init__(self, *args: Any, catalogue: dict[str, Any], **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.fields["catalogue_entry"].choices = [("", "—")] + [
            (name, f"{name}: {entry.description}" if entry.description else name)
            for name, entry in sorted(catalogue.items())]

    def clean(self) -> dict[str, Any]:
        from webapp.services.mcp_servers import mcp_command_fields_refuse

        data = super().clean()
        try:  # a command typed into a crafted form is refused, not dropped in silence
            mcp_command_fields_refuse(sent=self.data)
        except ValidationError as err:
            for message in {m for ms in err.message_dict.values() for m in ms}:
                self.add_error(None, message)
        return data

    def clean_headers(self) -> dict[str, str]:
        return {k: v for k, v in _header_lines(self.cleaned_data.get("headers", "")).items() if v}

    @classmethod
    def from_server(cls, server: McpServer, **kwargs: Any) -> "McpServerForm":
        fields = ("name", "transport", "catalogue_entry", "url", "per_call_timeout_s", "max_result_chars",
                  "max_concurrent_calls")
        return cls(initial={f: getattr(server, f) for f in fields}, **kwargs)


class ScenarioSetForm(forms.Form):
    name = forms.CharField(max_length=200)
    description = forms.CharField(required=False, max_length=5000, widget=forms.Textarea(attrs={"rows": 2}))


class ScenarioForm(forms.Form):
    external_id = forms.CharField(required=False, max_length=200, label="Id", help_text="Blank: numbered for you.")
    user_message = forms.CharField(max_length=MESSAGE_MAX, widget=forms.Textarea(attrs={"rows": 3}))
    context = forms.CharField(required=False, max_length=MESSAGE_MAX, widget=forms.Textarea(attrs={"rows": 2}))
    reference = forms.CharField(required=False, max_length=MESSAGE_MAX, widget=forms.Textarea(attrs={"rows": 2}))
    split = forms.ChoiceField(choices=Scenario.Split.choices, initial=Scenario.Split.TRAIN)


class UploadField(forms.FileField):
    """An uploaded file of at most STUDIO_MAX_UPLOAD_BYTES; a larger one is refused, naming both sizes."""

    def clean(self, data: Any, initial: Any = None) -> Any:
        upload = super().clean(data, initial)
        if upload and upload.size > settings.STUDIO_MAX_UPLOAD_BYTES:
            raise ValidationError(f"the file is {upload.size:,} bytes; the limit is "
                                  f"{settings.STUDIO_MAX_UPLOAD_BYTES:,} bytes")
        return upload


class ScenarioUploadForm(forms.Form):
    file = UploadField(help_text="CSV with a header (user_message, and optionally id, context, reference, split, "
                                     "metadata) or JSONL with one object per line with the same keys.")


class LongTextField(forms.CharField):
    """Long pasted text: no `maxlength` attribute (a browser silently cuts a paste there, mid-word); a visible
    counter instead (static/webapp/counter.js) and, over the limit, an error that says by how much."""

    def __init__(self, *, limit: int, **kwargs: Any) -> None:
        self.limit = limit
        super().__init__(**kwargs)

    def widget_attrs(self, widget: forms.Widget) -> dict[str, Any]:
        return {**super().widget_attrs(widget), "data-limit": str(self.limit)}

    def validate(self, value: Any) -> None:
        super().validate(value)
        if value and len(value) > self.limit:
            raise ValidationError(f"the text is {len(value):,} characters; the limit is {self.limit:,}. Nothing "
                                  "was cut: shorten it and save again.")


class RubricForm(forms.Form):
    name = forms.CharField(max_length=200)
    text = LongTextField(limit=PROMPT_MAX, widget=forms.Textarea(attrs={"rows": 8}),
                         help_text=f"Plain English: what makes one answer better than another. At most "
                                   f"{PROMPT_MAX:,} characters.")
    criteria = forms.CharField(
        required=False, widget=forms.Textarea(attrs={"rows": 3, "class": "mono"}),
        help_text="Optional, one per line: name | weight | description (e.g. `faithful | 2 | uses only the context`).",
    )

    def clean_criteria(self) -> list[dict[str, Any]]:
        items = []
        for number, line in enumerate((self.cleaned_data.get("criteria") or "").splitlines(), start=1):
            if not line.strip():
                continue
            parts = [p.strip() for p in line.split("|", 2)]
            if len(parts) < 2:
                raise ValidationError(f"line {number}: write `name | weight | description`")
            items.append({"name": parts[0], "weight": parts[1], "description": parts[2] if len(parts) > 2 else ""})
        return items


class RubricVersionForm(RubricForm):
    name = None  # type: ignore[assignment]


class JudgeConfigForm(forms.Form):
    name = forms.CharField(max_length=200)
    model = forms.CharField(max_length=300, help_text="litellm model string, e.g. openai/gpt-4o-mini.")
    api_base = forms.URLField(required=False, max_length=500, assume_scheme="https")
    api_key_env = forms.ChoiceField(required=False, label="API key of the workers",
                                    help_text="The key variables an administrator allowed, with where each may "
                                              "be sent (set API base to match).")
    api_key = forms.CharField(required=False, max_length=500, label="Or an API key (stored encrypted)",
                              widget=forms.PasswordInput(render_value=False),
                              help_text="Never shown again. Leave blank to keep the stored key (a new API base or "
                                        "model provider removes it: enter it again with them).")
    clear_api_key = forms.BooleanField(required=False, label="Remove the stored key")
    temperature = forms.FloatField(min_value=0.0, max_value=2.0, initial=0.0)
    passes = forms.IntegerField(min_value=1, max_value=10, initial=1)
    concurrency = forms.IntegerField(min_value=1, max_value=64, initial=4)
    budget_usd = forms.DecimalField(required=False, min_value=0, max_digits=10, decimal_places=2,
                                    label="Budget per run (USD)",
                                    help_text="A run pauses once its judge calls cost this much (priced models).")

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.fields["api_key_env"].choices = [("", "none (a stored key, or the provider's usual variable)")] + [
            (key, f"{key} → {', '.join(b or 'the provider default endpoint' for b in bases)}")
            for key, bases in sorted(judge_key_policy().items())]  # exactly what saving and launch accept

    @classmethod
    def from_judge(cls, judge: JudgeConfig, **kwargs: Any) -> "JudgeConfigForm":
        fields = ("name", "model", "api_base", "api_key_env", "temperature", "passes", "concurrency", "budget_usd")
        return cls(initial={f: getattr(judge, f) for f in fields}, **kwargs)


class OverrideForm(forms.Form):
    score = forms.FloatField(required=False, min_value=0.0, max_value=1.0,
                             help_text="0..1; leave empty to remove your override.")
    reason = forms.CharField(max_length=2000, widget=forms.TextInput())


class ReorderForm(forms.Form):
    """`rank_<trajectory id>` inputs (1 = best); the order is read from them."""

    reason = forms.CharField(max_length=2000, widget=forms.TextInput())

    def order(self, data: Any) -> list[int]:
        ranks = []
        for key, value in data.items():
            if key.startswith("rank_"):
                try:
                    ranks.append((float(value), int(key[5:])))
                except ValueError:
                    raise ValidationError({"order": [f"rank {value!r} is not a number"]}) from None
        return [trajectory_id for _, trajectory_id in sorted(ranks)]


class ForkForm(forms.Form):
    name = forms.CharField(max_length=100)
    scenario_set = forms.ModelChoiceField(queryset=None, required=False,  # type: ignore[arg-type]
                                          help_text="The scenarios the fork rolls out. Empty: the parent run's "
                                                    "(an SFT run launched without one has none to give).")
    rubric_version = forms.ModelChoiceField(queryset=None, required=False,  # type: ignore[arg-type]
                                            help_text="The rubric the fork is judged with.")
    judge_config = forms.ModelChoiceField(queryset=None, required=False, label="Judge",  # type: ignore[arg-type]
                                          help_text="None: train on the environment's own reward (chat needs a judge; an "
                                                    "agent in your own code: the rewards your code sends).")
    steps = forms.IntegerField(min_value=1, max_value=100000, initial=defaults.DEFAULT_STEPS)
    learning_rate = forms.FloatField(required=False, min_value=1e-9, max_value=1.0,
                                     help_text="Empty: the parent run's.")
    review_gate = forms.BooleanField(required=False)
    overrides = RunOverridesField(required=False, label="Advanced (JSON)", help_text=OVERRIDES_HELP)

    def __init__(self, *args: Any, project, **kwargs: Any) -> None:
        from webapp.models import RubricVersion

        super().__init__(*args, **kwargs)
        self.fields["scenario_set"].queryset = project.scenario_sets.all()
        self.fields["rubric_version"].queryset = (RubricVersion.objects.filter(rubric__project=project)
                                                  .select_related("rubric").order_by("rubric__name", "-number"))
        self.fields["judge_config"].queryset = project.judge_configs.all()

    def clean(self) -> dict[str, Any]:
        data = super().clean()
        if data.get("rubric_version") and not data.get("judge_config"):
            self.add_error("judge_config", "a rubric needs a judge to apply it")
        return data


class PlaygroundForm(RubricForm):
    name = None  # type: ignore[assignment]
    groups = forms.ModelMultipleChoiceField(queryset=None, widget=forms.CheckboxSelectMultiple,  # type: ignore[arg-type]
                                            help_text="Stored groups to re-score (★ = has human labels).")
    base_version = forms.ModelChoiceField(queryset=None, required=False,  # type: ignore[arg-type]
                                          label="Edited from", help_text="Saving makes a new version of its rubric.")
    judge_config = forms.ModelChoiceField(queryset=None, label="Judge")  # type: ignore[arg-type]
    judge_model = forms.CharField(required=False, max_length=300,
                                  help_text="Another litellm model to try with this judge's API; empty: the judge's.")
    temperature = forms.FloatField(required=False, min_value=0.0, max_value=2.0)
    passes = forms.IntegerField(required=False, min_value=1, max_value=10)

    field_order = ["groups", "base_version", "text", "criteria", "judge_config", "judge_model", "temperature",
                   "passes"]

    def __init__(self, *args: Any, project, groups, **kwargs: Any) -> None:
        from webapp.models import RubricVersion

        super().__init__(*args, **kwargs)
        self.fields["groups"].queryset = groups
        self.fields["groups"].label_from_instance = lambda g: (
            f"{'★ ' if getattr(g, 'labels', 0) else ''}{g.run.name} · step {g.step_index} · group {g.index + 1} · "
            f"{g.scenario_external_id}")
        self.fields["base_version"].queryset = (RubricVersion.objects.filter(rubric__project=project)
                                                .select_related("rubric").order_by("rubric__name", "-number"))
        self.fields["judge_config"].queryset = project.judge_configs.all()


class GroupSearchForm(forms.Form):
    """Search and filter a run's groups (GET): a group is shown when one of its trajectories matches it all."""
    q = forms.CharField(required=False, max_length=200, label="Text",
                        widget=forms.TextInput(attrs={"placeholder": "answer, explanation or scenario id"}))
    step = forms.IntegerField(required=False, min_value=0)
    labelled = forms.ChoiceField(required=False, choices=[("", "any"), ("yes", "human-scored"),
                                                          ("no", "not human-scored")], label="Label")
    min_score = forms.FloatField(required=False, min_value=0.0, max_value=1.0, label="Reward ≥")
    max_score = forms.FloatField(required=False, min_value=0.0, max_value=1.0, label="Reward ≤")

    def search(self) -> dict[str, Any] | None:
        """The filters given, or None (no filter, or invalid input: shown as the form's errors)."""
        if not self.is_bound or not self.is_valid():
            return None
        given = {k: v for k, v in self.cleaned_data.items() if v not in (None, "")}
        return given or None


class PlaygroundFilterForm(forms.Form):
    """Which stored groups the playground lists (GET)."""
    run = forms.ModelChoiceField(queryset=None, required=False, empty_label="any run")  # type: ignore[arg-type]
    step = forms.IntegerField(required=False, min_value=0)
    labelled = forms.ChoiceField(required=False, choices=[("", "any"), ("yes", "human-labelled"),
                                                          ("no", "not labelled")], label="Labels")
    disagreement = forms.BooleanField(required=False, label="Judge and people (or passes) disagree")

    def __init__(self, *args: Any, project, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.fields["run"].queryset = project.runs.order_by("-created_at", "-id")

    def filters(self) -> dict[str, Any]:
        if not self.is_valid():
            return {}
        data = self.cleaned_data
        return {"run_id": data["run"].id if data.get("run") else None, "step": data.get("step"),
                "labelled": data.get("labelled") or "", "disagreement": bool(data.get("disagreement"))}


class ProjectTokenForm(forms.Form):
    name = forms.CharField(max_length=100, help_text="Where the key will be used, e.g. the machine or script.")
