"""The API takes each value in the JSON type its schema states, nothing converted on the way in.

DRF's fields are lenient: a CharField stores the number 0 as the text "0" (`"description": 0`), a FloatField
reads `false` as 0.0 and the text "1.5" as 1.5, a BooleanField reads "yes" and 1 as true, a DecimalField takes a number where the schema says a decimal
string ("5.00", the form it is answered in). A client that sent the wrong type has a bug it should hear
about, and the published schema says such values are refused, so they are: a 400 naming the field. One rule
for every field of these kinds, the ones DRF builds from model fields included, installed once when the app
starts (webapp/apps.py). A whole number beyond 64 bits, in a number field or as an object's id, is refused the
same way (webapp/input_rules.py): the database cannot compare with it."""
from __future__ import annotations

from typing import Any

from rest_framework import fields, relations, serializers

from webapp.input_rules import INT_MAX

_DRF = {kind: kind.to_internal_value for kind in (fields.BooleanField, fields.CharField, fields.DecimalField,
                                                  fields.FloatField, fields.IntegerField)}


def _strict(kind: type, accepts: tuple[type, ...]):
    lenient = _DRF[kind]

    def to_internal_value(self: fields.Field, data: Any) -> Any:
        if not isinstance(data, accepts) or (isinstance(data, bool) and bool not in accepts):  # True is an int
            self.fail("invalid")
        return lenient(self, data)

    return to_internal_value


def _beyond_64_bits(data: Any) -> bool:
    if isinstance(data, str):
        digits = data.strip().lstrip("+-")
        return digits.isascii() and digits.isdigit() and (len(digits) > 19 or int(digits) > INT_MAX)
    return isinstance(data, int) and not isinstance(data, bool) and abs(data) > INT_MAX


def _bounded(convert):
    """Whole numbers beyond 64 bits (an id, a count) are refused by name: a query with one is a database error
    (a 500)."""

    def to_internal_value(self: fields.Field, data: Any) -> Any:
        if _beyond_64_bits(data):
            raise serializers.ValidationError(f"must be a whole number from {-INT_MAX} to {INT_MAX}")
        return convert(self, data)

    return to_internal_value


def strict_input_install() -> None:
    fields.BooleanField.to_internal_value = _strict(fields.BooleanField, (bool,))
    fields.CharField.to_internal_value = _strict(fields.CharField, (str,))
    fields.DecimalField.to_internal_value = _strict(fields.DecimalField, (str,))
    fields.FloatField.to_internal_value = _strict(fields.FloatField, (int, float))
    fields.IntegerField.to_internal_value = _bounded(_strict(fields.IntegerField, (int, float)))
    relations.PrimaryKeyRelatedField.to_internal_value = _bounded(relations.PrimaryKeyRelatedField.to_internal_value)
