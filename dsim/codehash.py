"""The source code a cached result depends on: dsim's own simulation code, and a plug-in's.

Not the version string (it does not change when the code does) and not the git commit (every
commit, even of docs, would drop the cache): the bytes of the source files of `dsim.run` and
of every dsim module it imports, directly or inside functions, found by reading their imports.
A plug-in policy's code is found the same way (`user_sources`): its file or module and every
module of the user's own it imports (not dsim's, not the standard library's, not an installed
package's), so an edit of any of them changes a sweep point's key.
"""

from __future__ import annotations

import ast
import hashlib
import importlib.util
import sysconfig
from functools import lru_cache
from pathlib import Path

_HOME = Path(__file__).resolve().parent  # the dsim package folder
_INSTALLED = ("stdlib", "platstdlib", "purelib", "platlib")
_NOT_USERS = (_HOME, *{Path(sysconfig.get_paths()[k]).resolve() for k in _INSTALLED})


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


def user_file(path: str | Path) -> bool:
    """Whether `path` is a Python file of the user's own: outside dsim, the standard library
    and installed packages."""
    p = Path(path).resolve()
    installed = {"site-packages", "dist-packages"} & set(p.parts)
    return p.suffix == ".py" and not installed and not any(p.is_relative_to(r) for r in _NOT_USERS)


def _module_file(name: str) -> Path | None:
    """The source file of module `name` if it is the user's own; parents of a dotted name are
    only looked up (and so imported) when the top-level package is the user's."""
    try:
        top = importlib.util.find_spec(name.split(".")[0])
        if top is None or not top.origin or not user_file(top.origin):
            return None
        spec = importlib.util.find_spec(name) if "." in name else top
    except (ImportError, ValueError, AttributeError):
        return None  # not importable here: loading the plug-in reports it
    origin = spec.origin if spec is not None else None
    return Path(origin).resolve() if origin and user_file(origin) else None


def _imported_names(source: str, package: str) -> set[str]:
    """Absolute module names the import statements anywhere in `source` may load (`from a
    import b` may load `a.b`); relative imports resolved against `package`."""
    names: set[str] = set()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            names |= {alias.name for alias in node.names}
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parts = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join([p for p in parts if p] + ([base] if base else []))
            if base:
                names.add(base)
                names |= {f"{base}.{alias.name}" for alias in node.names if alias.name != "*"}
    return names


def user_sources(target: str) -> tuple[str, ...]:
    """The files of a plug-in's code: `target` (a FILE.py or a module name) and every module of
    the user's own it imports, transitively, in path order."""
    start = Path(target).resolve() if target.endswith(".py") else _module_file(target)
    if start is None or not start.is_file():
        return ()
    package = "" if target.endswith(".py") else target
    if start.name != "__init__.py":  # a module's relative imports start from its package
        package = package.rpartition(".")[0]
    seen: set[Path] = set()
    todo = [(start, package), *_user_modules({package} if package else set())]
    while todo:  # a module's packages run too: their __init__ files count
        path, package = todo.pop()
        if path in seen:
            continue
        seen.add(path)
        try:
            todo += _user_modules(_imported_names(path.read_text(), package))
        except (OSError, SyntaxError, UnicodeDecodeError, ValueError):
            continue  # loading the plug-in reports it
    return tuple(sorted(str(p) for p in seen))


def _user_modules(names: set[str]) -> list[tuple[Path, str]]:
    """(file, package for its relative imports) of each of `names`, and of their parent
    packages, that is the user's own."""
    names |= {n.rsplit(".", k)[0] for n in names for k in range(1, n.count(".") + 1)}
    found = [(name, _module_file(name)) for name in sorted(names)]
    return [
        (path, name if path.name == "__init__.py" else name.rpartition(".")[0])
        for name, path in found
        if path is not None
    ]
