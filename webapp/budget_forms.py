"""The agent form's prompt budget request: the fields the count needs, read leniently (the agent form itself
says what is wrong with a field; this only decides whether the numbers are known yet)."""
from __future__ import annotations

from typing import Any

from django import forms

from webapp.input_rules import BadInput, json_loads_bounded
from webapp.models.catalogue import PROMPT_MAX


class PromptBudgetForm(forms.Form):
    # The agent form's choice, or the Hugging Face id typed beside it; the count resolves it in the deployment's
    # catalogue (webapp/model_catalogue.py) and reads nothing else.
    base_model = forms.CharField(required=False, max_length=200)
    base_model_id = forms.CharField(required=False, max_length=200)
    system_prompt = forms.CharField(required=False, max_length=PROMPT_MAX, strip=False)
    environment_kind = forms.CharField(required=False, max_length=100)
    environment_options = forms.CharField(required=False, max_length=100_000)
    mcp_server = forms.IntegerField(required=False, min_value=1)
    max_tokens = forms.IntegerField(min_value=1, max_value=32768)

    def clean(self) -> dict[str, Any]:
        cleaned = super().clean()
        cleaned["base_model"] = (cleaned.pop("base_model_id", "") or "").strip() or cleaned.get("base_model") or ""
        if not cleaned["base_model"]:
            self.add_error("base_model", "choose a model")
        return cleaned

    def clean_environment_options(self) -> dict[str, Any]:
        text = self.cleaned_data.get("environment_options") or ""
        try:
            value = json_loads_bounded(text, name="environment_options") if text.strip() else {}
        except (ValueError, BadInput):  # the agent form says what is wrong; the budget is shown without it
            return {}
        return value if isinstance(value, dict) else {}
