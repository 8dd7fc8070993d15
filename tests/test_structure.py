"""The package's shape: no import cycle, the engine below the layers that use it, and each spec
field read once per run, by the spec grammar."""

from __future__ import annotations

import ast
from collections import Counter
from pathlib import Path

import pytest
from conftest import ROOT, write_flat_profile

from dsim import spec_grammar
from dsim.run import simulate
from dsim.run_spec import RunSpec

PACKAGE = ROOT / "dsim"


def _module(path: Path) -> str:
    parts = path.relative_to(ROOT).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


MODULES = {_module(p): p for p in PACKAGE.rglob("*.py")}


def imports(name: str) -> set[str]:
    """The dsim modules `name` imports anywhere in its source (inside functions too)."""
    path = MODULES[name]
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            found |= {a.name for a in node.names}
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parts = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join([*parts, base] if base else parts)
            found |= {base} | {f"{base}.{a.name}" for a in node.names}
    return {m for m in found if m in MODULES and m != name}


GRAPH = {name: imports(name) for name in MODULES}


def test_the_import_graph_has_no_cycle():
    """Depth-first search over every import, function-level ones included."""
    state: dict[str, int] = {}  # 1 on the stack, 2 done

    def visit(node: str, path: list[str]) -> None:
        state[node] = 1
        for nxt in sorted(GRAPH[node]):
            if state.get(nxt) == 1:
                cycle = [*path[path.index(nxt) :], nxt] if nxt in path else [node, nxt]
                pytest.fail(f"import cycle: {' -> '.join(cycle)}")
            if nxt not in state:
                visit(nxt, [*path, nxt])
        state[node] = 2

    for name in sorted(GRAPH):
        if name not in state:
            visit(name, [name])


def test_a_cycle_would_be_found():
    """The graph reader sees a function-level import (so the test above can fail)."""
    assert "dsim.run_inputs" in GRAPH["dsim.run"]
    assert any(GRAPH[m] for m in GRAPH if m.startswith("dsim.real."))


ABOVE_THE_ENGINE = ("metrics", "pareto", "run", "run_inputs", "run_spec", "real", "models")
ABOVE_THE_ENGINE += ("cluster", "validation")


@pytest.mark.parametrize("name", sorted(m for m in MODULES if m.startswith("dsim.engine")))
def test_the_engine_imports_no_layer_above_it(name):
    above = {f"dsim.{m}" for m in ABOVE_THE_ENGINE}
    bad = {m for m in GRAPH[name] if m in above or m.rpartition(".")[0] in above}
    bad |= {m for m in GRAPH[name] if any(m.startswith(f"{a}.") for a in above)}
    assert not bad, f"{name} imports {sorted(bad)}"


def test_only_the_cli_imports_the_validation_study():
    """The study sits above every layer it checks: nothing below it imports it."""
    users = {
        name
        for name, deps in GRAPH.items()
        if not name.startswith("dsim.validation")
        and any(d == "dsim.validation" or d.startswith("dsim.validation.") for d in deps)
    }
    assert users == {"dsim.cli"}


READERS = ("window", "pair", "draft_cost", "sched_cost", "acceptance", "synthetic")


@pytest.fixture
def reads(monkeypatch):
    """Counts of each spec-grammar reader's calls."""
    counts: Counter[str] = Counter()
    for name in READERS:
        reader = getattr(spec_grammar, name)

        def counted(*args, _name=name, _reader=reader, **kwargs):
            counts[_name] += 1
            return _reader(*args, **kwargs)

        monkeypatch.setattr(spec_grammar, name, counted)
    return counts


@pytest.mark.parametrize(
    "layout", [{"replicas": 3, "router": "least-loaded"}, {"disagg": "1:2"}], ids=str
)
def test_each_spec_field_is_read_once_per_run(tmp_path, reads, layout):
    profile = write_flat_profile(tmp_path / "flat.csv", 10.0)
    (tmp_path / "flat.json").write_text('{"kv_bytes_per_token": 1000}')
    spec = RunSpec(
        trace="synthetic:rate=20,n=30,prompt=64,output=16",
        window="0:1",  # inside the trace (30 arrivals at 20/s),
        profile=str(profile),
        acceptance="mix:iid:0.7=1,iid:0.8=1",
        policy="dspark",
        draft_cost="ratio:0.1",
        sched_cost="auto:2",
        **layout,
    )
    simulate(spec)
    expected = {name: 1 for name in READERS} | {"pair": int("disagg" in layout)}
    assert dict(reads) == {k: v for k, v in expected.items() if v}


def test_a_plugin_is_imported_once_and_built_once_per_replica(tmp_path):
    """The policy spec is read once per run (its module imported once); each replica still gets
    a fresh object."""
    log = tmp_path / "log.txt"
    plugin = tmp_path / "counted.py"
    plugin.write_text(
        "import numpy as np\n"
        f"LOG = {str(log)!r}\n"
        "open(LOG, 'a').write('import\\n')\n"
        "class Counted:\n"
        "    drafts = True\n"
        "    def __init__(self):\n"
        "        open(LOG, 'a').write('build\\n')\n"
        "    def lengths(self, conf, sps, truth):\n"
        "        return np.ones(conf.shape[0], dtype=np.int64)\n"
    )
    profile = write_flat_profile(tmp_path / "flat.csv", 10.0)
    spec = RunSpec(
        trace="synthetic:rate=20,n=12,prompt=32,output=8",
        profile=str(profile),
        acceptance="iid:0.7",
        policy=f"{plugin}:Counted",
        replicas=3,
    )
    simulate(spec)
    assert log.read_text().split() == ["import", "build", "build", "build"]


def _function_lengths() -> list[tuple[int, str]]:
    """Every top-level-or-method function's lines, nested definitions counted in their parent."""
    out = []

    def walk(node: ast.AST, where: str, inside: bool) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.FunctionDef | ast.AsyncFunctionDef):
                if not inside:
                    out.append((child.end_lineno - child.lineno + 1, f"{where}:{child.name}"))
                walk(child, where, True)
            else:
                walk(child, where, inside)

    for name, path in MODULES.items():
        walk(ast.parse(path.read_text()), name, False)
    return out


def test_no_function_is_over_80_lines():
    long = sorted(row for row in _function_lengths() if row[0] > 80)
    assert not long, f"functions over 80 lines: {long}"
    assert max(_function_lengths())[0] > 40  # the measure sees real functions
