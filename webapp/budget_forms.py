"""The agent form's prompt budget request: the fields the count needs, read leniently (the agent form itself
says what is wrong with a field; this only decides whether the numbers are known yet)."""
from __future__ import annotations

import json
from typing import Any

from django import forms

from webapp.models.catalogue import PROMPT_MAX


class PromptBudgetForm(forms.Form):
    base_model = forms.CharField(max_length=500)
    system_prompt = forms.CharField(required=False, max_length=PROMPT_MAX, strip=False)
    environment_kind = forms.CharField(required=False, max_length=100)
    environment_options = forms.CharField(required=False, max_length=100_000)
    mcp_server = forms.IntegerField(required=False, min_value=1)
    max_tokens = forms.IntegerField(min_value=1, max_value=32768)

    def clean_environment_options(self) -> dict[str, Any]:
        text = self.cleaned_data.get("environment_options") or ""
        try:
            value = json.loads(text) if text.strip() else {}
        except json.JSONDecodeError:
            return {}
        return value if isinstance(value, dict) else {}
