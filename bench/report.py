"""The report: Markdown tables on stdout, the JSON file, and the PNG chart."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

PCTS = ("p50", "p90", "p99", "max")


def headline(record: dict[str, Any]) -> float | None:
    """The figure systems are compared on: jobs/s, or bytes per job for memory."""
    if record.get("status") not in ("ok", "partial"):
        return None
    if record["scenario"] == "memory":
        return record.get("memory", {}).get("bytes_per_job")
    return record.get("jobs_per_s")


def ratios(records: list[dict[str, Any]]) -> dict[str, dict[str, float]]:
    """{scenario: {reference: disq's figure / the reference's}}."""
    out: dict[str, dict[str, float]] = {}
    for rec in records:
        if rec["system"] != "disq" or headline(rec) is None:
            continue
        for ref in records:
            if ref["scenario"] == rec["scenario"] and ref["system"] != "disq":
                value = headline(ref)
                if value:
                    out.setdefault(rec["scenario"], {})[ref["system"]] = round(
                        headline(rec) / value, 3)  # type: ignore[operator]
    return out


def _ms(value: float | None) -> str:
    return "" if value is None else f"{value:.3f}" if value < 10 else f"{value:.1f}"


def describe(settings: dict[str, Any], scenario: str) -> str:
    size = f"{settings['jobs']:,} jobs" if settings["jobs"] else f"{settings['duration']:g} s"
    if scenario == "memory":
        size = f"{settings['memory_jobs']:,} jobs"
    if scenario in ("consume", "drain") and not settings["jobs"]:
        size = f"{settings['prefill']:,} prefilled jobs, at most {settings['duration']:g} s"
    extra = []
    if settings.get("replicate"):
        extra.append(f"REPLICATE {settings['replicate']}")
    if settings.get("async"):
        extra.append("ASYNC")
    if settings.get("aof") != "off":
        extra.append(f"AOF {settings['aof']}")
    if settings.get("rate") and scenario in ("cycle", "cross-node"):
        extra.append(f"rate {settings['rate']:,.0f} jobs/s")
    if scenario == "drain":
        extra.append(f"batch {settings['drain_batch']}")
    return (f"{settings['workers']} workers × {settings['connections']} connections, "
            f"pipeline {settings['pipeline']}, body {settings['body_size']} B, {size}"
            + ("; " + ", ".join(extra) if extra else ""))


def markdown(result: dict[str, Any]) -> str:
    """The whole report as Markdown tables, one per scenario."""
    settings, records = result["settings"], result["records"]
    by_scenario: dict[str, list[dict[str, Any]]] = {}
    for rec in records:
        by_scenario.setdefault(rec["scenario"], []).append(rec)
    rat = result.get("ratios", {})
    lines: list[str] = []
    for scenario, recs in by_scenario.items():
        lines.append(f"### {scenario}: {describe(settings, scenario)}")
        lines.append("")
        if scenario == "memory":
            lines += ["| system | nodes | jobs | RSS before MiB | RSS after MiB | bytes/job "
                      "| beyond body | fill jobs/s | disq ÷ this |",
                      "|---|---|---|---|---|---|---|---|---|"]
        else:
            lines += ["| system | nodes | jobs/s | disq ÷ this | command | calls/s | p50 ms "
                      "| p90 ms | p99 ms | max ms | errors | CPU server / load |",
                      "|---|---|---|---|---|---|---|---|---|---|---|---|"]
        for rec in recs:
            system = rec["system"]
            ratio = ("1.00" if system == "disq" else
                     f"{rat[scenario][system]:.2f}" if system in rat.get(scenario, {}) else "")
            if rec["status"] in ("skipped", "failed"):
                lines.append(f"| {system} | {rec['nodes']} | {rec['status']}: "
                             f"{rec.get('reason', '')} |")
                continue
            if scenario == "memory":
                m = rec["memory"]
                lines.append(
                    f"| {system} | {rec['nodes']} | {m['queued_jobs']:,} "
                    f"| {sum(m['rss_before_mib']):.1f} | {sum(m['rss_after_mib']):.1f} "
                    f"| {m['bytes_per_job']:.0f} | {m['beyond_body']:.0f} "
                    f"| {rec['jobs_per_s']:,.0f} | {ratio} |")
                continue
            cpu = rec["cpu"]
            first = True
            for name, lat in rec["latency_ms"].items():
                head = (f"| {system} | {rec['nodes']} | {rec['jobs_per_s']:,.0f} | {ratio} "
                        if first else "| | | | ")
                rate = rec["commands_per_s"].get(name)
                errors = rec["errors"].get(name, "")
                server = "?" if cpu["server_pct"] is None else f"{cpu['server_pct']:.0f}%"
                cpu_text = f"{server} / {cpu['load_pct']:.0f}%" if first else ""
                lines.append(head + f"| {name} | {'' if rate is None else f'{rate:,.0f}'} | "
                             + " | ".join(_ms(lat.get(p)) for p in PCTS)
                             + f" | {errors} | {cpu_text} |")
                first = False
            if rec["status"] == "partial":
                lines.append(f"| | | | | ({rec['stopped']}) |")
        if rat.get(scenario):
            what = "bytes per job" if scenario == "memory" else "jobs/s"
            lines.append("")
            lines.append(f"disq's {what} ÷ the reference's: " + ", ".join(
                f"{ref} {value:.2f}×" for ref, value in rat[scenario].items()))
        samples = [s for rec in recs for s in rec.get("error_samples", [])]
        if samples:
            lines.append("")
            lines += [f"- error: `{s}`" for s in samples[:5]]
        lines.append("")
    return "\n".join(lines)


def write_json(result: dict[str, Any], path: Path) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(result, indent=2) + "\n")


def write_png(result: dict[str, Any], path: Path) -> str | None:
    """Throughput bars and latency percentiles per system, one row per scenario.
    Returns None when written, else why not (matplotlib missing)."""
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
        from matplotlib.ticker import FuncFormatter
    except ImportError:
        return ("matplotlib is not installed: no PNG "
                "(pip install -e '.[bench]' installs it)")
    records = [r for r in result["records"] if headline(r) is not None]
    scenarios = list(dict.fromkeys(r["scenario"] for r in records))
    if not scenarios:
        return "nothing was measured: no PNG"
    colors = {"disq": "#1f77b4", "disque": "#ff7f0e", "redis": "#d62728",
              "beanstalkd": "#2ca02c"}
    fig, axes = plt.subplots(len(scenarios), 2, figsize=(13, 3.2 * len(scenarios)),
                             squeeze=False, gridspec_kw={"width_ratios": [1, 2.4]})
    for row, scenario in enumerate(scenarios):
        recs = [r for r in records if r["scenario"] == scenario]
        left, right = axes[row]
        names = [r["system"] for r in recs]
        values = [headline(r) or 0 for r in recs]
        bars = left.bar(names, values, color=[colors.get(n, "grey") for n in names])
        left.bar_label(bars, labels=[f"{v:,.0f}" for v in values], fontsize=8)
        left.set_title(f"{scenario}: " + ("bytes per queued job" if scenario == "memory"
                                          else "jobs/s"), fontsize=10)
        left.tick_params(labelsize=8)
        left.yaxis.set_major_formatter(FuncFormatter(lambda v, _: f"{v:,.0f}"))
        left.margins(y=0.15)
        groups = [(r["system"], name, lat) for r in recs
                  for name, lat in r.get("latency_ms", {}).items() if lat.get("count")]
        width = 0.2
        for k, pct in enumerate(PCTS):
            xs = [i + (k - 1.5) * width for i in range(len(groups))]
            ys = [g[2].get(pct, 0) or 0 for g in groups]
            right.bar(xs, ys, width, label=pct, alpha=0.35 + 0.65 * k / 3,
                      color=[colors.get(g[0], "grey") for g in groups])
        right.set_xticks(range(len(groups)))
        right.set_xticklabels([f"{g[0]}\n{g[1]}" for g in groups], fontsize=7)
        right.set_yscale("log")
        right.set_ylabel("ms (log)", fontsize=8)
        right.set_title(f"{scenario}: latency p50 / p90 / p99 / max (bars left to right)",
                        fontsize=10)
        right.tick_params(axis="y", labelsize=8)
    when = result.get("date", "")
    fig.suptitle(f"disq bench {when} — {result.get('machine', {}).get('cpus', '?')} cores, "
                 "servers and load generator on the same machine", fontsize=11)
    fig.tight_layout(rect=(0, 0, 1, 1 - 0.35 / fig.get_figheight()))  # room for the title
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=90)
    plt.close(fig)
    return None
