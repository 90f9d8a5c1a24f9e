"""The base model fields of the agent forms: a dropdown of the deployment's models (webapp/model_catalogue.py),
each with its context length and description, and a Hugging Face id entry only where the deployment allows ids
(STUDIO_HF_MODELS). Input parsing only; the agent services check the choice again before saving."""
from __future__ import annotations

from typing import Any

from django import forms
from django.core.exceptions import ValidationError

from webapp.model_catalogue import BaseModelChoiceError, base_model_choices, check_base_model_choice, hf_model_patterns

HELP = "One of this deployment's models (its administrators list them)."


def _choices() -> list[tuple[str, str]]:
    return [("", "choose a model")] + base_model_choices()


class BaseModelField(forms.ChoiceField):
    """The catalogue's names; an allowed Hugging Face id is a valid value too (a client may post it here)."""

    def __init__(self, **kwargs: Any) -> None:
        kwargs.setdefault("help_text", HELP)
        super().__init__(choices=_choices, **kwargs)  # a callable: read when the form is shown

    def validate(self, value: Any) -> None:
        forms.Field.validate(self, value)  # required
        if value in self.empty_values:
            return
        try:
            check_base_model_choice(str(value))
        except BaseModelChoiceError as err:
            raise ValidationError(str(err), code="invalid_choice") from None


class BaseModelFormMixin:
    """Adds `base_model_id` (a Hugging Face id, where allowed) after `base_model` and folds it into base_model."""

    fields: dict[str, forms.Field]

    def base_model_setup(self) -> None:
        choices = base_model_choices()
        if len(choices) == 1:  # one model on offer (the demo's tiny one): chosen already, nothing to pick
            self.fields["base_model"].initial = choices[0][0]
        patterns = hf_model_patterns()
        if not patterns:
            return
        self.fields["base_model"].required = False
        entry = forms.CharField(required=False, max_length=200, label="or a Hugging Face id",
                                help_text=f"An id this deployment allows: {', '.join(patterns)}.")
        ordered = {}
        for name, field in self.fields.items():
            ordered[name] = field
            if name == "base_model":
                ordered["base_model_id"] = entry
        self.fields = ordered

    def base_model_clean(self, cleaned: dict[str, Any]) -> dict[str, Any]:
        typed = (cleaned.pop("base_model_id", "") or "").strip()
        if typed:
            try:
                cleaned["base_model"] = check_base_model_choice(typed)
            except BaseModelChoiceError as err:
                self.add_error("base_model_id", str(err))  # type: ignore[attr-defined]
        elif "base_model" in self.fields and not cleaned.get("base_model") and "base_model" not in (
                self.errors):  # type: ignore[attr-defined]
            self.add_error("base_model", "choose a model from the list, or give a Hugging Face id")  # type: ignore
        return cleaned
