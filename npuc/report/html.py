"""Self-contained HTML reports: a page shell and the building blocks the reports share.

A :class:`Page` has a title and sections; a section holds blocks: paragraphs, tables (plain or
sortable by clicking a column header) and plotly figures.  The page is one file that opens with no
network: plotly.js is inlined once per page (only when the page has a figure), the table sorter is
a few lines of inline script, and there are no external fonts, styles or images.

Every figure's ``<div>`` has the class ``npuc-plot`` and gets ``data-drawn="1"`` once plotly has
drawn it, so a headless browser (``tests/browser.py``) can tell that each plot drew.  Element ids
are numbered in order, so rendering the same page twice gives the same bytes.

:func:`roofline_figure` draws layers against a machine's roofs: operational intensity (operations
per DRAM byte) on x, achieved operations per cycle on y, the compute roof and one bandwidth roof
per memory.  :func:`target_roofs` derives those roofs from a target.

plotly is an optional dependency (the ``report`` extra); a page without figures needs none.
"""

from __future__ import annotations

import html
import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Sequence

from npuc.errors import ReportError

_STYLE = """
body{font-family:system-ui,-apple-system,'Segoe UI',Roboto,sans-serif;margin:0;color:#1d232a;background:#fafbfc}
header{background:#1d3557;color:#fff;padding:18px 32px}
header h1{margin:0;font-size:22px;font-weight:600}
header p{margin:6px 0 0;opacity:.85;font-size:14px}
main{padding:8px 32px 40px;max-width:1400px}
section{margin-top:28px}
h2{font-size:18px;border-bottom:1px solid #d8dee4;padding-bottom:4px}
p.note{font-size:14px;line-height:1.45;max-width:1000px}
table.npuc-table{border-collapse:collapse;font-size:13px;margin:8px 0}
table.npuc-table th,table.npuc-table td{border:1px solid #d8dee4;padding:3px 8px;text-align:right;white-space:nowrap}
table.npuc-table th{background:#eef1f4;position:sticky;top:0}
table.npuc-table td.text,table.npuc-table th.text{text-align:left}
table.sortable th{cursor:pointer;user-select:none}
table.sortable th[data-dir=asc]::after{content:' \\25B2'}
table.sortable th[data-dir=desc]::after{content:' \\25BC'}
tr.highlight td{background:#fff4d6}
div.scroll{max-height:520px;overflow:auto;display:inline-block;max-width:100%}
div.npuc-plot{width:100%;max-width:1100px;height:480px}
""".strip()

# Sort a table by the clicked column: numbers numerically (data-v holds the raw value), text as text.
_SORT_SCRIPT = """
document.querySelectorAll('table.sortable').forEach(function(t){
  t.querySelectorAll('th').forEach(function(th,i){
    th.addEventListener('click',function(){
      var dir=th.getAttribute('data-dir')==='asc'?'desc':'asc';
      t.querySelectorAll('th').forEach(function(h){h.removeAttribute('data-dir');});
      th.setAttribute('data-dir',dir);
      var body=t.tBodies[0],rows=Array.prototype.slice.call(body.rows);
      rows.sort(function(a,b){
        var x=a.cells[i].getAttribute('data-v'),y=b.cells[i].getAttribute('data-v');
        var nx=parseFloat(x),ny=parseFloat(y),c;
        if(!isNaN(nx)&&!isNaN(ny)){c=nx-ny;}else{c=String(x).localeCompare(String(y));}
        return dir==='asc'?c:-c;
      });
      rows.forEach(function(r){body.appendChild(r);});
    });
  });
});
""".strip()

_PLOT_SCRIPT = """
(function(){
  var el=document.getElementById(%(id)s);
  var spec=%(spec)s;
  Plotly.newPlot(el,spec.data,spec.layout,{displaylogo:false,responsive:true}).then(function(){
    el.setAttribute('data-drawn','1');
  });
})();
""".strip()


def _plotly():
    try:
        import plotly  # noqa: F401
        import plotly.graph_objects as go
    except ImportError:
        raise ReportError(
            "the HTML report needs plotly, which is not installed: pip install 'npuc[report]'"
        ) from None
    return go


def plotly_js() -> str:
    """The plotly.js bundle shipped with the plotly package, to inline in a page."""
    _plotly()
    from plotly.offline import get_plotlyjs

    return get_plotlyjs()


# ------------------------------------------------------------------------------------ blocks


@dataclass(frozen=True)
class Paragraph:
    """A paragraph of plain text (escaped)."""

    text: str


@dataclass(frozen=True)
class RawHtml:
    """A fragment of HTML written by npuc itself (never user text)."""

    markup: str


@dataclass(frozen=True)
class Table:
    """A table: column names, rows of cells (numbers or text), optional row highlight.

    Numbers are shown with ``formats[column]`` (a format spec such as ``",.0f"``), else ``repr``-free
    defaults; sorting uses the raw value.  ``highlight`` lists row indices drawn highlighted.
    """

    columns: tuple[str, ...]
    rows: tuple[tuple[Any, ...], ...]
    sortable: bool = True
    formats: tuple[tuple[str, str], ...] = ()
    highlight: tuple[int, ...] = ()
    caption: str = ""


@dataclass(frozen=True)
class Figure:
    """A plotly figure (a ``plotly.graph_objects.Figure`` or its dict form)."""

    figure: Any
    height_px: int = 480


Block = Paragraph | RawHtml | Table | Figure


@dataclass
class Section:
    title: str
    blocks: list[Block] = field(default_factory=list)


def table(columns: Sequence[str], rows: Sequence[Sequence[Any]], *, sortable: bool = True,
          formats: dict[str, str] | None = None, highlight: Sequence[int] = (), caption: str = "") -> Table:
    """A :class:`Table` from plain sequences; every row must have one cell per column."""
    cols = tuple(str(c) for c in columns)
    out_rows = tuple(tuple(r) for r in rows)
    for i, r in enumerate(out_rows):
        if len(r) != len(cols):
            raise ReportError(f"table row {i} has {len(r)} cells but the table has {len(cols)} columns")
    return Table(cols, out_rows, sortable, tuple(sorted((formats or {}).items())), tuple(highlight), caption)


def _cell(value: Any, fmt: str | None) -> tuple[str, str, bool]:
    """(shown text, sort value, is_text) of one cell."""
    if isinstance(value, bool):
        return ("yes" if value else "no"), ("1" if value else "0"), True
    if isinstance(value, int):
        return format(value, fmt or ","), str(value), False
    if isinstance(value, float):
        if value != value:  # NaN
            return "", "", False
        return format(value, fmt or ".4g"), repr(value), False
    if value is None:
        return "", "", True
    return str(value), str(value), True


def _render_table(t: Table) -> str:
    fmts = dict(t.formats)
    numeric = [all(isinstance(r[i], (int, float)) and not isinstance(r[i], bool) for r in t.rows if r[i] is not None)
               for i in range(len(t.columns))]
    cls = "npuc-table sortable" if t.sortable else "npuc-table"
    head = "".join(
        f'<th class="{"" if numeric[i] else "text"}">{html.escape(c)}</th>' for i, c in enumerate(t.columns)
    )
    body = []
    marked = set(t.highlight)
    for ri, row in enumerate(t.rows):
        cells = []
        for ci, v in enumerate(row):
            shown, key, is_text = _cell(v, fmts.get(t.columns[ci]))
            klass = ' class="text"' if is_text and not numeric[ci] else ""
            cells.append(f'<td{klass} data-v="{html.escape(key, quote=True)}">{html.escape(shown)}</td>')
        tr = '<tr class="highlight">' if ri in marked else "<tr>"
        body.append(tr + "".join(cells) + "</tr>")
    cap = f"<caption>{html.escape(t.caption)}</caption>" if t.caption else ""
    return (f'<div class="scroll"><table class="{cls}">{cap}<thead><tr>{head}</tr></thead>'
            f'<tbody>{"".join(body)}</tbody></table></div>')


def _figure_spec(fig: Any) -> dict:
    if isinstance(fig, dict):
        spec = fig
    else:
        spec = fig.to_plotly_json()
    return {"data": spec.get("data", []), "layout": spec.get("layout", {})}


def _json(obj: Any) -> str:
    """JSON safe to place inside a <script> element."""
    import plotly.utils

    text = json.dumps(obj, cls=plotly.utils.PlotlyJSONEncoder, sort_keys=True, separators=(",", ":"))
    return text.replace("</", "<\\/")


# ------------------------------------------------------------------------------------ page


class Page:
    """A report page: a title, a subtitle, and sections of blocks, rendered to one HTML file."""

    def __init__(self, title: str, subtitle: str = "") -> None:
        self.title = title
        self.subtitle = subtitle
        self.sections: list[Section] = []

    def section(self, title: str, *blocks: Block) -> Section:
        """Append a section (blocks may be added to the returned section later)."""
        s = Section(title, list(blocks))
        self.sections.append(s)
        return s

    @property
    def has_figures(self) -> bool:
        return any(isinstance(b, Figure) for s in self.sections for b in s.blocks)

    def render(self) -> str:
        """The whole page as a string (deterministic)."""
        parts: list[str] = []
        scripts: list[str] = []
        n_fig = 0
        for si, s in enumerate(self.sections):
            parts.append(f'<section id="s{si}"><h2>{html.escape(s.title)}</h2>')
            for b in s.blocks:
                if isinstance(b, Paragraph):
                    parts.append(f'<p class="note">{html.escape(b.text)}</p>')
                elif isinstance(b, RawHtml):
                    parts.append(b.markup)
                elif isinstance(b, Table):
                    parts.append(_render_table(b))
                elif isinstance(b, Figure):
                    fid = f"plot-{n_fig}"
                    n_fig += 1
                    parts.append(f'<div class="npuc-plot" id="{fid}" style="height:{int(b.height_px)}px"></div>')
                    scripts.append(_PLOT_SCRIPT % {"id": json.dumps(fid), "spec": _json(_figure_spec(b.figure))})
                else:
                    raise ReportError(f"a report section holds {type(b).__name__}, which is not a block")
            parts.append("</section>")
        head_js = f"<script>{plotly_js()}</script>" if n_fig else ""
        sub = f"<p>{html.escape(self.subtitle)}</p>" if self.subtitle else ""
        return (
            "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">"
            f"<meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">"
            f"<title>{html.escape(self.title)}</title><style>{_STYLE}</style>{head_js}</head>\n"
            f"<body><header><h1>{html.escape(self.title)}</h1>{sub}</header><main>\n"
            + "\n".join(parts)
            + f"\n</main><script>{_SORT_SCRIPT}</script>"
            + "".join(f"<script>{s}</script>" for s in scripts)
            + "</body></html>\n"
        )

    def write(self, path: str | Path) -> Path:
        """Write the page to ``path`` (through a temporary file beside it, then renamed)."""
        return write_text_atomic(path, self.render())


def write_text_atomic(path: str | Path, text: str) -> Path:
    """Write ``text`` to ``path`` whole or not at all (npuc.fileio.write_atomic), making its
    folder first; a FileError names the path when it cannot be written."""
    from npuc.fileio import make_dir, write_atomic

    path = Path(path)
    make_dir(path.parent, "the folder")
    write_atomic(path, text, "the file")
    return path


# ------------------------------------------------------------------------------------ roofline


@dataclass(frozen=True)
class RooflinePoint:
    """One layer on a roofline: its operations (2 per MAC), DRAM bytes and cycles."""

    name: str
    ops: float
    dram_bytes: float
    cycles: float

    @property
    def intensity(self) -> float:
        """Operations per DRAM byte."""
        return self.ops / self.dram_bytes if self.dram_bytes else float("inf")

    @property
    def ops_per_cycle(self) -> float:
        return self.ops / self.cycles if self.cycles else 0.0


@dataclass(frozen=True)
class Roofs:
    """A machine's roofs: peak operations per cycle and one bandwidth (bytes/cycle) per memory."""

    compute_ops_per_cycle: float
    memories: tuple[tuple[str, float], ...]


def target_roofs(target) -> Roofs:
    """The roofs of a target: the array's peak (2 ops per MAC) and each memory's bandwidth."""
    return Roofs(
        compute_ops_per_cycle=2.0 * target.peak_macs_per_cycle,
        memories=(
            ("DRAM (DMA)", float(target.dma.bytes_per_cycle)),
            ("scratchpad", float(target.spad_bytes_per_cycle)),
        ),
    )


def roofline_figure(points: Sequence[RooflinePoint], roofs: Roofs, title: str = "Roofline"):
    """A log-log roofline: layers as points, the compute roof and one bandwidth roof per memory.

    Layers with no MACs (ops = 0) or no DRAM traffic are left out of the plot (their intensity is
    zero or unbounded); the caller's table still lists them.
    """
    go = _plotly()
    shown = [p for p in points if p.ops > 0 and p.dram_bytes > 0 and p.cycles > 0]
    fig = go.Figure()
    xs = [p.intensity for p in shown]
    lo = min(xs + [1.0]) / 4
    hi = max(xs + [roofs.compute_ops_per_cycle]) * 4
    peak = roofs.compute_ops_per_cycle
    fig.add_trace(go.Scatter(x=[lo, hi], y=[peak, peak], mode="lines", name=f"compute roof ({peak:g} ops/cycle)",
                             line={"color": "#d62728", "width": 2}))
    dashes = ("dash", "dot", "dashdot", "longdash")
    for i, (mem, bw) in enumerate(roofs.memories):
        ridge = peak / bw
        fig.add_trace(go.Scatter(x=[lo, ridge], y=[bw * lo, peak], mode="lines",
                                 name=f"{mem} roof ({bw:g} B/cycle)",
                                 line={"dash": dashes[i % len(dashes)], "width": 2}))
    fig.add_trace(go.Scatter(
        x=xs, y=[p.ops_per_cycle for p in shown], mode="markers", name="layers",
        text=[p.name for p in shown], marker={"size": 8, "color": "#1f77b4"},
        hovertemplate="%{text}<br>%{x:.3g} ops/B, %{y:.3g} ops/cycle<extra></extra>",
    ))
    fig.update_layout(title=title, template="plotly_white", margin={"l": 60, "r": 20, "t": 50, "b": 50},
                      xaxis={"type": "log", "title": "operational intensity (ops per DRAM byte)"},
                      yaxis={"type": "log", "title": "achieved ops per cycle"})
    return fig
