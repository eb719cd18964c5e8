"""docs/evidence/BENCHMARKS.md and its plots, generated from the saved results in docs/evidence/bench/*.json.

``python -m bench report`` rebuilds it without running anything; every ``python -m bench <name>``
rebuilds it after saving. Sections whose results are missing say how to produce them.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from bench.common import EVIDENCE, RESULTS
from bench.coroutines import report as async_report
from bench.markdown import measured as _meta
from bench.markdown import missing as _missing
from bench.markdown import table as _table
from bench.peers import report as peers_report
from bench.peers import summary as peers_summary
from bench.tracing import report as tracing_report

DOC = EVIDENCE / "BENCHMARKS.md"
PLOTS = {"throughput": "throughput.png", "latency": "latency.png"}
#: The goal: ours' CPU per message with the no-op handler at concurrency 16 (no guard), over the bare loop's.
BARE_RATIO_GOAL = 1.25


def _load(name: str) -> dict[str, Any] | None:
    path = RESULTS / f"{name}.json"
    return json.loads(path.read_text()) if path.exists() else None


def _ratio(ours: float | None, naive: float | None) -> str:
    if not ours or not naive:
        return "-"
    return f"{ours / naive:.2f}x"


def _pairs(rows: list[dict[str, Any]], handler: str) -> list[tuple[int, dict[str, Any], dict[str, Any]]]:
    by_key = {(r["handler"], r["concurrency"], r["impl"]): r for r in rows}
    levels = sorted({r["concurrency"] for r in rows if r["handler"] == handler})
    return [(c, by_key[(handler, c, "ours")], by_key[(handler, c, "naive")]) for c in levels]


def _requests_section(result: dict[str, Any] | None) -> str:
    if result is None:
        return _missing("python -m bench throughput")
    parts = [_meta(result)]
    for handler in ("noop", "io50ms"):
        rows = [
            [c, f"{o['requests_per_message']:.3f}", _billed(o), f"{n['requests_per_message']:.3f}", _billed(n)]
            for c, o, n in _pairs(result["rows"], handler)
        ]
        header = ["concurrency", "ours", "ours billed", "naive", "naive billed"]
        parts.append(f"Handler `{handler}`:\n\n" + _table(header, rows))
    return "\n\n".join(parts)


def _billed(row: dict[str, Any]) -> str:
    """Billed requests per deleted message, or "-" for a row saved before the subject counted them."""
    cost = row.get("billed_requests_per_message")
    return "-" if cost is None else f"{cost:.3f}"


def _bodies_section(result: dict[str, Any] | None) -> str:
    """Requests and billed requests per message for bigger bodies (no-op handler, one concurrency)."""
    if result is None or not result.get("bodies"):
        return _missing("python -m bench throughput")
    by_key = {(r["body"], r["impl"]): r for r in result["bodies"]}
    labels = list(dict.fromkeys(r["body"] for r in result["bodies"]))
    rows = []
    for label in labels:
        cells = [label]
        for impl in ("ours", "naive"):
            row = by_key[(label, impl)]
            cells += [f"{row['messages_per_second']:.0f}", f"{row['requests_per_message']:.3f}", _billed(row)]
        rows.append(cells)
    concurrency = result["bodies"][0]["concurrency"]
    header = [
        "body",
        "ours msg/s",
        "ours req/msg",
        "ours billed/msg",
        "naive msg/s",
        "naive req/msg",
        "naive billed/msg",
    ]
    return f"Handler `noop`, concurrency {concurrency}:\n\n" + _table(header, rows)


def _cpu(row: dict[str, Any]) -> str:
    """CPU ms per deleted message, or "-" for a row measured before the subject reported its CPU time."""
    cost = row.get("cpu_ms_per_message")
    return "-" if cost is None else f"{cost:.2f}"


def _throughput_section(result: dict[str, Any] | None) -> str:
    if result is None:
        return _missing("python -m bench throughput")
    parts = [_meta(result), f"![throughput against concurrency]({PLOTS['throughput']})"]
    for handler in ("noop", "io50ms"):
        rows = [
            [
                c,
                f"{o['messages_per_second']:.0f}",
                f"{n['messages_per_second']:.0f}",
                _ratio(o["messages_per_second"], n["messages_per_second"]),
                _cpu(o),
                _cpu(n),
            ]
            for c, o, n in _pairs(result["rows"], handler)
        ]
        header = ["concurrency", "ours", "naive", "ours / naive", "ours CPU ms/msg", "naive CPU ms/msg"]
        parts.append(f"Handler `{handler}`, messages/s per process:\n\n" + _table(header, rows))
    return "\n\n".join(parts)


def _bare_section(peers: dict[str, Any] | None) -> str:
    """The no-op handler against the bare loop: ours' CPU per message over the bare loop's, round by round, from the
    peers run (section 10), where both are counted from outside the process; and the goal."""
    if peers is None or not any(r["cell"] == peers_summary.HEADLINE_CELL for r in peers["rows"]):
        return _missing("make peers")
    rows = [r for r in peers["rows"] if r["cell"] == peers_summary.HEADLINE_CELL]
    found = []
    for subject, label in (("ours-idempotent", "ours, idempotent handler"), ("ours", "ours (DynamoDB guard)")):
        ratios = peers_summary.round_ratios(rows, peers_summary.HEADLINE_CELL, subject, "bare")
        if ratios:
            rounds = ", ".join(f"{r:.2f}" for r in ratios)
            found.append([label, f"{peers_summary.median(ratios):.2f}", rounds])
    table = _table(["ours, CPU per message / the bare loop's", "median", "each round"], found)
    return f"{_meta(peers)}\n\n{table}\n\nGoal (issue 26): ours without the guard at most {BARE_RATIO_GOAL} of the bare loop."


def _ablation_section(result: dict[str, Any] | None) -> str:
    if result is None or not result.get("ablation"):
        return _missing("python -m bench throughput")
    default = {(r["handler"], r["concurrency"]): r for r in result["rows"] if r["impl"] == "ours"}
    rows = []
    for off in result["ablation"]:
        on = default.get((off["handler"], off["concurrency"]))
        if on is None:
            continue
        rows.append(
            [
                off.get("variant", "no batch fill"),  # results saved before the variants had one ablation: the fill
                off["handler"],
                off["concurrency"],
                f"{on['messages_per_second']:.0f}",
                f"{off['messages_per_second']:.0f}",
                f"{on['requests_per_message']:.3f}",
                f"{off['requests_per_message']:.3f}",
                _cpu(on),
                _cpu(off),
            ]
        )
    header = [
        "changed from the default",
        "handler",
        "concurrency",
        "msg/s, default",
        "msg/s, changed",
        "req/msg, default",
        "req/msg, changed",
        "CPU ms/msg, default",
        "CPU ms/msg, changed",
    ]
    return _table(header, rows)


def _memory_section(result: dict[str, Any] | None) -> str:
    if result is None:
        return _missing("python -m bench throughput")
    rows = []
    for handler in ("noop", "io50ms"):
        for c, o, n in _pairs(result["rows"], handler):
            if c in (1, 16, 64):
                rows.append(
                    [
                        handler,
                        c,
                        f"{o['rss_idle_kib'] / 1024:.0f}",
                        f"{o['rss_load_kib'] / 1024:.0f}",
                        f"{n['rss_idle_kib'] / 1024:.0f}",
                        f"{n['rss_load_kib'] / 1024:.0f}",
                        _ratio(o["rss_load_kib"], n["rss_load_kib"]),
                    ]
                )
    header = ["handler", "concurrency", "ours idle", "ours load", "naive idle", "naive load", "load ours / naive"]
    return _meta(result) + "\n\nResident set size, MiB:\n\n" + _table(header, rows)


def _latency_section(result: dict[str, Any] | None) -> str:
    if result is None:
        return _missing("python -m bench latency")
    main = result["meta"]["endpoint"]
    rows = [
        [
            r.get("endpoint", main),  # results saved before the moto rows ran on one endpoint
            r["impl"],
            r["samples"],
            f"{r['p50_ms']:.0f}",
            f"{r['p90_ms']:.0f}",
            f"{r['p99_ms']:.0f}",
            f"{r['max_ms']:.0f}",
        ]
        for r in result["rows"]
    ]
    by_impl = {r["impl"]: r for r in result["rows"] if r.get("endpoint", main) == main}
    ratio = _ratio(by_impl["ours"]["p50_ms"], by_impl["naive"]["p50_ms"])
    return (
        f"{_meta(result)}\n\n![pickup latency distribution]({PLOTS['latency']})\n\n"
        + _table(["endpoint", "impl", "samples", "p50 ms", "p90 ms", "p99 ms", "max ms"], rows)
        + f"\n\np50 ours / naive ({main}): {ratio}."
    )


def _shutdown_section(result: dict[str, Any] | None) -> str:
    if result is None:
        return _missing("python -m bench shutdown")
    rows = [
        [
            r["state"],
            r["impl"],
            r["exit_code"],
            f"{r['exit_seconds']:.2f}",
            r["handlers_running_at_sigterm"],
            r["interrupted"],
            r["released_visible"],
            r["stranded_invisible"],
            r["lost"],
        ]
        for r in result["rows"]
    ]
    header = [
        "state",
        "impl",
        "exit code",
        "SIGTERM to exit, s",
        "running at SIGTERM",
        "interrupted",
        "visible after exit",
        "stranded (invisible)",
        "lost",
    ]
    return _meta(result) + "\n\n" + _table(header, rows)


def _duplicates_section(result: dict[str, Any] | None) -> str:
    if result is None:
        return _missing("python -m bench duplicates")
    rows = [
        [
            r["impl"],
            r["messages"],
            r["over_visibility"],
            r["handler_starts"],
            r["duplicate_starts"],
            r["messages_started_twice_or_more"],
            r["finished"],
            r["never_started"],
            f"{r['seconds']:.0f}" + ("" if r["drained"] else " (not drained: stopped)"),
        ]
        for r in result["rows"]
    ]
    header = [
        "impl",
        "messages",
        "ran past visibility",
        "handler starts",
        "duplicate starts",
        "messages run twice+",
        "finished",
        "never started",
        "s",
    ]
    return _meta(result) + "\n\n" + _table(header, rows)


def _build_section(result: dict[str, Any] | None) -> str:
    if result is None:
        return _missing("python -m bench build")
    synth = [
        [r["what"], f"{r['median_seconds']:.1f}", ", ".join(f"{t:.1f}" for t in r["runs"])] for r in result["synth"]
    ]
    text = _meta(result) + "\n\n" + _table(["synthesis (`python <app>`)", "median s", "runs s"], synth)
    if result["suite"]:
        suite = [[r["tier"], f"{r['seconds']:.0f}"] for r in result["suite"]]
        if len(suite) > 1:  # results saved when the tiers ran one after another
            suite.append(["total", f"{sum(r['seconds'] for r in result['suite']):.0f}"])
        text += "\n\n" + _table(["tests", "s"], suite)
    return text


def _container_section(result: dict[str, Any] | None) -> str:
    if result is None:
        return _missing("python -m bench container")
    image, median = result["image"], result["median"]
    rows = [
        [
            what,
            f"{median['container'][key]:.2f}",
            f"{median['process'][key]:.2f}",
            _ratio(median["container"][key], median["process"][key]),
        ]
        for what, key in (
            ("start to ready (`consumer_started`)", "ready_seconds"),
            (f"SIGTERM to exit, one {result['hold_seconds']:g} s delivery in flight", "sigterm_to_exit_seconds"),
        )
    ]
    codes = sorted({r["exit_code"] for r in result["rows"]})
    return (
        _meta(result)
        + f" _Engine: {result['engine']}; base `{image['base']}`._\n\n"
        + _table(["median seconds", "container", "process", "container / process"], rows)
        + f"\n\nImage: **{image['size_bytes'] / 1e6:.0f} MB**. Exit codes over {len(result['rows'])} stops: "
        + f"{', '.join(map(str, codes))}; the task's stop timeout is {result['stop_timeout_seconds']} s."
    )


def _profile_section(before: dict[str, Any] | None, after: dict[str, Any] | None) -> str:
    """The profile before the per-message work was cut beside the current one: categories, then top functions."""
    if before is None and after is None:
        return _missing("python -m bench profile")
    runs = [("before", before), ("after", after)]
    present = [(label, result) for label, result in runs if result is not None]
    parts = [
        f"**{label}**: {_meta(result)} {result['messages_per_second']:.0f} msg/s at concurrency"
        f" {result['concurrency']}, {_cpu(result)} CPU ms/msg, {result['samples']} samples."
        for label, result in present
    ]
    parts += [
        f"**{label}**: " + _missing(f"python -m bench profile{suffix}")
        for label, result, suffix in (
            ("before", before, " --save-as before"),
            ("after", after, ""),
        )
        if result is None
    ]
    names = list(dict.fromkeys(name for _, result in present for name in result["categories"]))
    rows = [[name, *(_share(result["categories"].get(name)) for _, result in present)] for name in names]
    parts.append(
        "Samples holding the interpreter lock, by what they were doing:\n\n"
        + _table(["category", *(label for label, _ in present)], rows)
    )
    for ranking, title in (("self", "self (innermost frame)"), ("inclusive", "inclusive (anywhere on the stack)")):
        for label, result in present:
            top = [[f"`{r['function']}`", f"`{r['file']}`", _share(r["share"])] for r in result[ranking]]
            parts.append(f"Top functions by {title}, {label}:\n\n" + _table(["function", "file", "share"], top))
    return "\n\n".join(parts)


def _share(value: float | None) -> str:
    return "-" if value is None else f"{100 * value:.1f} %"


def _plots() -> None:
    throughput, latency = _load("throughput"), _load("latency")
    if throughput is None and latency is None:
        return
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    if throughput is not None:
        figure, axes = plt.subplots(1, 2, figsize=(10, 4))
        for axis, handler in zip(axes, ("noop", "io50ms"), strict=True):
            pairs = _pairs(throughput["rows"], handler)
            levels = [c for c, _, _ in pairs]
            axis.plot(levels, [o["messages_per_second"] for _, o, _ in pairs], "o-", label="ours")
            axis.plot(levels, [n["messages_per_second"] for _, _, n in pairs], "s--", label="naive")
            axis.set_xscale("log", base=2)
            axis.set_xticks(levels, [str(c) for c in levels])
            axis.set_title(f"handler {handler}")
            axis.set_xlabel("concurrency (threads per process)")
            axis.set_ylabel("messages/s")
            axis.grid(alpha=0.3)
            axis.legend()
        figure.tight_layout()
        figure.savefig(DOC.parent / PLOTS["throughput"], dpi=100)
        plt.close(figure)
    if latency is not None:
        figure, axis = plt.subplots(figsize=(6, 4))
        for row in latency["rows"]:
            values = sorted(row["latencies_ms"])
            label = f"{row['impl']} ({row.get('endpoint', latency['meta']['endpoint'])})"
            axis.plot(values, [(i + 1) / len(values) for i in range(len(values))], label=label)
        axis.set_xlabel("send to handler start, ms")
        axis.set_ylabel("fraction of messages")
        axis.set_title("pickup latency on an idle queue (CDF)")
        axis.grid(alpha=0.3)
        axis.legend()
        figure.tight_layout()
        figure.savefig(DOC.parent / PLOTS["latency"], dpi=100)
        plt.close(figure)


TEMPLATE = Path(__file__).with_name("BENCHMARKS.template.md")


def fill(template: Path, values: Mapping[str, str]) -> str:
    """The template's text with every ``{{name}}`` replaced by its value (docs/evidence/: BENCHMARKS.md, CHAOS.md)."""
    text = template.read_text()
    for name, body in values.items():
        text = text.replace("{{" + name + "}}", body)
    return text


def write() -> Path:
    """Regenerate the plots and docs/evidence/BENCHMARKS.md from the saved results; returns the document's path."""
    DOC.parent.mkdir(parents=True, exist_ok=True)
    _plots()
    DOC.write_text(fill(TEMPLATE, sections()))
    return DOC


def sections() -> dict[str, str]:
    """Every placeholder's text, from the saved results (a missing result's text names its command)."""
    throughput = _load("throughput")
    return {
        "requests": _requests_section(throughput),
        "throughput": _throughput_section(throughput),
        "bare": _bare_section(_load("peers")),
        "bodies": _bodies_section(throughput),
        "ablation": _ablation_section(throughput),
        "latency": _latency_section(_load("latency")),
        "shutdown": _shutdown_section(_load("shutdown")),
        "duplicates": _duplicates_section(_load("duplicates")),
        "memory": _memory_section(throughput),
        "profile": _profile_section(_load("profile-before"), _load("profile")),
        "build": _build_section(_load("build")),
        "container": _container_section(_load("container")),
        "peers": peers_report.section(_load("peers")),
        "async": async_report.section(_load("async")),
        "tracing": tracing_report.section(_load("tracing")),
    }
