"""The package's imports follow DESIGN.md's one-directional data flow: every import of a dhwt
module (at any depth: inside functions and under TYPE_CHECKING too, since a lazy import is still
an arrow) goes down LAYERS, no two modules import each other even indirectly, and no module takes
a private name (leading underscore) from another; nor does a test (tests reach the package
through its public names)."""

from __future__ import annotations

import ast
from dataclasses import dataclass
from pathlib import Path

import networkx as nx
import pytest

ROOT = Path(__file__).resolve().parents[1]

# Bottom first; a module may import its own package and any lower layer, never a peer or higher.
# Why: text serves natural text through languages' Batch and masking symbol; config composes
# languages', text's and models' settings; runs (the run-directory format) lies under training,
# which writes it, and analysis, which reads it via load_run; theory trains through the
# library's runner (training) and reads runs back; pretrained is input.
LAYERS: tuple[frozenset[str], ...] = tuple(frozenset(layer) for layer in (
    {"errors", "filenames", "defaults", "tomlwrite", "checksums"},
    {"userfiles", "directories", "checks"},
    {"languages", "pretrained"},
    {"text"},
    {"models"},
    {"config"},
    {"runs"},
    {"training", "analysis"},
    {"theory"},
    {"report"},
    {"commands"},
    {"cli"},
    {"__main__", "dhwt"},
))

#: (importer, imported) pairs allowed against the rules above, each with its reason.
KNOWN: dict[tuple[str, str], str] = {}


@dataclass(frozen=True)
class Import:
    source: str  # the importing module
    target: str  # the dhwt module imported (a name imported from a package: the package)
    name: str | None  # the name taken with `from target import name`, or read as `target.name`
    line: int


def modules() -> dict[str, Path]:
    """Every module of dhwt/ by dotted name (a package by its own name)."""
    found = {}
    for path in sorted((ROOT / "dhwt").rglob("*.py")):
        parts = path.relative_to(ROOT).with_suffix("").parts
        found[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path
    return found


def imports(name: str, path: Path, known: dict[str, Path]) -> list[Import]:
    """The dhwt imports of one module, anywhere in it; attribute reads `alias._x` of a module
    imported whole count as taking `_x`."""
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    found: list[Import] = []
    aliases: dict[str, str] = {}

    def owner(dotted: str) -> str:
        while dotted not in known:
            dotted = dotted.rpartition(".")[0]
        return dotted

    tree = ast.parse(path.read_text(), str(path))
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name == "dhwt" or alias.name.startswith("dhwt."):
                    found.append(Import(name, owner(alias.name), None, node.lineno))
                    if alias.asname:
                        aliases[alias.asname] = owner(alias.name)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parent = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join(parent + ([base] if base else []))
            if base != "dhwt" and not base.startswith("dhwt."):
                continue
            for alias in node.names:
                if f"{base}.{alias.name}" in known:  # a module: `from dhwt.x import module`
                    found.append(Import(name, f"{base}.{alias.name}", None, node.lineno))
                    aliases[alias.asname or alias.name] = f"{base}.{alias.name}"
                else:
                    found.append(Import(name, owner(base), alias.name, node.lineno))
    for node in ast.walk(tree):
        if (isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name)
                and node.value.id in aliases):
            found.append(Import(name, aliases[node.value.id], node.attr, node.lineno))
    return found


def package_of(module: str) -> str:
    """The layer key of a module: its top package under dhwt ("dhwt" for dhwt itself)."""
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else "dhwt"


def layer(module: str) -> int:
    return next(i for i, members in enumerate(LAYERS) if package_of(module) in members)


@pytest.fixture(scope="module")
def graph() -> tuple[dict[str, Path], list[Import]]:
    known = modules()
    return known, [imp for name, path in known.items() for imp in imports(name, path, known)]


def test_every_package_has_a_layer(graph):
    known, _ = graph
    missing = sorted({package_of(m) for m in known} - set().union(*LAYERS))
    assert not missing, f"packages with no place in LAYERS: {missing}"


def test_imports_go_down_the_layers(graph):
    _, found = graph
    wrong = sorted({
        f"{i.source} imports {i.target} (line {i.line}): {package_of(i.source)} may not "
        f"import {package_of(i.target)}"
        for i in found
        if package_of(i.source) != package_of(i.target) and layer(i.target) >= layer(i.source)
        and (i.source, i.target) not in KNOWN
    })
    assert not wrong, "imports against DESIGN.md's order:\n" + "\n".join(wrong)


def test_no_import_cycles(graph):
    known, found = graph
    modules_graph = nx.DiGraph()
    modules_graph.add_nodes_from(known)
    modules_graph.add_edges_from((i.source, i.target) for i in found
                                 if i.source != i.target and (i.source, i.target) not in KNOWN)
    cycles = sorted(" -> ".join([*c, c[0]]) for c in nx.simple_cycles(modules_graph))
    assert not cycles, "import cycles:\n" + "\n".join(cycles)


def test_no_private_names_cross_modules(graph):
    _, found = graph
    private = sorted({
        f"{i.source} takes {i.target}.{i.name} (line {i.line})" for i in found
        if i.name and i.name.startswith("_") and not i.name.startswith("__")
        and i.source != i.target
    })
    assert not private, "private names imported from another module:\n" + "\n".join(private)


def test_the_checks_see_lazy_typing_and_private_imports(tmp_path):
    """The parser itself: imports inside functions and under TYPE_CHECKING, relative imports,
    and attribute reads of a private name through a module alias are all found."""
    (tmp_path / "dhwt" / "a").mkdir(parents=True)
    for name in ("dhwt/__init__.py", "dhwt/a/__init__.py", "dhwt/b.py"):
        (tmp_path / name).write_text("")
    source = tmp_path / "dhwt" / "a" / "m.py"
    source.write_text(
        "from typing import TYPE_CHECKING\n"
        "if TYPE_CHECKING:\n    from dhwt.b import Thing\n"
        "def f():\n    from ..b import _hidden\n    import dhwt.b as b\n    return b._other\n"
    )
    known = {"dhwt": None, "dhwt.a": None, "dhwt.b": None, "dhwt.a.m": source}
    found = imports("dhwt.a.m", source, known)
    assert {(i.target, i.name) for i in found} == {
        ("dhwt.b", "Thing"), ("dhwt.b", "_hidden"), ("dhwt.b", None), ("dhwt.b", "_other")}


#: Heavy numeric packages: a report renders numbers it is given, a recipe asks the library.
NUMERIC = ("torch", "scipy", "sklearn")
#: Recipes that still compute, each with its reason (none since issue 49 moved the lifecycles).
COMPUTING_RECIPES: dict[str, str] = {}


def third_party(path: Path) -> set[str]:
    """The top-level names of the packages a module imports outside dhwt, at any depth."""
    found = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            found |= {alias.name.split(".")[0] for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and not node.level and node.module:
            found.add(node.module.split(".")[0])
    return found - {"dhwt"}


def test_reports_and_recipes_compute_nothing(graph):
    """DESIGN.md: a command computes a typed result through the library (analysis/ and the
    components), then renders it through report/. So no report module, and no recipe but those
    of COMPUTING_RECIPES, imports torch, scipy or scikit-learn."""
    known, _ = graph
    computing = sorted(
        f"{name} imports {', '.join(sorted(third_party(path) & set(NUMERIC)))}"
        for name, path in known.items()
        if package_of(name) in ("report", "commands") and name not in COMPUTING_RECIPES
        and third_party(path) & set(NUMERIC))
    assert not computing, "reports and recipes that compute:\n" + "\n".join(computing)


def test_analysis_holds_no_sentences(graph):
    """The words a user reads are report/'s, and measured findings live in data files beside
    the code that reads them (dhwt/analysis/dh_findings.json), each naming its study: no module
    of analysis/ keeps a sentence (a string of five words or more) at its top level."""
    known, _ = graph
    sentences = []
    for name, path in known.items():
        if package_of(name) != "analysis":
            continue
        for node in ast.parse(path.read_text(), str(path)).body:
            if isinstance(node, (ast.Assign, ast.AnnAssign)) and node.value is not None:
                sentences += [f"{name} line {node.lineno}: {n.value[:60]!r}"
                              for n in ast.walk(node.value) if isinstance(n, ast.Constant)
                              and isinstance(n.value, str) and len(n.value.split()) >= 5]
    assert not sentences, "sentences kept in analysis/:\n" + "\n".join(sentences)


def private_names(paths: list[Path]) -> set[str]:
    """The private names (one leading underscore) that `paths` define: functions, classes,
    assigned names and attributes (`self._x = ...`), arguments."""
    found = set()
    for path in paths:
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                found.add(node.name)
            elif isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store):
                found.add(node.id)
            elif isinstance(node, ast.Attribute) and isinstance(node.ctx, ast.Store):
                found.add(node.attr)
            elif isinstance(node, ast.arg):
                found.add(node.arg)
            elif isinstance(node, ast.alias):
                found.add((node.asname or node.name).split(".")[0])
    return {n for n in found if n.startswith("_") and not n.startswith("__")}


def private_uses(path: Path, theirs: set[str]) -> list[str]:
    """Where the test file `path` takes a private name of the package: imports it from a dhwt
    module, reads it as an attribute (`x._name`, of a module or of an object the package made),
    or names it to setattr/getattr (monkeypatch's too, and as "dhwt.module._name"). A private
    name the test defines itself (a helper, an attribute of its own class) is its own."""
    own = private_names([path])
    wanted = theirs - own
    tree = ast.parse(path.read_text(), str(path))
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and (node.module or "").split(".")[0] == "dhwt":
            found += [f"line {node.lineno}: imports {node.module}.{alias.name}"
                      for alias in node.names if alias.name in theirs]
        elif (isinstance(node, ast.Attribute) and node.attr in wanted
              and not (isinstance(node.value, ast.Name) and node.value.id in ("self", "cls"))):
            found.append(f"line {node.lineno}: reads .{node.attr}")
        elif (isinstance(node, ast.Call) and isinstance(node.func, (ast.Name, ast.Attribute))
              and (node.func.id if isinstance(node.func, ast.Name) else node.func.attr)
              in ("setattr", "getattr", "delattr", "hasattr", "delenv", "setitem")):
            for arg in node.args[:2]:
                if isinstance(arg, ast.Constant) and isinstance(arg.value, str):
                    name = arg.value.rpartition(".")[2]
                    dotted = arg.value.startswith("dhwt.") and name in theirs
                    if dotted or ("." not in arg.value and name in wanted):
                        found.append(f"line {node.lineno}: names {arg.value!r}")
    return found


def test_tests_take_no_private_names_of_the_package():
    """Tests reach dhwt (and the experiments' scripts they load) through public names only, so
    that a private helper can change without a test to rewrite, and what a test checks is
    behaviour a caller sees. Dunders are public; a test's own private names are its own."""
    theirs = private_names([*(ROOT / "dhwt").rglob("*.py"), *(ROOT / "experiments").rglob("*.py")])
    found = sorted(f"{path.relative_to(ROOT)} {use}"
                   for path in sorted((ROOT / "tests").rglob("*.py"))
                   for use in private_uses(path, theirs))
    assert not found, "tests that take private names of the package:\n" + "\n".join(found)


def test_the_private_name_check_sees_imports_attributes_and_patches(tmp_path):
    """The checker itself: an imported private name, a private attribute of a package object,
    and one named to monkeypatch are found; the test's own private names are not."""
    test = tmp_path / "test_x.py"
    test.write_text(
        "from dhwt.a import _hidden\n"
        "def _mine(trainer, monkeypatch):\n"
        "    trainer._update()\n"
        "    monkeypatch.setattr('dhwt.b._cores', None)\n"
        "    monkeypatch.setattr(trainer, '_draw', None)\n"
        "    return _mine, trainer.__class__\n"
    )
    assert sorted(use.split(":")[0] for use in private_uses(
        test, {"_hidden", "_update", "_cores", "_draw", "_mine"})) == [
        "line 1", "line 3", "line 4", "line 5"]


#: Test files and folders that test across modules, each with why; every other test file sits
#: at its module's mirrored path (dhwt/a/b.py -> tests/a/test_b.py).
CROSS_CUTTING: dict[str, str] = {
    "tests/test_*.py": "the package as a whole: docs, README, packaging, layers, doctests, study",
    "tests/reliability/": "what a user meets across commands: bad input, faults, messages, kills",
    "tests/experiments/": "the experiments' scripts and studies, not modules of dhwt",
    "tests/commands/test_json.py": "every command's --json document",
    "tests/runs/test_one_door.py": "that no module but runs/ builds paths in a run directory",
    "tests/models/test_architectures.py": "what every architecture owes the ensemble contract",
    "tests/models/test_devices.py": "every model's tensors on the device of its inputs",
    "tests/training/test_gpu.py": "the CUDA path of models and training, where a GPU is",
    "tests/theory/test_can_fail.py": "every theorem's check can fail",
    "tests/theory/test_checks_pass.py": "every theorem's check passes",
    "tests/theory/test_proofs_match_checks.py": "proofs/ and the registry name the same theorems",
}


def test_tests_mirror_the_package():
    """A module's tests are found where its path says (dhwt/a/b.py -> tests/a/test_b.py), unless
    they test across modules, in a place CROSS_CUTTING declares."""
    mirrors = {Path("tests", *path.relative_to(ROOT / "dhwt").parent.parts, f"test_{path.name}")
               for path in (ROOT / "dhwt").rglob("*.py") if path.name != "__init__.py"}
    stray = []
    for path in sorted((ROOT / "tests").rglob("test_*.py")):
        name = path.relative_to(ROOT)
        declared = any(name.match(place) if place.endswith(".py") else
                       str(name).startswith(place) for place in CROSS_CUTTING)
        if name not in mirrors and not declared:
            stray.append(str(name))
    assert not stray, ("test files that mirror no module of dhwt/ and are not declared "
                       "cross-cutting:\n" + "\n".join(stray))
