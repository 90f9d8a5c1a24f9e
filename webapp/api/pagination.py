"""One rule for every list of the API, nested lists included: limit/offset pages answered as
`{count, next, previous, results}`. A limit or offset that is not a whole number in range is a 400 that names
the parameter (DRF's own class quietly falls back to the defaults), and the schema states the ranges."""
from __future__ import annotations

from rest_framework.pagination import LimitOffsetPagination
from rest_framework.request import Request

from webapp.input_rules import INT_MAX, whole_number


def query_int(request: Request, name: str, *, minimum: int = 0, maximum: int | None = None) -> int | None:
    """The query parameter `name` as a whole number in range, None when absent; otherwise a 400 naming it."""
    raw = request.query_params.get(name)
    if raw is None:
        return None
    return whole_number(raw, name=name, minimum=minimum, maximum=INT_MAX if maximum is None else maximum)


class Pagination(LimitOffsetPagination):
    max_limit = 1000

    def get_limit(self, request: Request) -> int:
        limit = query_int(request, self.limit_query_param, minimum=1, maximum=self.max_limit)
        return self.default_limit if limit is None else limit

    def get_offset(self, request: Request) -> int:
        return query_int(request, self.offset_query_param) or 0

    def get_schema_operation_parameters(self, view) -> list[dict]:
        limit, offset = super().get_schema_operation_parameters(view)
        limit["schema"].update({"minimum": 1, "maximum": self.max_limit, "default": self.default_limit})
        offset["schema"].update({"minimum": 0, "default": 0})
        return [limit, offset]
