"""Line plots as inline SVG, drawn with matplotlib (the `report` extra).

matplotlib is optional because only `bertctl report` draws: training, evaluation and the
other commands never need it, and it brings several compiled packages (pillow, kiwisolver,
contourpy, fonttools). SVG keeps the page self-contained and the plotted data exact: every
point is a path vertex, drawn without simplification, and each line carries an id (`gid`) so
the page can be checked against the numbers it plots.
"""

from __future__ import annotations

import io
from dataclasses import dataclass

from bertctl.errors import BertctlError


@dataclass
class Line:
    gid: str
    label: str
    x: list[float]
    y: list[float]
    sd: list[float] | None = None  # a shaded mean +- sd band, drawn as `band-` + gid


def require() -> None:
    try:
        import matplotlib  # noqa: F401
    except ImportError:
        raise BertctlError("bertctl report needs the optional package matplotlib: "
                           "pip install 'bertctl[report]'") from None


_STYLE = {
    "svg.fonttype": "none",       # text stays text: smaller, searchable
    "svg.hashsalt": "bertctl",    # stable element ids, so the same page is the same bytes
    "path.simplify": False,       # every logged point is a vertex
    "font.size": 9,
    "axes.grid": True,
    "grid.alpha": 0.3,
}


def line_plot(title: str, xlabel: str, lines: list[Line]) -> str:
    """One plot of `lines` against a shared x axis, as an <svg> element."""
    import matplotlib
    from matplotlib.figure import Figure

    with matplotlib.rc_context(_STYLE):
        fig = Figure(figsize=(5.6, 3.3), layout="constrained")
        ax = fig.subplots()
        for i, line in enumerate(lines):
            color = f"C{i % 10}"
            few = len(line.x) <= 25  # markers make short series (one evaluation) visible
            ax.plot(line.x, line.y, gid=line.gid, label=line.label, color=color,
                    marker="o" if few else None, markersize=3, linewidth=1.2)
            if line.sd is not None:
                low = [m - s for m, s in zip(line.y, line.sd)]
                high = [m + s for m, s in zip(line.y, line.sd)]
                ax.fill_between(line.x, low, high, color=color, alpha=0.2, linewidth=0,
                                gid=f"band-{line.gid}")
        # Tick labels say their own values (no offset or shared exponent): the axes read
        # directly, and a program can map every vertex back to the number it draws.
        ax.ticklabel_format(style="plain", useOffset=False)
        ax.set_title(title)
        ax.set_xlabel(xlabel)
        if len(lines) > 1 or any(len(line.x) < 3 for line in lines):
            ax.legend(fontsize=7)  # alone, a line of a point or two is named with its count
        buffer = io.StringIO()
        fig.savefig(buffer, format="svg", metadata={"Date": None})
    svg = buffer.getvalue()
    svg = svg[svg.index("<svg"):]  # drop the XML prolog and doctype: inlined in HTML
    start, end = svg.find("<metadata>"), svg.find("</metadata>")
    if 0 <= start < end:  # the RDF block names its vocabularies by URL; nothing to keep
        svg = svg[:start] + svg[end + len("</metadata>"):]
    return svg
