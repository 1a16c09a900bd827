"""The shared HTML report blocks: a self-contained page, tables, figures, the roofline."""

from __future__ import annotations

import re

import pytest

from npuc.errors import ReportError
from npuc.report import html as rh
from npuc.targets import load_target
from tests.browser import render

pytest.importorskip("plotly")


def _page() -> rh.Page:
    import plotly.graph_objects as go

    tgt = load_target("npu-mid")
    page = rh.Page("A <test> page", "subtitle & more")
    points = [rh.RooflinePoint("conv1", 2 * 118_013_952, 1_000_000, 600_000),
              rh.RooflinePoint("fc", 2 * 512_000, 1_030_000, 70_000),
              rh.RooflinePoint("add", 0, 10_000, 900)]
    page.section("Roofline", rh.Figure(rh.roofline_figure(points, rh.target_roofs(tgt))))
    page.section("Scatter", rh.Paragraph("a <b>not bold</b> paragraph"),
                 rh.Figure(go.Figure(go.Scatter(x=[1, 2, 3], y=[3, 1, 2]))))
    page.section("Table", rh.table(["layer", "cycles", "share", "ok"],
                                   [["conv1", 600_000, 0.5, True], ["fc", 70_000, 0.05, False]],
                                   formats={"share": ".1%"}, highlight=[1]))
    return page


def test_page_is_self_contained_and_deterministic(tmp_path):
    text = _page().render()
    assert text == _page().render()
    bundle = rh.plotly_js()
    assert text.count(bundle[:300]) == 1 and bundle in text  # plotly.js inlined, once
    ours = text.replace(bundle, "")
    assert not re.search(r"""(src|href)=["']?(https?:)?//""", ours)  # nothing loaded from a network
    assert "<link" not in ours and "<script src" not in ours
    assert "&lt;b&gt;not bold&lt;/b&gt;" in text and "A &lt;test&gt; page" in text
    assert 'class="highlight"' in text and "5.0%" in text
    out = rh.Page("p").write(tmp_path / "sub" / "p.html")
    assert out.read_text().startswith("<!DOCTYPE html>")
    assert [p.name for p in (tmp_path / "sub").iterdir()] == ["p.html"]


def test_page_without_figures_has_no_plotly():
    page = rh.Page("tables only")
    page.section("t", rh.table(["a"], [[1]]))
    assert "Plotly" not in page.render().split("<main>")[0]


def test_table_rows_must_match_columns():
    with pytest.raises(ReportError, match="row 1 has 1 cells but the table has 2 columns"):
        rh.table(["a", "b"], [[1, 2], [3]])


def test_roofline_has_compute_roof_and_one_roof_per_memory():
    tgt = load_target("npu-mid")
    roofs = rh.target_roofs(tgt)
    assert roofs.compute_ops_per_cycle == 2 * 16 * 16
    assert dict(roofs.memories) == {"DRAM (DMA)": 16.0, "scratchpad": 128.0}
    fig = rh.roofline_figure([rh.RooflinePoint("a", 100, 10, 5), rh.RooflinePoint("b", 0, 1, 1)], roofs)
    names = [t.name for t in fig.data]
    assert names[0].startswith("compute roof") and sum(n.endswith("B/cycle)") for n in names) == 2
    layers = fig.data[-1]
    assert list(layers.text) == ["a"] and list(layers.x) == [10.0] and list(layers.y) == [20.0]
    mem = fig.data[1]  # the DRAM roof meets the compute roof at the ridge point
    assert mem.x[1] == pytest.approx(512 / 16) and mem.y[1] == 512


def test_page_renders_in_chromium(tmp_path):
    path = _page().write(tmp_path / "page.html")
    got = render(path)
    assert got.console == ()
    assert [pid for pid, _ in got.plots] == ["plot-0", "plot-1"]
    assert got.all_plots_drawn


def test_browser_helper_sees_errors_and_undrawn_plots(tmp_path):
    bad = tmp_path / "bad.html"
    bad.write_text('<!DOCTYPE html><html><body><div class="npuc-plot" id="plot-0"></div>'
                   "<script>Plotly.newPlot('plot-0', [], {});</script></body></html>")
    got = render(bad)
    assert any("Plotly is not defined" in m for m in got.console)
    assert got.plots == (("plot-0", False),) and not got.all_plots_drawn
