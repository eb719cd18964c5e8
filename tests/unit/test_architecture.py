"""The tree keeps the architecture: the contract is stdlib-only, consumer/ never imports the CDK."""

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


@pytest.mark.parametrize("module", CONTRACT_MODULES)
def test_contract_imports_standard_library_only(module: str) -> None:
    """consumer/contract.py and its siblings import nothing outside the standard library (and each other)."""
    tree = ast.parse((ROOT / (module.replace(".", "/") + ".py")).read_text())
    imported = imported_modules(tree)
    outside = {
        name
        for name in imported - {"__future__", *CONTRACT_MODULES}
        if name.split(".")[0] not in sys.stdlib_module_names
    }
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
