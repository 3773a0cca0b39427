"""The package's imports flow down its layers once (docs/architecture.md), with no cycle.

The graph is built from the source, every ``import`` statement included: top-level ones,
those inside functions (written there to defer Numba or a heavy import, they still make a
dependency) and those under ``if TYPE_CHECKING:`` (an annotation names what a module needs).
Modules map to layers by their folder; an import may stay in its layer or point to a lower
one, never up, and no set of modules may import one another in a cycle.
"""

from __future__ import annotations

import ast
import tomllib
from collections import defaultdict
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent

#: Folders of the source tree and the package each one is (pyproject's package-dir).
FOLDERS = {"arch": "diptych.arch", "workloads": "diptych.workloads", "sim": "diptych.sim",
           "tools": "diptych.tools", "rtl": "diptych.rtl", "tools/facade": "diptych"}

#: The layers, lowest first (docs/architecture.md). ``sim`` is split by subpackage; modules
#: directly in ``sim/`` are its core (engine, mapper, DRAM, op timing).
LAYERS = ["arch", "workloads", "sim.core", "sim.program", "sim.run", "sim.cluster",
          "sim.serving", "tools", "facade"]
#: The RTL stands beside the stack: it needs nothing of it but the array-timing contract it
#: is checked against, and only the command line (tools) uses it.
RTL_MAY_IMPORT = {"diptych.rtl", "diptych.sim.timing"}


def modules() -> dict[str, tuple[Path, bool]]:
    """Every module of the package: dotted name → (file, is a package's __init__)."""
    out = {}
    for folder, pkg in FOLDERS.items():
        base = ROOT / folder
        for f in base.rglob("*.py"):
            rel = f.relative_to(base)
            if folder == "tools" and rel.parts[0] == "facade":
                continue
            parts = list(rel.with_suffix("").parts)
            init = parts[-1] == "__init__"
            if init:
                parts = parts[:-1]
            out[".".join([pkg, *parts])] = (f, init)
    return out


def layer(module: str) -> str:
    parts = module.split(".")
    if len(parts) == 1:
        return "facade"
    if parts[1] == "sim":
        sub = parts[2] if len(parts) > 2 else ""
        return f"sim.{sub}" if sub in ("program", "run", "cluster", "serving") else "sim.core"
    return parts[1]


def _targets(module: str, init: bool, node: ast.ImportFrom | ast.Import, known) -> list[str]:
    if isinstance(node, ast.Import):
        names = [a.name for a in node.names]
    else:
        if node.level:
            base = module if init else module.rsplit(".", 1)[0]
            parts = base.split(".")
            parts = parts[:len(parts) - (node.level - 1)]
            target = ".".join(parts) + (f".{node.module}" if node.module else "")
        else:
            target = node.module or ""
        # ``from package import module`` imports the module
        names = [f"{target}.{a.name}" if f"{target}.{a.name}" in known else target
                 for a in node.names]
    out = []
    for t in names:
        if t != "diptych" and not t.startswith("diptych."):
            continue
        while t not in known and "." in t:
            t = t.rsplit(".", 1)[0]
        if t in known:
            out.append(t)
    return out


def import_graph() -> dict[str, dict[str, int]]:
    """module → {imported module: line of the first such import}."""
    known = modules()
    graph: dict[str, dict[str, int]] = defaultdict(dict)
    for name, (path, init) in known.items():
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, (ast.Import, ast.ImportFrom)):
                for t in _targets(name, init, node, known):
                    if t != name:
                        graph[name].setdefault(t, node.lineno)
        graph.setdefault(name, {})
    return dict(graph)


def cycles(graph: dict[str, dict[str, int]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan)."""
    index, low, stack, on, out = {}, {}, [], set(), []
    counter = [0]

    def visit(v):
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on.add(v)
        for w in graph.get(v, ()):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                out.append(sorted(comp))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return out


def upward(graph: dict[str, dict[str, int]]) -> list[str]:
    """Every import that points up the layers (or sideways out of the RTL), as a line."""
    rank = {name: i for i, name in enumerate(LAYERS)}
    known = modules()
    bad = []
    for src, targets in sorted(graph.items()):
        a = layer(src)
        for dst, line in sorted(targets.items()):
            b = layer(dst)
            where = f"{known[src][0].relative_to(ROOT)}:{line}: {src} -> {dst}"
            if a == "rtl":
                if not any(dst == p or dst.startswith(p + ".") for p in RTL_MAY_IMPORT):
                    bad.append(where)
            elif b == "rtl":
                if a != "tools":
                    bad.append(where)
            elif rank[b] > rank[a]:
                bad.append(f"{where} ({a} imports {b})")
    return bad


@pytest.fixture(scope="module")
def graph():
    return import_graph()


def test_the_graph_sees_every_kind_of_import(graph):
    # a top-level, a function-local and a TYPE_CHECKING import the graph must hold
    assert "diptych.arch.chip" in graph["diptych.arch.loader"]
    assert "diptych.sim.run.scheduled" in graph["diptych.sim.run.node"]       # inside _time
    assert "diptych.arch.chip" in graph["diptych.arch.area"]                  # TYPE_CHECKING
    assert len(graph) > 150


def test_no_import_cycle(graph):
    found = cycles(graph)
    assert not found, "import cycles:\n" + "\n".join(" <-> ".join(c) for c in found)


def test_imports_point_down_the_layers(graph):
    bad = upward(graph)
    assert not bad, "imports that point up the layer order:\n" + "\n".join(bad)


def test_the_checks_would_catch_a_cycle_and_an_upward_import():
    g = {"diptych.workloads.lower": {"diptych.sim.run.node": 3},
         "diptych.sim.run.node": {"diptych.workloads.lower": 5}}
    assert cycles(g) == [["diptych.sim.run.node", "diptych.workloads.lower"]]
    assert any("workloads imports sim.run" in line for line in upward(
        {"diptych.workloads.lower": {"diptych.sim.run.node": 3}}))
    assert upward({"diptych.rtl.bench": {"diptych.sim.timing": 1}}) == []
    assert upward({"diptych.rtl.bench": {"diptych.sim.engine": 1}}) != []


def test_every_package_folder_is_installed():
    # a regular install (not editable) has only the packages pyproject lists
    cfg = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]
    listed = set(cfg["packages"])
    dirs = {cfg["package-dir"][p]: p for p in listed}
    for folder, pkg in FOLDERS.items():
        for init in (ROOT / folder).rglob("__init__.py"):
            rel = init.parent.relative_to(ROOT).as_posix()
            if folder == "tools" and rel.startswith("tools/facade"):
                continue
            assert rel in dirs, f"{rel}/ is a package but pyproject.toml does not install it"
