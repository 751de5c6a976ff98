"""What an experiment gives: panels of curves and a report (a table, findings, the
article's own figures), written as ``NAME.md``, ``NAME.json`` and ``NAME.png``."""

from __future__ import annotations

import json
import math
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from ..files import atomic_write_text


@dataclass
class Panel:
    """One panel of the experiment's figure: named series of (x, y) points."""

    title: str
    xlabel: str
    ylabel: str
    series: dict[str, list[tuple[float, float]]]
    xscale: str = "linear"
    yscale: str = "linear"


@dataclass
class Report:
    """An experiment's outcome: its table, the findings in words, the article's figures
    beside ours, the settings it ran with and the panels of its figure."""

    experiment: str
    title: str
    source: str
    claim: str
    columns: list[str]
    rows: list[dict[str, Any]]
    findings: list[str]
    settings: dict[str, Any]
    panels: list[Panel] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)

    def command(self) -> str:
        """The command that reproduces it."""
        s = self.settings
        return (f"zoo experiment {self.experiment} --seeds {s['seeds']} --steps {s['steps']}"
                + (f" --device {s['device']}" if s["device"] != "cpu" else "")
                + "".join(f" --set {k}={v}" for k, v in s.get("overrides", {}).items()))

    def markdown(self) -> str:
        """The report as a markdown section (the docs page is these, one after another)."""
        lines = [f"## `{self.experiment}`: {self.title}", "",
                 f"**The article** ({self.source}): {self.claim}", "",
                 f"**Command**: `{self.command()}` ({self.settings['minutes']:.1f} minutes on "
                 f"{self.settings['machine']})", "", table(self.columns, self.rows), "",
                 "**What we found**:", ""]
        lines += [f"- {finding}" for finding in self.findings]
        if self.notes:
            lines += ["", "**Notes**:", ""] + [f"- {note}" for note in self.notes]
        return "\n".join(lines) + "\n"

    def write(self, out: str | Path) -> dict[str, Path]:
        """``NAME.md``, ``NAME.json`` and ``NAME.png`` in folder ``out``."""
        out = Path(out)
        out.mkdir(parents=True, exist_ok=True)
        paths = {kind: out / f"{self.experiment}.{kind}" for kind in ("md", "json", "png")}
        atomic_write_text(paths["md"], self.markdown())
        atomic_write_text(paths["json"], json.dumps(asdict(self), indent=2, default=str) + "\n")
        draw(self, paths["png"])
        return paths


def cell(value: Any) -> str:
    """A value as a table shows it: 4 significant digits, thousands grouped, "–" for none."""
    if isinstance(value, float):
        if math.isnan(value):
            return "–"
        return f"{value:.4g}" if abs(value) < 1e4 else f"{value:,.0f}"
    if isinstance(value, int) and not isinstance(value, bool):
        return f"{value:,}"
    return "–" if value is None else str(value)


def table(columns: list[str], rows: list[dict[str, Any]]) -> str:
    """Rows as a Markdown table of the given columns."""
    lines = ["| " + " | ".join(columns) + " |", "|" + "---|" * len(columns)]
    lines += ["| " + " | ".join(cell(row.get(c)) for c in columns) + " |" for row in rows]
    return "\n".join(lines)


def draw(report: Report, path: Path) -> None:
    """A report's panels side by side, as a PNG at ``path``."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    panels = report.panels or [Panel(report.title, "", "", {})]
    fig, axes = plt.subplots(1, len(panels), figsize=(6 * len(panels), 4.2), squeeze=False)
    for ax, panel in zip(axes[0], panels):
        for label, points in panel.series.items():
            if points:
                xs, ys = zip(*points)
                ax.plot(xs, ys, "o-" if len(points) < 12 else "-", label=label, lw=1.5, ms=4)
        ax.set(title=panel.title, xlabel=panel.xlabel, ylabel=panel.ylabel,
               xscale=panel.xscale, yscale=panel.yscale)
        ax.grid(alpha=0.3)
        if panel.series:
            ax.legend(fontsize=8)
    fig.suptitle(f"zoo experiment {report.experiment}: {report.title}", fontsize=11)
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)
