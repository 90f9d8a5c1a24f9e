"""The API takes each value in the JSON type its schema states, nothing converted on the way in.

DRF's fields are lenient: a CharField stores the number 0 as the text "0" (`"description": 0`), a FloatField
reads `false` as 0.0 and the text "1.5" as 1.5, a BooleanField reads "yes" and 1 as true, a DecimalField takes a number where the schema says a decimal
string ("5.00", the form it is answered in). A client that sent the wrong type has a bug it should hear
about, and the published schema says such values are refused, so they are: a 400 naming the field. One rule
for every field of these kinds, the ones DRF builds from model fields included, installed once when the app
starts (webapp/apps.py)."""
from __future__ import annotations

from typing import Any

from rest_framework import fields

_DRF = {kind: kind.to_internal_value for kind in (fields.BooleanField, fields.CharField, fields.DecimalField,
                                                  fields.FloatField, fields.IntegerField)}


def _strict(kind: type, accepts: tuple[type, ...]):
    lenient = _DRF[kind]

    def to_internal_value(self: fields.Field, data: Any) -> Any:
        if not isinstance(data, accepts) or (isinstance(data, bool) and bool not in accepts):  # True is an int
            self.fail("invalid")
        return lenient(self, data)

    return to_internal_value


def strict_input_install() -> None:
    fields.BooleanField.to_internal_value = _strict(fields.BooleanField, (bool,))
    fields.CharField.to_internal_value = _strict(fields.CharField, (str,))
    fields.DecimalField.to_internal_value = _strict(fields.DecimalField, (str,))
    fields.FloatField.to_internal_value = _strict(fields.FloatField, (int, float))
    fields.IntegerField.to_internal_value = _strict(fields.IntegerField, (int, float))
