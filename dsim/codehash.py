"""A digest of dsim's own simulation code, for keying cached results.

Not the version string (it does not change when the code does) and not the git commit (every
commit, even of docs, would drop the cache): the bytes of the source files of `dsim.run` and
of every dsim module it imports, directly or inside functions, found by reading their imports.
"""

from __future__ import annotations

import ast
import hashlib
from functools import lru_cache
from pathlib import Path

_HOME = Path(__file__).resolve().parent  # the dsim package folder


def _imports(source: str, package: str) -> set[str]:
    """dsim modules named by the import statements anywhere in `source`."""
    found = set()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            found |= {alias.name for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            found.add(node.module)
            found |= {f"{node.module}.{alias.name}" for alias in node.names}
    return {name for name in found if name.split(".")[0] == package}


def _origin(name: str) -> Path | None:
    """The source file of module `name` under this package's folder (nothing is imported)."""
    base = _HOME.joinpath(*name.split(".")[1:])
    for path in (base.with_suffix(".py"), base / "__init__.py"):
        if path.is_file():
            return path
    return None


def simulation_sources(root: str = "dsim.run") -> dict[str, str]:
    """Module name -> source text for `root` and every dsim module it reaches (and their
    packages' __init__), following imports anywhere in a file, lazy ones included."""
    seen: dict[str, str] = {}
    todo = [root]
    while todo:
        name = todo.pop()
        origin = None if name in seen else _origin(name)
        if origin is None:
            continue  # already read, or a name imported from a module rather than a module
        seen[name] = origin.read_text()
        parents = [name.rsplit(".", k)[0] for k in range(1, name.count(".") + 1)]
        todo += [*_imports(seen[name], root.split(".")[0]), *parents]
    return seen


@lru_cache(maxsize=4)
def code_digest(root: str = "dsim.run") -> str:
    """SHA-256 over `simulation_sources(root)`, in name order."""
    digest = hashlib.sha256()
    for name, source in sorted(simulation_sources(root).items()):
        digest.update(f"{name}\0{source}\0".encode())
    return digest.hexdigest()
