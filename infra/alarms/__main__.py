"""``python -m infra.alarms``: evaluate a template's alarms on a series, list what they read, run the scenarios.

    python -m infra.alarms evaluate cdk.out/SqsWorker-prod.template.json series.json
    python -m infra.alarms metrics cdk.out/SqsWorker-prod.template.json
    python -m infra.alarms scenarios --env prod [--plot DIR]
    python -m infra.alarms scenarios --cdk-json my-cdk.json   # another cdk.json's environments (a lambda worker's)
    python -m infra.alarms scenarios --write-docs

Bad input (a template or series that is not what it should be, something the evaluator does not implement) exits 2
with one line naming it.
"""

from __future__ import annotations

import json
import re
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Annotated, Any

import typer

from infra.alarms.definitions import Series
from infra.alarms.engine import default_end, evaluate
from infra.alarms.metric_alarm import evaluation_range
from infra.alarms.template import load_template, read_alarms, stack_name_of

app = typer.Typer(add_completion=False, no_args_is_help=True, help=__doc__.splitlines()[0] if __doc__ else None)

TemplateArgument = Annotated[
    Path, typer.Argument(help="A CloudFormation template (JSON), e.g. cdk.out/<stack>.template.json")
]
StackOption = Annotated[
    str | None,
    typer.Option("--stack-name", help="The stack's name (default: the template file's, as the CDK names it)"),
]


def _fail(error: Exception) -> typer.Exit:
    typer.echo(f"error: {error}", err=True)
    return typer.Exit(2)


@app.command("evaluate")
def evaluate_command(
    template: TemplateArgument,
    series: Annotated[
        Path,
        typer.Argument(
            help='SERIES JSON: {"metrics": [{"namespace", "metric", "dimensions", "points": [[t, v]]}], "end"?}'
        ),
    ],
    stack_name: StackOption = None,
    extra_periods: Annotated[
        int | None,
        typer.Option(
            help="Periods the evaluation range holds beyond EvaluationPeriods (default: the user guide's example)"
        ),
    ] = None,
    allow_unread: Annotated[
        bool, typer.Option(help="Accept SERIES metrics that no alarm of TEMPLATE reads (refused by default)")
    ] = False,
) -> None:
    """Print every alarm state change, one JSON object per line: {"t", "alarm", "from", "to", "actions"}.

    A metric the alarms read and SERIES leaves out is missing data throughout (an alarm that treats missing data as
    breaching fires on it); `metrics TEMPLATE` prints every one to fill in."""
    try:
        try:
            document = json.loads(series.read_text())
        except (OSError, ValueError) as error:
            raise ValueError(f"SERIES {series}: cannot be read as JSON ({error})") from None
        if not isinstance(document, dict):
            raise ValueError(f"SERIES {series}: must be a JSON object with 'metrics'")
        points, end = Series.from_json(document)
        alarms, composites = read_alarms(load_template(template), stack_name or stack_name_of(template))
        read = {key for alarm in alarms for key in alarm.metric_keys()}
        unread = [key for key in points.points if key not in read]
        if unread and not allow_unread:
            namespace, metric, dimensions = unread[0]
            named = ", ".join(f"{k}={v}" for k, v in dimensions)
            raise ValueError(
                f"SERIES: metric {namespace} {metric} {{{named}}} is read by no alarm of the template (a misspelt"
                " name or dimension would make every alarm see missing data); `metrics TEMPLATE` lists the ones"
                " they read, --allow-unread accepts it"
            )
        range_periods = evaluation_range if extra_periods is None else (lambda n: n + extra_periods)
        if extra_periods is not None and extra_periods < 0:
            raise ValueError(f"--extra-periods: must be >= 0, got {extra_periods}")
        stop = end if end is not None else default_end(alarms, points, range_periods)
        changes = evaluate(alarms, composites, points, end=stop, range_periods=range_periods)
    except (OSError, ValueError) as error:  # Unsupported is a ValueError
        raise _fail(error) from None
    for change in changes:
        sys.stdout.write(json.dumps(change.to_json()) + "\n")


@app.command("metrics")
def metrics_command(template: TemplateArgument, stack_name: StackOption = None) -> None:
    """Print the metrics the template's alarms read, as SERIES entries to fill in (points empty)."""
    try:
        alarms, _ = read_alarms(load_template(template), stack_name or stack_name_of(template))
    except (OSError, ValueError) as error:
        raise _fail(error) from None
    keys = sorted({key for alarm in alarms for key in alarm.metric_keys()})
    document = Series({key: [] for key in keys}).to_json()
    sys.stdout.write(json.dumps(document, indent=1) + "\n")


ROOT = Path(__file__).resolve().parents[2]
#: The user's alarm reference (docs/alarms.md) carries the time to page per alarm; the evidence page
#: (docs/evidence/alarms.md) every scenario's outcome, prod's timelines (docs/evidence/alarms/*.png), the scaling runs
#: and the model's rules. Each holds its generated part between BEGIN and END.
DOCS = ROOT / "docs" / "alarms.md"
EVIDENCE_DOCS = ROOT / "docs" / "evidence" / "alarms.md"
BEGIN, END = "<!-- BEGIN generated: python -m infra.alarms scenarios --write-docs -->", "<!-- END generated -->"
RUNBOOK = ROOT / "docs" / "runbook.md"
#: In the runbook, each alarm's section holds its time to page between these (``{alarm}``: its construct id).
RUNBOOK_BEGIN, RUNBOOK_END = "<!-- BEGIN time to page: {alarm} -->", "<!-- END time to page -->"
RUNBOOK_BLOCK = re.compile(r"<!-- BEGIN time to page: (\w+) -->\n(.*?)<!-- END time to page -->", re.DOTALL)


def with_generated(document: str, generated: str) -> str:
    """The page with the text between its BEGIN and END markers replaced by ``generated``."""
    before, found, rest = document.partition(BEGIN)
    _, ended, after = rest.partition(END)
    if not (found and ended):
        raise ValueError(f"the page has no {BEGIN} ... {END} section to rewrite")
    return f"{before}{BEGIN}\n{generated}{END}{after}"


def runbook_with_times(document: str, outcomes: Mapping[str, Sequence[Any]]) -> str:
    """The runbook with every time-to-page block rewritten from the catalogue's outcomes."""
    from infra.alarms.report import runbook_line

    return RUNBOOK_BLOCK.sub(
        lambda m: f"{RUNBOOK_BEGIN.format(alarm=m.group(1))}\n{runbook_line(m.group(1), outcomes)}{RUNBOOK_END}",
        document,
    )


def synthesize(outdir: Path, cdk_json: Path | None = None) -> Path:
    """``python app.py`` into ``outdir`` (every environment, cdk-nag included): the templates as they deploy; with
    ``cdk_json``, that file's environments instead of the repository's (the CDK's ``CDK_CONTEXT_JSON``, which
    workers.lock.json never records)."""
    import os
    import subprocess

    from infra.worker_settings import CONTEXT_KEY

    environment = {**os.environ, "CDK_OUTDIR": str(outdir)}
    if cdk_json is not None:
        environment["CDK_CONTEXT_JSON"] = json.dumps({CONTEXT_KEY: _read_environments(cdk_json)})
    result = subprocess.run([sys.executable, "app.py"], cwd=ROOT, env=environment, capture_output=True, text=True)
    if result.returncode != 0:
        raise ValueError(f"python app.py failed: {result.stderr.strip().splitlines()[-1:]}")
    return outdir


def _read_environments(cdk_json: Path) -> Any:
    """The ``sqs-worker:environments`` mapping of a cdk.json-shaped file; one without it is refused naming it."""
    from infra.worker_settings import CONTEXT_KEY

    try:
        return json.loads(cdk_json.read_text())["context"][CONTEXT_KEY]
    except (OSError, ValueError, KeyError, TypeError) as error:
        raise ValueError(f"--cdk-json {cdk_json}: must be a cdk.json with context.{CONTEXT_KEY} ({error!r})") from None


def _environments(cdk_json: Path | None = None) -> list[Any]:
    """The environments of the repository's cdk.json, validated, its workers' identities as its synth resolves them
    (with workers.lock.json, infra/identities.py); or of ``cdk_json``, resolved without the lock (as its synth)."""
    from infra.identities import IdentityLock
    from infra.settings import load_environments
    from infra.worker_settings import CONTEXT_KEY

    if cdk_json is not None:
        return list(load_environments({CONTEXT_KEY: _read_environments(cdk_json)}))
    context = json.loads((ROOT / "cdk.json").read_text())["context"]
    return list(load_environments({CONTEXT_KEY: context[CONTEXT_KEY]}, lock=IdentityLock(ROOT / "workers.lock.json")))


def scenario_report(
    templates: Path,
    environments: list[str] | None,
    plot_dir: Path | None,
    plot_only: str | None = None,
    cdk_json: Path | None = None,
) -> tuple[str, str, bool, dict[str, Any]]:
    """The time to page per alarm (the reference's part), the catalogue and scaling tables of every (or each named)
    environment of the repository's cdk.json (or ``cdk_json``) (the evidence's part), as markdown; whether all held;
    and each environment's outcomes."""
    from infra.alarms.catalogue import run_catalogue, skipped_scenarios, worker_facts
    from infra.alarms.report import catalogue_markdown, plot, scaling_markdown, skipped_markdown, time_to_page_markdown
    from infra.alarms.scaling import policies_from_template
    from infra.alarms.wake_up import wake_up_from_template

    selected = _environments(cdk_json)
    unknown = set(environments or []) - {e.name for e in selected}
    if unknown:
        raise ValueError(
            f"--env: {sorted(unknown)[0]!r} is not an environment of cdk.json ({', '.join(e.name for e in selected)})"
        )
    catalogue, scaling, held, found, timelines = [], [], True, {}, []
    for environment in selected:
        if environments and environment.name not in environments:
            continue
        template = templates / f"{environment.stack_name}.template.json"
        outcomes = found[environment.name] = run_catalogue(template, environment)
        held = held and all(o.intended for o in outcomes)
        catalogue.append(catalogue_markdown(environment.name, outcomes) + skipped_markdown(skipped_scenarios(template)))
        loaded = load_template(template)
        policies = list(policies_from_template(loaded).values())
        if policies:
            wake_up = wake_up_from_template(loaded, read_alarms(loaded, environment.stack_name)[0])
            scaling.append(
                scaling_markdown(environment.name, policies[0], worker_facts(environment)[0], wake_up=wake_up)
            )
        if plot_dir is not None and plot_only in (None, environment.name):
            plot_dir.mkdir(parents=True, exist_ok=True)
            for outcome in outcomes:
                plot(outcome, plot_dir / f"{environment.name}-{outcome.scenario.name}.png")
            if plot_only is not None:
                timelines = [
                    f"- [{o.scenario.name}](alarms/{environment.name}-{o.scenario.name}.png): {o.scenario.title}"
                    for o in outcomes
                ]
    from infra.alarms.sqs_model import rules_markdown

    reference = "### Time to page, per alarm\n\n" + time_to_page_markdown(found)
    evidence = (
        "### Time to page, per scenario\n\n" + "\n".join(catalogue)
        + (f"\n### Timelines ({plot_only})\n\nOne PNG per scenario: for each alarm that went to ALARM, the value it"
           " compared with its threshold (ALARM shaded), then every alarm's state with each notification marked.\n\n"
           + "\n".join(timelines) + "\n" if timelines else "")
        + "\n### Scaling on the same clock\n\n" + "\n".join(scaling)
        + "\n### What AWS publishes: the model's rules\n\n" + rules_markdown() + "\n"
    )  # fmt: skip
    return reference, evidence, held, found


@app.command("scenarios")
def scenarios_command(
    env: Annotated[
        list[str] | None, typer.Option("--env", help="An environment of cdk.json (repeat; default all)")
    ] = None,
    plot_dir: Annotated[Path | None, typer.Option("--plot", help="Write one PNG timeline per scenario here")] = None,
    templates: Annotated[
        Path | None, typer.Option(help="Synthesized templates (default: python app.py into a temporary directory)")
    ] = None,
    cdk_json: Annotated[
        Path | None,
        typer.Option(
            "--cdk-json",
            help='Another cdk.json\'s environments (e.g. a copy with a worker on "target": "lambda"; default the'
            " repository's); not with --write-docs",
        ),
    ] = None,
    write_docs: Annotated[
        bool,
        typer.Option(
            help="Rewrite the generated sections of docs/alarms.md and docs/evidence/alarms.md, prod's plots"
            " (docs/evidence/alarms/) and the runbook's time to page (every environment; not with --env)"
        ),
    ] = False,
) -> None:
    """Run every scenario against each environment's synthesized template: which alarms notify, when, where, and
    whether that is the intended outcome; then the burst on the scaling policy. Exit 1 if any outcome is not."""
    import tempfile

    if write_docs and (env or cdk_json):
        raise _fail(
            ValueError(
                "--write-docs: the docs carry the repository's every environment; run it without --env and --cdk-json"
            )
        )
    try:
        with tempfile.TemporaryDirectory() as scratch:
            source = templates or synthesize(Path(scratch), cdk_json)
            plot_only = None
            if write_docs and plot_dir is None:  # the docs carry one environment's timelines: prod's, or the first's
                names = [e.name for e in _environments()]
                plot_dir, plot_only = EVIDENCE_DOCS.parent / "alarms", "prod" if "prod" in names else names[0]
            reference, evidence, held, outcomes = scenario_report(source, env, plot_dir, plot_only, cdk_json)
    except (OSError, ValueError) as error:
        raise _fail(error) from None
    if write_docs:
        try:
            pages = {
                page: with_generated(page.read_text(), text)
                for page, text in ((DOCS, reference), (EVIDENCE_DOCS, evidence))
            }
        except ValueError as error:
            raise _fail(error) from None
        for page, document in pages.items():
            page.write_text(document)
        RUNBOOK.write_text(runbook_with_times(RUNBOOK.read_text(), outcomes))
    sys.stdout.write(f"{reference}\n{evidence}")
    if not held:
        raise typer.Exit(1)


def main() -> None:
    app()


if __name__ == "__main__":
    main()
