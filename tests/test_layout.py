"""The library's layout: which of its modules import which (read from the source, lazy imports inside functions
included). Strategies do not import one another: what two of them share lives in a module of its own
(`mtdecode.plain`, `mtdecode.copying`, `mtdecode.policy.rule`). The parts of the library import one another without a
circle, so that none is hidden by a late import; the training recipes (`mtdecode.recipes`) use the library and
nothing in it uses them. Each strategy, class and module is short enough to read at one sitting."""

import ast
from pathlib import Path

import mtdecode

LIBRARY = Path(mtdecode.__file__).parent


def imported(path: Path) -> set[str]:
    """Every `mtdecode...` module that the file at `path` imports, anywhere in it (a `from X import name` counts as X
    and as X.name, since the name may be a module)."""
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            found |= {alias.name for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            found.add(node.module)
            found |= {f"{node.module}.{alias.name}" for alias in node.names}
    return {name for name in found if name.startswith("mtdecode.")}


def part(module: str) -> str:
    """The part of the library a module belongs to: `mtdecode.costs.priors` -> `costs`."""
    return module.split(".")[1]


def modules() -> dict[str, Path]:
    found = {}
    for path in LIBRARY.rglob("*.py"):
        parts = path.relative_to(LIBRARY.parent).with_suffix("").parts
        found[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path
    return found


def strategy_of(module: str) -> str:
    """The strategy a module belongs to: `mtdecode.strategies.lookahead.pool` -> `mtdecode.strategies.lookahead`."""
    return ".".join(module.split(".")[:3])


def test_no_strategy_imports_another():
    """Each strategy's file or package imports no other strategy (only the registry, `mtdecode.strategies`, lists
    them all)."""
    strategies = {name for name in modules() if name.startswith("mtdecode.strategies.")}
    crossing = {
        name: sorted(other for other in imported(path) & strategies if strategy_of(other) != strategy_of(name))
        for name, path in modules().items()
        if name in strategies
    }
    assert not {name: found for name, found in crossing.items() if found}, crossing
    assert strategies >= {"mtdecode.strategies.eagle", "mtdecode.strategies.lookahead", "mtdecode.strategies.mtad"}


def test_the_parts_of_the_library_import_one_another_without_a_circle():
    """The graph of parts (`zoo`, `strategies`, `costs`, ...; lazy imports included) has no cycle, and only the
    recipes import the recipes."""
    found = {name: path for name, path in modules().items() if name != "mtdecode"}  # the front door imports all
    parts = {part(name) for name in found}
    edges: dict[str, set[str]] = {}
    for name, path in found.items():
        edges.setdefault(part(name), set()).update(
            part(other) for other in imported(path) if part(other) in parts - {part(name)}
        )
    assert not {p for p, targets in edges.items() if "recipes" in targets}, edges
    circle = find_circle(edges)
    assert circle is None, f"the parts import one another in a circle: {' -> '.join(circle)}"


def find_circle(edges: dict[str, set[str]]) -> list[str] | None:
    """A cycle of the directed graph `edges` as a path that returns to its start, or None (depth-first search)."""
    state: dict[str, str] = {}  # "open" while on the path, "done" after

    def visit(node: str, path: list[str]) -> list[str] | None:
        state[node] = "open"
        for nxt in sorted(edges.get(node, ())):
            if state.get(nxt) == "open":
                return path[path.index(nxt) :] + [nxt] if nxt in path else [node, nxt]
            if nxt not in state and (found := visit(nxt, [*path, nxt])):
                return found
        state[node] = "done"
        return None

    for start in sorted(edges):
        if start not in state and (found := visit(start, [start])):
            return found
    return None


def test_the_circle_finder_finds_a_circle():
    """The check above can fail: the old layout's circle (the strategies read costs from `tuning`, whose reference
    recording imported `strategies.eagle` late) is found; a layered graph has none."""
    assert find_circle({"strategies": {"tuning", "zoo"}, "tuning": {"strategies", "zoo"}, "zoo": set()}) == [
        "strategies", "tuning", "strategies"
    ]
    assert find_circle({"zoo": {"model"}, "strategies": {"zoo", "model", "tuning"}, "tuning": {"zoo"}}) is None


def test_every_script_imports_names_that_exist():
    """The benchmark scripts and the course's notebooks import only what the library has (a name that moved or was
    renamed breaks a script that no test runs; two benchmarks imported a renamed `mtdecode.bench._tokenize`)."""
    import importlib

    root = LIBRARY.parent
    missing = []
    for path in sorted([*root.glob("benchmarks/*.py"), *root.glob("tutorials/*.py")]):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom) and node.module and node.module.split(".")[0] == "mtdecode":
                module = importlib.import_module(node.module)
                for alias in node.names:
                    if not hasattr(module, alias.name) and not module_exists(f"{node.module}.{alias.name}"):
                        missing.append(f"{path.relative_to(root)}: {node.module}.{alias.name}")
    assert not missing, missing


def module_exists(name: str) -> bool:
    import importlib.util

    try:
        return importlib.util.find_spec(name) is not None
    except ModuleNotFoundError:
        return False


def sizes() -> dict[str, int]:
    """Lines per module of the library, and per class (`path:Class`)."""
    found = {}
    for path in LIBRARY.rglob("*.py"):
        source, name = path.read_text(), path.relative_to(LIBRARY).as_posix()
        found[name] = source.count("\n")
        for node in ast.walk(ast.parse(source)):
            if isinstance(node, ast.ClassDef):
                found[f"{name}:{node.name}"] = node.end_lineno - node.lineno + 1
    return found


def oversized(found: dict[str, int]) -> list[str]:
    """What is too long to read at one sitting: a strategy's file over 200 lines (EAGLE's package over 400 in all),
    a class over 200, a module outside `mtdecode/testing/` over 500."""
    files = {name: n for name, n in found.items() if ":" not in name}
    eagle = sum(n for name, n in files.items() if name.startswith("strategies/eagle/"))
    too_long = [f"strategies/eagle/: {eagle} lines" for _ in range(eagle > 400)]
    for name, n in found.items():
        strategy = name.startswith("strategies/") and not name.startswith("strategies/eagle/") and ":" not in name
        limit = 200 if strategy or ":" in name else 500 if not name.startswith("testing/") else None
        if limit is not None and n > limit:
            too_long.append(f"{name}: {n} lines")
    return too_long


def test_every_strategy_and_class_reads_in_one_sitting():
    assert oversized(sizes()) == []


def test_the_size_check_finds_a_long_strategy_class_and_module():
    found = {"strategies/jacobi.py": 201, "strategies/eagle/tree.py": 250, "strategies/eagle/loop.py": 151,
             "session.py:Session": 201, "costs/curves.py": 501, "testing/mutants.py": 900, "plain.py": 500}  # fmt: skip
    expected = ["strategies/jacobi.py: 201 lines", "strategies/eagle/: 401 lines", "session.py:Session: 201 lines",
                "costs/curves.py: 501 lines"]  # fmt: skip
    assert sorted(oversized(found)) == sorted(expected)
