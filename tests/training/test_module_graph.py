"""The engine's modules import one another one way only: a cycle (even through a function-level import) means
two modules can no longer be read, tested or moved apart."""
from __future__ import annotations

import grimp


def _is_package_of(a: str, b: str) -> bool:
    return b.startswith(a + ".") or a.startswith(b + ".")


def test_no_two_engine_modules_import_each_other() -> None:
    graph = grimp.build_graph("training", "judging", include_external_packages=False)
    cycles = []
    for importer in sorted(graph.modules):
        for imported in sorted(graph.find_modules_directly_imported_by(importer)):
            if _is_package_of(importer, imported):
                continue
            back = graph.find_shortest_chain(importer=imported, imported=importer)
            if back and not any(_is_package_of(a, b) for a, b in zip(back, back[1:])):
                cycles.append((importer,) + back)
    assert cycles == []
