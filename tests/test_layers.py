"""The package's shape (issue 21, docs/architecture.md "Layers"): every import of every module
under src/virtualize, at any depth (function-level lazy imports included), read with `ast`.

- Imports flow one way, down the layers below (a module may import its own layer and the
  layers under it, never one above).
- No module imports another package's `_private` module or `_private` name (the few
  exceptions are listed with their reason).
- No module is over 1,000 lines.
- No import circle anywhere in the package (issue 29); no module outside an output kind's
  package and `outputs/registry.py` imports the kind's package; `cli.py` names no kind.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

import virtualize

ROOT = Path(virtualize.__file__).resolve().parent

# Bottom first. A module's layer is its first component under virtualize/ (a top-level
# module, or a package with everything in it). `run` (the worker pool) scans files, so it
# sits on formats and under plan; the planner uses neither (it is pure: docs/planning.md).
# `outputs` sits above run (staleness re-scans a touched source on the workers).
LAYERS = [
    # codec_core: the codecs' names and functions (numpy only); codecs: them as zarr codecs
    # (numpy, zarr, imagecodecs); plugins: entry points only
    ("model", "_version", "codec_core", "codecs", "plugins"),
    ("storage", "conventions"),
    ("formats",),
    ("run",),
    ("plan",),
    ("outputs",),
    ("checks", "open", "report"),
    ("api",),
    ("cli", "xarray_backend", "fsspec_backend", "__init__"),
]
LEVEL = {name: i for i, names in enumerate(LAYERS) for name in names}

# (importer, imported private thing) -> why. Keep this short.
PRIVATE_EXCEPTIONS: dict[tuple[str, str], str] = {}

MAX_LINES = 1000


def modules():
    for path in sorted(ROOT.rglob("*.py")):
        parts = path.relative_to(ROOT).with_suffix("").parts
        yield path, parts


def package_of(parts: tuple[str, ...]) -> tuple[str, ...]:
    """The package a module's relative imports start from."""
    return parts[:-1]


def is_package(parts: tuple[str, ...]) -> bool:
    return (ROOT.joinpath(*parts) / "__init__.py").exists() if parts else True


def imports(path: Path, parts: tuple[str, ...]):
    """(line, target module parts, imported name or None) of every virtualize import."""
    tree = ast.parse(path.read_text(), str(path))
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom):
            if node.level:
                base = package_of(parts)
                base = base[: len(base) - (node.level - 1)]
                mod = base + (tuple(node.module.split(".")) if node.module else ())
            elif node.module and node.module.split(".")[0] == "virtualize":
                mod = tuple(node.module.split(".")[1:])
            else:
                continue
            for alias in node.names:
                # `from . import x` names a module when x is one
                if is_package(mod) and (ROOT.joinpath(*mod, alias.name).with_suffix(".py").exists()
                                        or is_package(mod + (alias.name,))):
                    yield node.lineno, mod + (alias.name,), None
                else:
                    yield node.lineno, mod, alias.name
        elif isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name.split(".")[0] == "virtualize":
                    yield node.lineno, tuple(alias.name.split(".")[1:]), None


def attribute_uses(path: Path, parts: tuple[str, ...]):
    """(line, module parts + attribute) of every `alias.name` where `alias` is a virtualize
    module bound by an import (`from .. import storage`, then `storage._x`)."""
    tree = ast.parse(path.read_text(), str(path))
    bound: dict[str, tuple[str, ...]] = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.level:
            base = package_of(parts)
            base = base[: len(base) - (node.level - 1)]
            mod = base + (tuple(node.module.split(".")) if node.module else ())
            for alias in node.names:
                target = mod + (alias.name,)
                if is_package(target) or ROOT.joinpath(*target).with_suffix(".py").exists():
                    bound[alias.asname or alias.name] = target
        elif isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name.split(".")[0] == "virtualize" and alias.asname:
                    bound[alias.asname] = tuple(alias.name.split(".")[1:])
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) \
                and node.value.id in bound:
            yield node.lineno, bound[node.value.id] + (node.attr,)


def private(name: str) -> bool:
    return name.startswith("_") and not name.startswith("__")


def owner(path: tuple[str, ...]) -> tuple[str, ...] | None:
    """Who may use a private thing at `path` (module parts + name): the package holding the
    first private part (a top-level module's privates are its own)."""
    for i, part in enumerate(path):
        if private(part) and not (i == 0 and part == "_version"):
            holder = path[:i]
            if is_package(holder):
                return holder
            return holder[:-1] if len(holder) > 1 else holder
    return None


def layer(parts: tuple[str, ...]) -> str:
    return parts[0] if parts else "__init__"


def ups_in(path: Path, parts: tuple[str, ...]) -> list[str]:
    """The imports of one module that run up the layers."""
    ups = []
    for line, mod, _name in imports(path, parts):
        target = layer(mod)
        assert layer(parts) in LEVEL, f"{path}: place {layer(parts)} in LAYERS"
        assert target in LEVEL, f"{path}:{line}: place {target} in LAYERS"
        if LEVEL[target] > LEVEL[layer(parts)]:
            ups.append(f"{path.name}:{line} ({layer(parts)}) imports "
                       f"{'.'.join(mod)} ({target}), a layer above")
    return ups


def privates_in(path: Path, parts: tuple[str, ...]) -> list[str]:
    """The imports of one module of another package's private modules or names."""
    found = []
    for line, mod, name in imports(path, parts):
        thing = mod + ((name,) if name else ())
        who = owner(thing)
        if who is None or parts[: len(who)] == who:
            continue
        if (".".join(parts), ".".join(thing)) not in PRIVATE_EXCEPTIONS:
            found.append(f"{path.name}:{line} imports {'.'.join(thing)}, "
                         f"private to {'.'.join(who) or 'virtualize'}")
    for line, thing in attribute_uses(path, parts):  # (storage._x through the module)
        who = owner(thing)
        if who is not None and parts[: len(who)] != who and \
                (".".join(parts), ".".join(thing)) not in PRIVATE_EXCEPTIONS:
            found.append(f"{path.name}:{line} uses {'.'.join(thing)}, "
                         f"private to {'.'.join(who) or 'virtualize'}")
    return found


def test_imports_run_down_the_layers():
    ups = [u for path, parts in modules() for u in ups_in(path, parts)]
    assert not ups, "\n".join(ups)


def test_no_import_of_another_packages_private_names():
    found = [f for path, parts in modules() for f in privates_in(path, parts)]
    assert not found, "\n".join(found)


def test_api_modules_share_only_public_names():
    """The API's jobs (checking, create, appending, cubes) are made of the shared steps
    (api/steps.py) and the recipe (api/recipe.py) by their public names: no module of api/
    takes another's `_private` name (docs/architecture.md)."""
    found = [f"{path.name}:{line} imports {'.'.join(mod)}.{name}"
             for path, parts in modules() if parts[0] == "api"
             for line, mod, name in imports(path, parts)
             if mod[:1] == ("api",) and mod != parts and name and private(name)]
    assert not found, "\n".join(found)


def test_the_checks_find_what_they_look_for(tmp_path):
    """A planner module importing outputs/ lazily, and the scanners' private helpers, fails."""
    f = tmp_path / "m.py"
    f.write_text("from ..model import Plan\n"
                 "def f():\n"
                 "    from ..outputs.metadata import array_doc\n"
                 "    from ..formats._io import digest_blocks\n"
                 "    from ._common import Context\n")
    assert [u.split(" imports ")[1] for u in ups_in(f, ("plan", "concat"))] == \
        ["outputs.metadata (outputs), a layer above"]
    assert [p.split(" imports ")[1] for p in privates_in(f, ("plan", "concat"))] == \
        ["formats._io.digest_blocks, private to formats"]
    f.write_text("from .. import storage\nstorage._fs_path(1)\nstorage.fs_path(1)\n")
    assert [p.split(" uses ")[1] for p in privates_in(f, ("formats", "zarr2"))] == \
        ["storage._fs_path, private to storage"]
    f.write_text("from ..model import Plan\n"
                 "def f():\n"
                 "    from ..outputs.metadata import array_doc\n")
    # the same lines in api/ run down; formats/ may use its own private helpers
    assert ups_in(f, ("api", "checking")) == []
    f.write_text("from .._io import digest_blocks\nfrom ._common import x\n")
    assert privates_in(f, ("formats", "hdf5", "walk")) == []


def test_the_exceptions_are_still_needed():
    seen = set()
    for path, parts in modules():
        for _line, mod, name in imports(path, parts):
            seen.add((".".join(parts), ".".join(mod + ((name,) if name else ()))))
    assert set(PRIVATE_EXCEPTIONS) <= seen


@pytest.mark.parametrize("path", [p for p, _ in modules()], ids=lambda p: str(p.relative_to(ROOT)))
def test_no_module_over_1000_lines(path):
    assert len(path.read_text().splitlines()) <= MAX_LINES


def test_the_walk_sees_lazy_and_relative_imports(tmp_path):
    """The checker itself: imports inside functions, relative and absolute, modules and names."""
    f = tmp_path / "m.py"
    f.write_text("from .. import staging\n"
                 "def f():\n"
                 "    from ...plan._common import x\n"
                 "    import virtualize.formats._io\n"
                 "    from ..cube.reader import _load_json\n")
    found = {(mod, name) for _l, mod, name in imports(f, ("outputs", "kerchunk", "reader"))}
    assert found == {(("outputs", "staging"), None), (("plan", "_common"), "x"),
                     (("formats", "_io"), None), (("outputs", "cube", "reader"), "_load_json")}
    assert owner(("plan", "_common", "x")) == ("plan",)
    assert owner(("outputs", "cube", "reader", "_load_json")) == ("outputs", "cube")
    assert owner(("storage", "_problem")) == ("storage",)
    assert owner(("outputs", "staging", "locked")) is None


def test_a_format_is_named_in_its_plug_in_only():
    """No module outside formats/ spells an inventory's format name (`FileInventory.format`):
    what depends on the format asks its plug-in (`formats.registry.of_inventory`) or the
    inventory (`FileInventory.reference_set`)."""
    from virtualize.formats import registry

    names = {n for fmt in registry.formats() for n in fmt.inventory_formats}
    prefixes = {n.split("-")[0] + "-" for n in names if "-" in n}
    found = []
    for path, parts in modules():
        if layer(parts) == "formats":
            continue
        tree = ast.parse(path.read_text())
        docs = {id(n.value) for n in ast.walk(tree) if isinstance(n, ast.Expr)}
        for node in ast.walk(tree):
            if isinstance(node, ast.Constant) and isinstance(node.value, str) and \
                    id(node) not in docs and (node.value in names - {"kerchunk"}
                                              or node.value in prefixes):
                found.append(f"{path.relative_to(ROOT)}:{node.lineno} {node.value!r}")
    assert not found, "\n".join(found)


def test_every_plug_in_answers_its_protocol():
    """Each format names its inventories (so `of_inventory` finds it); each output kind is
    an `outputs.base.OutputKind` answering what every kind must (its own `detect`,
    `is_ours`, `write`, `open_store`, `recorded`, `refresh`), and one kind, the default,
    claims names without a suffix."""
    from virtualize.formats import registry as formats
    from virtualize.outputs import registry as outputs
    from virtualize.outputs.base import OutputKind

    for fmt in formats.formats():
        assert fmt.inventory_formats, fmt
        assert all(formats.of_inventory(n) is fmt for n in fmt.inventory_formats)
    required = ("detect", "is_ours", "write", "open_store", "recorded", "refresh")
    for kind in outputs.kinds():
        assert isinstance(kind, OutputKind), kind
        assert kind.name and kind.title and kind.suffixes, kind
        assert [n for n in required if getattr(type(kind), n) is getattr(OutputKind, n)] == [], \
            kind.name
        assert outputs.by_name(kind.name) is kind
    assert [k.name for k in outputs.kinds() if "" in k.suffixes] == [outputs.default().name]


# -- the import graph (issue 29) --------------------------------------------------------

def module_of(parts: tuple[str, ...]) -> tuple[str, ...] | None:
    """The module file an import target names: a module, or a package's __init__ (None:
    not a module of the package, e.g. a name inside one)."""
    if ROOT.joinpath(*parts).with_suffix(".py").is_file():
        return parts
    if (ROOT.joinpath(*parts) / "__init__.py").is_file():
        return parts + ("__init__",)
    return None


def import_graph() -> dict[tuple[str, ...], set[tuple[str, ...]]]:
    """module -> the modules it imports (every import at any depth)."""
    graph: dict[tuple[str, ...], set[tuple[str, ...]]] = {}
    for path, parts in modules():
        edges = graph.setdefault(parts, set())
        for _line, mod, _name in imports(path, parts):
            target = module_of(mod)
            if target is not None and target != parts:
                edges.add(target)
    return graph


def circles(graph: dict) -> list[list]:
    """The strongly connected components of more than one module (Tarjan's algorithm)."""
    index: dict = {}
    low: dict = {}
    stack: list = []
    on: set = set()
    found: list[list] = []

    def visit(v) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on.add(v)
        for w in sorted(graph.get(v, ())):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return found


def test_no_import_circles():
    found = circles(import_graph())
    assert not found, "\n".join(" <-> ".join(".".join(m) for m in c) for c in found)


def test_the_circle_check_finds_a_circle():
    graph = {("a",): {("b",)}, ("b",): {("c",)}, ("c",): {("a",), ("d",)}, ("d",): set()}
    assert circles(graph) == [[("a",), ("b",), ("c",)]]
    assert circles({("a",): {("b",)}, ("b",): set()}) == []


def kind_imports(path: Path, parts: tuple[str, ...], kinds) -> list[str]:
    """The imports of one module of an output kind's package (`kinds`: their names) made
    outside that package and outputs/registry.py."""
    if parts == ("outputs", "registry"):
        return []
    found = []
    for line, mod, name in imports(path, parts):
        target = mod + ((name,) if name else ())
        if len(target) >= 2 and target[0] == "outputs" and target[1] in kinds \
                and parts[:2] != target[:2]:
            found.append(f"{'/'.join(parts)}.py:{line} imports {'.'.join(target)}")
    return found


def test_only_its_package_and_the_registry_import_an_output_kind():
    """What differs between output kinds is asked of the kind (`outputs.registry.by_name`),
    never imported from its package: a new kind is one package and one registry line."""
    from virtualize.outputs import registry

    found = [f for path, parts in modules()
             for f in kind_imports(path, parts, registry.KINDS)]
    assert not found, "\n".join(found)


def test_the_kind_import_check_finds_one(tmp_path):
    f = tmp_path / "m.py"
    f.write_text("from ..cube.writer import SOURCES_NAME\nfrom ..base import load_json\n"
                 "def f():\n    from .. import kerchunk\n")
    assert [x.split(" imports ")[1] for x in kind_imports(f, ("outputs", "vrt", "reader"),
                                                            ("cube", "kerchunk"))] == \
        ["outputs.cube.writer.SOURCES_NAME", "outputs.kerchunk"]
    assert kind_imports(f, ("outputs", "cube", "x"), ("cube",)) == []


def test_no_output_kind_imports_the_registry():
    """outputs/registry.py imports the kinds by name (`importlib`, unseen by the circle
    check): a kind that imported it back would close a circle."""
    from virtualize.outputs import registry

    found = [f"{'/'.join(parts)}.py:{line}" for path, parts in modules()
             if parts[0] == "outputs" and len(parts) > 2 and parts[1] in registry.KINDS
             for line, mod, name in imports(path, parts)
             if mod == ("outputs", "registry") or mod + ((name,) if name else ()) ==
             ("outputs", "registry")]
    assert not found, found


def named_kinds(tree: ast.AST, names) -> list[tuple[int, str]]:
    """String constants spelling an output kind's name (`names`), but a dictionary's keys
    and an argument's name (`add_argument("cube", metavar="CUBE")`: what the user gives,
    a cube of any kind)."""
    skip = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Dict):
            skip |= {id(k) for k in node.keys if k is not None}
        elif isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and \
                node.func.attr == "add_argument" and node.args:
            skip.add(id(node.args[0]))
    return [(node.lineno, node.value) for node in ast.walk(tree)
            if isinstance(node, ast.Constant) and node.value in names and id(node) not in skip]


def test_the_command_line_names_no_output_kind():
    """`--format`'s choices and help come from the registry (a new kind needs no change
    of cli.py)."""
    from virtualize.outputs import registry

    names = set(registry.names())
    found = named_kinds(ast.parse((ROOT / "cli.py").read_text()), names)
    assert not found, found
    tree = ast.parse('p.add_argument("--format", choices=["cube", "kerchunk"])\n'
                     'p.add_argument("cube", metavar="CUBE")\nx = {"cube": 1}\n')
    assert named_kinds(tree, names) == [(1, "cube"), (1, "kerchunk")]
