"""The tree keeps the architecture: the contract is stdlib-only, consumer/ never imports the CDK, infra/ takes only
the public standard-library layer of consumer/ and nothing of the lab, and every name has one import path."""

from __future__ import annotations

import ast
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def imported_roots(path: Path) -> set[str]:
    roots = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            roots |= {alias.name.split(".")[0] for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            roots.add(node.module.split(".")[0])
    return roots


def imported_modules(tree: ast.Module) -> set[str]:
    """The full names of the modules a file imports (``import a.b``, ``from a.b import c``: ``a.b``)."""
    modules = {alias.name for node in ast.walk(tree) if isinstance(node, ast.Import) for alias in node.names}
    return modules | {node.module for node in ast.walk(tree) if isinstance(node, ast.ImportFrom) and node.module}


#: The contract and the sibling modules it is split into; each imports the standard library and the others only.
CONTRACT_MODULES = (
    "consumer.contract",
    "consumer.declaration",
    "consumer.errors",
    "consumer.limits",
    "consumer.queue_attributes",
    "consumer.stack_outputs",
)
#: The public layer both halves import, standard library only: the contract's modules, the variables the message
#: sources are configured by and the Lambda target's settings. All that infra/ (and so the CDK app) may import of
#: consumer/.
PUBLIC_STDLIB_MODULES = (*CONTRACT_MODULES, "consumer.sources", "consumer.lambda_target")
#: Modules of consumer/ outside that layer that import the standard library only too: the conversion between Lambda's
#: SQS event and boto3's messages, which the Lambda target, the local demo's event source mapping loop and the
#: simulation share, and which needs neither boto3 nor the CDK.
STDLIB_ONLY_MODULES = (*PUBLIC_STDLIB_MODULES, "consumer.lambda_event")


@pytest.mark.parametrize("module", STDLIB_ONLY_MODULES)
def test_contract_imports_standard_library_only(module: str) -> None:
    """consumer/contract.py, its siblings, consumer/sources.py, consumer/lambda_target.py and
    consumer/lambda_event.py import nothing outside the standard library (and the public layer's modules)."""
    tree = ast.parse((ROOT / (module.replace(".", "/") + ".py")).read_text())
    imported = imported_modules(tree)
    outside = {
        name
        for name in imported - {"__future__", *PUBLIC_STDLIB_MODULES}
        if name.split(".")[0] not in sys.stdlib_module_names
    }
    assert sorted(outside) == []


@pytest.mark.parametrize("path", sorted((ROOT / "infra").rglob("*.py")), ids=lambda p: str(p.relative_to(ROOT)))
def test_infra_imports_only_the_public_layer_of_consumer_and_nothing_of_the_lab(path: Path) -> None:
    """The product's infrastructure and its tools (the alarm evaluator included) import of consumer/ only
    PUBLIC_STDLIB_MODULES: never the runtime, the local tooling or the DLQ tool, and nothing of bench/ (the lab's
    alarm recorder writes data the evaluator reads: infra/alarms/recordings/)."""
    modules = imported_modules(ast.parse(path.read_text()))
    outside = {m for m in modules if m.split(".")[0] in ("consumer", "bench", "tests")} - set(PUBLIC_STDLIB_MODULES)
    assert sorted(outside) == []


@pytest.mark.parametrize("path", sorted((ROOT / "consumer").rglob("*.py")), ids=lambda p: str(p.relative_to(ROOT)))
def test_consumer_never_imports_cdk(path: Path) -> None:
    """No consumer module imports aws_cdk, constructs or cdk_nag."""
    assert imported_roots(path) & {"aws_cdk", "constructs", "cdk_nag", "infra"} == set()


@pytest.mark.parametrize("path", sorted((ROOT / "infra").rglob("*.py")), ids=lambda p: str(p.relative_to(ROOT)))
def test_infra_never_imports_boto3(path: Path) -> None:
    """No infra module imports the AWS runtime SDK."""
    assert imported_roots(path) & {"boto3", "botocore"} == set()


def test_consumer_package_import_is_stdlib_light() -> None:
    """`import consumer` (what synth does to read a declaration) loads no boto3."""
    import subprocess

    code = "import consumer, sys; print(sorted(m for m in ('boto3', 'botocore', 'aws_cdk') if m in sys.modules))"
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


def test_log_extras_never_shadow_log_record_attributes() -> None:
    """logging raises on extra={"thread": ...} and the like; no consumer log call may use such a key."""
    import logging

    reserved = set(vars(logging.LogRecord("n", 0, "p", 0, "m", (), None))) | {"message", "asctime"}
    clashes = []
    for path in sorted((ROOT / "consumer").rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.keyword) and node.arg == "extra" and isinstance(node.value, ast.Dict):
                clashes += [
                    f"{path.name}:{node.value.lineno} {key.value}"
                    for key in node.value.keys
                    if isinstance(key, ast.Constant) and key.value in reserved
                ]
    assert clashes == []


@pytest.mark.parametrize(
    "path", sorted((ROOT / "consumer" / "runtime").rglob("*.py")), ids=lambda p: str(p.relative_to(ROOT))
)
def test_runtime_never_imports_the_tools_that_use_it(path: Path) -> None:
    """consumer/runtime/ is what the container runs: no arrow back up to ops/ or local/, no rich, no moto."""
    modules = imported_modules(ast.parse(path.read_text()))
    forbidden = ("consumer.ops", "consumer.local", "consumer.cli", "rich", "moto", "bench", "tests")
    assert sorted(m for m in modules if any(m == f or m.startswith(f + ".") for f in forbidden)) == []


@pytest.mark.parametrize(
    "path",
    sorted(p for p in (ROOT / "consumer" / "ops").glob("*.py") if p.name not in ("commands.py", "progress.py")),
    ids=lambda p: str(p.relative_to(ROOT)),
)
def test_dlq_tool_logic_leaves_presentation_to_its_commands(path: Path) -> None:
    """consumer/ops/: only commands.py and progress.py render (typer, rich); the logic returns what they show."""
    assert imported_roots(path) & {"typer", "rich", "click"} == set()


def test_consumer_run_loads_neither_rich_nor_moto_nor_the_tools() -> None:
    """`python -m consumer run` (here refusing a missing QUEUE_URL) imports only the runtime's part of the CLI."""
    import os
    import subprocess

    code = (
        "import sys\n"
        "from consumer.cli import main\n"
        "try:\n    main(['run'])\nexcept SystemExit:\n    pass\n"
        "print(sorted(m for m in sys.modules if m.split('.')[0] in ('rich', 'moto')"
        " or m.startswith(('consumer.ops', 'consumer.local'))))"
    )
    env = {k: v for k, v in os.environ.items() if not k.startswith(("QUEUE_URL", "CONSUMER_", "AWS_"))}
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, env=env, capture_output=True, text=True, check=True)
    assert out.stdout.strip().splitlines()[-1] == "[]"


def _defined_names(path: Path) -> set[str]:
    """Names a module binds at its top level (plain and annotated assignments)."""
    names = set()
    for node in ast.parse(path.read_text()).body:
        targets = (
            node.targets if isinstance(node, ast.Assign) else [node.target] if isinstance(node, ast.AnnAssign) else []
        )
        names |= {t.id for t in targets if isinstance(t, ast.Name)}
    return names


def test_sqs_limits_are_defined_only_in_the_contract() -> None:
    """SQS's numbers (SQS_MAX_..., SQS_MIN_...) live in consumer/limits.py; every other module imports them."""
    sources = [*(ROOT / "consumer").rglob("*.py"), *(ROOT / "infra").rglob("*.py"), *(ROOT / "bench").rglob("*.py")]
    elsewhere = sorted(
        f"{path.relative_to(ROOT)}: {name}"
        for path in sources
        if path != ROOT / "consumer" / "limits.py"
        for name in _defined_names(path)
        if name.startswith(("SQS_MAX", "SQS_MIN", "SQS_BATCH"))
    )
    assert elsewhere == []


@pytest.mark.parametrize("path", sorted((ROOT / "bench").rglob("*.py")), ids=lambda p: str(p.relative_to(ROOT)))
def test_bench_uses_the_local_harness_never_the_demo(path: Path) -> None:
    """bench/ (the chaos suite, the benchmarks) builds on consumer.local.harness; the demo is a scenario, not a library."""
    tree = ast.parse(path.read_text())
    modules = imported_modules(tree)
    imported_names = {
        f"{node.module}.{alias.name}"
        for node in ast.walk(tree)
        if isinstance(node, ast.ImportFrom) and node.module
        for alias in node.names
    }
    assert sorted(m for m in modules | imported_names if m == "consumer.local.demo") == []


#: Past these, two things usually live together (the developers' guide): split by audience, then by concern.
MAX_MODULE_LINES = 600
MAX_CLASS_LINES = 300
_SIZED = sorted(
    path for package in ("consumer", "infra", "bench") for path in (ROOT / package).rglob("*.py") if path.is_file()
)


@pytest.mark.parametrize("path", _SIZED, ids=lambda p: str(p.relative_to(ROOT)))
def test_no_module_or_class_outgrows_one_concern(path: Path) -> None:
    """No module in consumer/, infra/ or bench/ over 600 lines, no class over 300."""
    source = path.read_text()
    too_long = (
        [f"{len(source.splitlines())} lines > {MAX_MODULE_LINES}"]
        if len(source.splitlines()) > MAX_MODULE_LINES
        else []
    )
    too_long += [
        f"class {node.name}: {node.end_lineno - node.lineno + 1} lines > {MAX_CLASS_LINES}"
        for node in ast.walk(ast.parse(source))
        if isinstance(node, ast.ClassDef) and node.end_lineno and node.end_lineno - node.lineno + 1 > MAX_CLASS_LINES
    ]
    assert too_long == []


#: The documented public entry for handler authors (README, docs/handlers.md: ``from consumer import worker``): the
#: one module whose ``__all__`` names what it imports, and the one module others may import such names from.
PUBLIC_FACADE = "consumer"
_PACKAGES = ("consumer", "infra", "bench", "tests", "workers")


def _module_name(path: Path) -> str:
    parts = path.relative_to(ROOT).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _module_path(module: str) -> Path | None:
    base = ROOT.joinpath(*module.split("."))
    return next((p for p in (base / "__init__.py", base.with_suffix(".py")) if p.is_file()), None)


def _bound_at_top_level(tree: ast.Module) -> tuple[set[str], set[str]]:
    """(defined, imported): the names a module binds at its top level (inside ``if`` and ``try`` too) by a def, a
    class or an assignment, and by an import."""
    defined: set[str] = set()
    imported: set[str] = set()
    pending: list[ast.stmt] = list(tree.body)
    while pending:
        node = pending.pop()
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            defined.add(node.name)
        elif isinstance(node, ast.Assign | ast.AnnAssign | ast.AugAssign):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            defined |= {n.id for t in targets for n in ast.walk(t) if isinstance(n, ast.Name)}
        elif isinstance(node, ast.Import | ast.ImportFrom):
            imported |= {alias.asname or alias.name.split(".")[0] for alias in node.names}
        elif isinstance(node, ast.If | ast.Try):
            pending += [*node.body, *node.orelse, *getattr(node, "finalbody", [])]
            pending += [s for handler in getattr(node, "handlers", []) for s in handler.body]
    return defined, imported


def _exported(tree: ast.Module) -> list[str]:
    """The names of a module's ``__all__`` (a literal list or tuple of strings), empty without one."""
    for node in tree.body:
        if (
            isinstance(node, ast.Assign)
            and any(isinstance(t, ast.Name) and t.id == "__all__" for t in node.targets)
            and isinstance(node.value, ast.List | ast.Tuple)
        ):
            return [e.value for e in node.value.elts if isinstance(e, ast.Constant) and isinstance(e.value, str)]
    return []


@pytest.mark.parametrize(
    "path",
    [p for p in _SIZED if _module_name(p) != PUBLIC_FACADE],
    ids=lambda p: str(p.relative_to(ROOT)),
)
def test_all_lists_only_names_the_module_defines(path: Path) -> None:
    """No module of consumer/, infra/ or bench/ re-exports: its ``__all__`` names only what it defines (the public
    facade, consumer/__init__.py, excepted), so each name has one import path, the module that defines it."""
    tree = ast.parse(path.read_text())
    defined, _ = _bound_at_top_level(tree)
    assert sorted(name for name in _exported(tree) if name not in defined) == []


def test_every_name_is_imported_from_the_module_that_defines_it() -> None:
    """No ``from a.b import name`` (anywhere in consumer/, infra/, bench/, tests/, workers/) takes a name that a.b
    only imports itself: a name is imported from the module that defines it, never through one that re-imports it.
    The public facade (``from consumer import worker``) is the one exception."""
    bindings: dict[str, tuple[set[str], set[str]]] = {}
    through = []
    for path in sorted(p for package in _PACKAGES for p in (ROOT / package).rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            if not isinstance(node, ast.ImportFrom) or node.level or not node.module or node.module == PUBLIC_FACADE:
                continue
            source = _module_path(node.module) if node.module.split(".")[0] in _PACKAGES else None
            if source is None:
                continue
            if node.module not in bindings:
                bindings[node.module] = _bound_at_top_level(ast.parse(source.read_text()))
            defined, imported = bindings[node.module]
            through += [
                f"{path.relative_to(ROOT)}:{node.lineno}: {alias.name} from {node.module}"
                for alias in node.names
                if alias.name in imported - defined and _module_path(f"{node.module}.{alias.name}") is None
            ]
    assert through == []


#: A constructor takes the few objects it depends on; past this many, what travels together wants a value of its own
#: (consumer/runtime/wiring.py groups the runtime's) or the object that already holds it.
MAX_CONSTRUCTOR_PARAMETERS = 7
_CONSTRUCTED = sorted(path for package in ("consumer", "infra") for path in (ROOT / package).rglob("*.py"))


def oversized_constructors(path: Path) -> list[str]:
    """The classes of ``path`` whose own ``__init__`` takes more than MAX_CONSTRUCTOR_PARAMETERS besides ``self``
    (``*args`` and ``**kwargs`` count one each); a dataclass's generated one is a record's fields, not counted."""
    found = []
    for node in ast.walk(ast.parse(path.read_text())):
        if not isinstance(node, ast.ClassDef):
            continue
        for init in node.body:
            if isinstance(init, ast.FunctionDef) and init.name == "__init__":
                arguments = init.args
                named = [*arguments.posonlyargs, *arguments.args, *arguments.kwonlyargs]
                count = len(named) - 1 + (arguments.vararg is not None) + (arguments.kwarg is not None)
                if count > MAX_CONSTRUCTOR_PARAMETERS:
                    found.append(f"{node.name}.__init__: {count} parameters > {MAX_CONSTRUCTOR_PARAMETERS}")
    return found


@pytest.mark.parametrize("path", _CONSTRUCTED, ids=lambda p: str(p.relative_to(ROOT)))
def test_no_constructor_takes_more_than_seven_parameters(path: Path) -> None:
    """No ``__init__`` in consumer/ or infra/ takes more than 7 parameters besides self."""
    assert oversized_constructors(path) == []


def imported_test_modules(path: Path) -> list[str]:
    """The ``test_*`` modules ``path`` imports (``import a.test_b``, ``from a.test_b import c``, ``from a import
    test_b``, relative ones too), each as written."""
    found = []
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            found += [alias.name for alias in node.names if alias.name.rsplit(".", 1)[-1].startswith("test_")]
        elif isinstance(node, ast.ImportFrom):
            module = "." * node.level + (node.module or "")
            if module.rsplit(".", 1)[-1].startswith("test_"):
                found.append(module)
            else:
                found += [f"{module}.{alias.name}" for alias in node.names if alias.name.startswith("test_")]
    return found


def test_no_test_module_is_imported_by_another_module_of_the_tests() -> None:
    """A helper two test modules share lives in a helpers module or a conftest.py of their folder, never in one of
    them: importing a test module runs its module-level code again and collects its tests' names into the importer."""
    paths = [*(ROOT / "tests").rglob("*.py"), *(ROOT / "workers" / "tests").rglob("*.py")]
    found = {str(p.relative_to(ROOT)): imported for p in sorted(paths) if (imported := imported_test_modules(p))}
    assert found == {}
