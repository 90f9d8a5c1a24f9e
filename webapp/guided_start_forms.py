"""The guided start's form (issue 48): two sets of choices, an example and one of the deployment's models; nothing
typed. The model of the first example this deployment offers a model for is chosen already (the demo's tiny one)."""
from __future__ import annotations

import uuid
from typing import Any

from django import forms

from webapp.base_model_fields import BaseModelField

BLANK = "blank"


def default_choice() -> tuple[str, str]:
    """(example, model) chosen when the page opens: an example warmed up on a model this deployment offers (its
    own game then scores answers the model already writes in the right form), else the first example and, where
    the deployment offers one model only, that model."""
    from training.fixtures.examples import EXAMPLES
    from webapp.model_catalogue import base_model_choices

    offered = [name for name, _ in base_model_choices()]
    for example in EXAMPLES.values():
        if example.model in offered:
            return example.key, example.model
    return next(iter(EXAMPLES)), offered[0] if len(offered) == 1 else ""


class GuidedStartForm(forms.Form):
    example = forms.ChoiceField(
        choices=[], widget=forms.RadioSelect, label="1. What should your agent learn?",
        help_text="Each example brings its own practice games or puzzles and scores the agent's answers itself, so "
                  "nothing else needs setting up.")
    base_model = BaseModelField(
        widget=forms.RadioSelect, label="2. Which model learns it?",
        help_text="The model starts from what it knows and learns a small add-on of its own; the model itself is "
                  "not changed.")
    launch_token = forms.CharField(required=False, max_length=64, widget=forms.HiddenInput())

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        from training.fixtures.examples import EXAMPLES
        from webapp.model_catalogue import base_model_choices

        super().__init__(*args, **kwargs)
        self.fields["example"].choices = [(e.key, f"{e.title}: {e.summary}") for e in EXAMPLES.values()] + [
            (BLANK, "A blank agent: you write what it does, its questions and how its answers are scored (the agent "
                    "form opens next).")]
        self.fields["base_model"].choices = base_model_choices()  # radio buttons: no "choose a model" entry
        example, model = default_choice()
        self.fields["example"].initial, self.fields["base_model"].initial = example, model
        # Clicking an example selects the model warmed up for it, where the deployment offers it
        # (static/webapp/guided_start.js): a game must not go to the 2048 model because that was selected first.
        offered = {name for name, _ in self.fields["base_model"].choices}
        self.example_models = {e.key: e.model for e in EXAMPLES.values() if e.model in offered}
        self.initial.setdefault("launch_token", uuid.uuid4().hex)  # a second send of this page launches nothing
