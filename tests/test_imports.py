"""How Ember's modules import each other, and what importing one of them loads.

The layering is read off the source with `ast`: every `import` counts, also one inside
a function or under `if TYPE_CHECKING:` (a cycle hidden there is still a cycle in the
design). What an import loads is checked in a fresh interpreter: `import ember.runtime`
(load and run an artifact) must not load the compiler, and the modules a device-side
server needs must load nothing but the standard library.
"""

from __future__ import annotations

import ast
import functools
import json
import subprocess
import sys
from collections.abc import Iterable, Mapping
from pathlib import Path

import pytest

import ember

ROOT = Path(ember.__file__).resolve().parent

# What a program that only loads and runs artifacts must not load.
HEAVY_PACKAGES = ("onnx", "onnxruntime", "rich", "xgboost", "torch")
COMPILER = (
    "ember.autoschedule",
    "ember.backend",
    "ember.build",
    "ember.codegen",
    "ember.frontend",
    "ember.graph",
    "ember.kernel",
    "ember.loop",
    "ember.partition",
    "ember.schedule",
    "ember.te",
    "ember.testing",
    "ember.toolchain",
    "ember.topi",
)
# The modules a device-side server (a single file on a board with a bare Python) is
# made of: the helper-process protocol, errors, settings, the target and the device
# model it reports, and the C ABI of the libraries it loads.
SERVER_MODULES = (
    "ember.autoschedule.measure_abi",
    "ember.autoschedule.worker",
    "ember.cli_commands.rpc",
    "ember.config",
    "ember.device",
    "ember.errors",
    "ember.lazy",
    "ember.rpc.bundle",
    "ember.rpc.device_worker",
    "ember.rpc.protocol",
    "ember.rpc.server",
    "ember.rpc.service",
    "ember.rpc.session",
    "ember.rpc.tracker",
    "ember.runtime.abi",
    "ember.target",
)


# -- the import graph ---------------------------------------------------------------------


@functools.cache
def import_graph() -> dict[str, frozenset[str]]:
    """Every module of ember/ -> the ember modules it imports anywhere in its file."""
    paths = {_module_name(path): path for path in ROOT.rglob("*.py")}
    return {
        name: frozenset(_imported(name, path, set(paths)) - {name}) for name, path in paths.items()
    }


def _module_name(path: Path) -> str:
    parts = ["ember", *path.relative_to(ROOT).with_suffix("").parts]
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _imported(name: str, path: Path, modules: set[str]) -> set[str]:
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), str(path))):
        if isinstance(node, ast.Import):
            found.update(_deepest(alias.name, modules) for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level:  # relative: from the package, one level up per extra dot
                base = package.split(".")[: len(package.split(".")) - node.level + 1]
                source = ".".join([*base, *([node.module] if node.module else [])])
            else:
                source = node.module or ""
            for alias in node.names:  # `from ember.x import y`: y may be a module
                submodule = f"{source}.{alias.name}"
                found.add(submodule if submodule in modules else _deepest(source, modules))
    return {module for module in found if module}


def _deepest(dotted: str, modules: set[str]) -> str:
    """The longest prefix of `dotted` that is an ember module ("" for none)."""
    while dotted and dotted not in modules:
        dotted = dotted.rpartition(".")[0]
    return dotted


def find_cycle(graph: Mapping[str, Iterable[str]], nodes: set[str]) -> list[str] | None:
    """An import cycle among `nodes` (its modules, the first repeated at the end), or
    None when the imports among them go one way."""
    done: set[str] = set()
    path: list[str] = []

    def visit(node: str) -> list[str] | None:
        path.append(node)
        for target in sorted(set(graph.get(node, ())) & nodes):
            if target in path:
                return [*path[path.index(target) :], target]
            if target not in done:
                cycle = visit(target)
                if cycle:
                    return cycle
        path.pop()
        done.add(node)
        return None

    for node in sorted(nodes):
        if node not in done:
            cycle = visit(node)
            if cycle:
                return cycle
    return None


def import_path(
    graph: Mapping[str, Iterable[str]], sources: set[str], targets: set[str]
) -> list[str] | None:
    """The shortest chain of imports from a module in `sources` to one in `targets`.
    The package `ember` is never passed through: its imports are lazy re-exports."""
    frontier = [[source] for source in sorted(sources)]
    seen = set(sources)
    while frontier:
        chain = frontier.pop(0)
        for target in sorted(graph.get(chain[-1], ())):
            if target in targets:
                return [*chain, target]
            if target not in seen and target != "ember":
                seen.add(target)
                frontier.append([*chain, target])
    return None


def _package(name: str) -> set[str]:
    return {module for module in import_graph() if module == name or module.startswith(name + ".")}


def test_the_cycle_finder_reports_a_cycle_and_accepts_a_layering() -> None:
    graph = {"a": ["b"], "b": ["c"], "c": ["a", "d"], "d": []}
    assert find_cycle(graph, set(graph)) == ["a", "b", "c", "a"]
    assert find_cycle(graph, {"a", "b", "d"}) is None
    assert import_path(graph, {"a"}, {"d"}) == ["a", "b", "c", "d"]
    assert import_path(graph, {"d"}, {"a"}) is None


def test_the_graph_sees_imports_inside_functions_and_type_checking() -> None:
    imports = import_graph()
    assert "ember.autoschedule.xgb_model" in imports["ember.autoschedule.task_scheduler"]
    assert "ember.build" in imports["ember"]  # under TYPE_CHECKING only
    assert "ember.graph.printer" in imports["ember.graph.ir"]  # inside a method


def test_autoschedule_imports_go_one_way() -> None:
    cycle = find_cycle(import_graph(), _package("ember.autoschedule"))
    assert cycle is None, "import cycle in ember/autoschedule: " + " -> ".join(cycle or [])


def test_build_and_autoschedule_do_not_import_each_other() -> None:
    graph, build, autoschedule = import_graph(), {"ember.build"}, _package("ember.autoschedule")
    down, up = import_path(graph, build, autoschedule), import_path(graph, autoschedule, build)
    assert down is None or up is None, (
        "ember.build and ember.autoschedule import each other: "
        f"{' -> '.join(down or [])} and {' -> '.join(up or [])}"
    )


# -- what an import loads -----------------------------------------------------------------


def loaded_modules(code: str, bare: bool = False) -> list[str]:
    """The modules a fresh interpreter loads to run `code` (not those it starts with).
    `bare`: without site-packages (`python -S`), as on a board with only Python."""
    script = (
        "import json, sys\n"
        "started = set(sys.modules)\n"
        f"{code}\n"
        "print(json.dumps(sorted(set(sys.modules) - started)))"
    )
    result = subprocess.run(
        [sys.executable, *(["-S"] if bare else []), "-c", script],
        capture_output=True,
        text=True,
        check=False,
        cwd=ROOT.parent,  # `python -S` finds ember here
    )
    assert result.returncode == 0, result.stderr
    return list(json.loads(result.stdout.splitlines()[-1]))


def _within(module: str, packages: Iterable[str]) -> bool:
    return any(module == package or module.startswith(package + ".") for package in packages)


def test_import_ember_loads_nothing_else() -> None:
    loaded = loaded_modules("import ember")
    assert [m for m in loaded if m.startswith("ember")] == ["ember"]
    assert _not_stdlib(loaded, allowed=["ember"]) == []


def test_the_names_of_ember_are_imported_on_first_use() -> None:
    loaded_modules(
        "import ember.build, ember  # the module first: ember.build is still the function\n"
        "assert ember.build is sys.modules['ember.build'].build\n"
        "assert ember.Library is sys.modules['ember.build'].Library\n"
        "from ember.errors import EmberError\n"
        "from ember.target import Target\n"
        "assert ember.EmberError is EmberError and ember.Target is Target\n"
        "assert callable(ember.frontend.from_onnx) and callable(ember.testing.get_workload)\n"
        "assert callable(ember.runtime.load) and callable(ember.autoschedule.extract_tasks)\n"
        "assert set(ember.__all__) <= set(dir(ember))\n"
        "try:\n"
        "    ember.no_such_name\n"
        "except AttributeError as error:\n"
        "    assert 'no_such_name' in str(error)\n"
        "else:\n"
        "    raise AssertionError('ember.no_such_name resolved')"
    )


def test_type_checkers_see_the_names_ember_serves() -> None:
    tree = ast.parse((ROOT / "__init__.py").read_text(encoding="utf-8"))
    (block,) = [
        node
        for node in tree.body
        if isinstance(node, ast.If) and ast.unparse(node.test) == "TYPE_CHECKING"
    ]
    seen = {
        alias.name
        for node in block.body
        if isinstance(node, ast.ImportFrom)
        for alias in node.names
    }
    served = {*ember._SUBPACKAGES, *ember._NAMES}
    assert seen == served == set(ember.__all__) - {"__version__"}


def test_the_runtime_loads_neither_the_compiler_nor_heavy_packages() -> None:
    loaded = loaded_modules(
        "import ember.runtime\n"
        "from ember.runtime import BenchmarkResult, Module, TensorSpec, load, read_metadata"
    )
    assert [m for m in loaded if _within(m, (*HEAVY_PACKAGES, *COMPILER))] == []
    assert {"ember.runtime.artifact", "ember.runtime.module"} <= set(loaded)


@pytest.mark.parametrize("module", SERVER_MODULES)
def test_a_device_server_module_needs_only_the_standard_library(module: str) -> None:
    # Imported as any program imports it, packages included (their names import
    # lazily), in a Python without site-packages: no NumPy, as on a bare board.
    # The packages of every server module (their __init__ import names lazily).
    packages = sorted(
        {".".join(m.split(".")[:i]) for m in SERVER_MODULES for i in range(1, m.count(".") + 1)}
    )
    loaded = loaded_modules(f"import {module}", bare=True)
    assert _not_stdlib(loaded, allowed=[*packages, *SERVER_MODULES]) == []


def _not_stdlib(loaded: Iterable[str], allowed: Iterable[str]) -> list[str]:
    # multiprocessing registers the main module a second time, as __mp_main__.
    allowed = {*allowed, "__mp_main__"}
    return [
        module
        for module in loaded
        if module.split(".")[0] not in sys.stdlib_module_names and module not in allowed
    ]
