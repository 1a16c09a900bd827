"""Every zoo model: import, run the graph passes, and agree with PyTorch eager fp32.

Each model is exported once per test session (a per-process cache; under pytest-xdist each model's
tests share one worker through its xdist group).  The tolerance is relative to the output scale:
max |npuc - eager| <= 1e-4 * max(1, max |eager|).
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache

import pytest
import torch

from npuc.frontend import import_graph
from npuc.interp import interpret
from npuc.ir import Graph, graphs_equal, parse_graph, print_graph
from npuc.pipeline import GRAPH_PASSES, StageRecord, run_graph_passes
from npuc.zoo import zoo_entry, zoo_names

CNNS = [n for n in zoo_names() if n.startswith("torchvision:") and "vit" not in n]


@dataclass(frozen=True)
class Imported:
    inputs: tuple
    expected: torch.Tensor
    raw: Graph
    optimized: Graph
    records: tuple[StageRecord, ...]


@lru_cache(maxsize=None)
def imported(name: str) -> Imported:
    model, inputs = zoo_entry(name).load()
    with torch.no_grad():
        expected = model(*inputs)
    raw = import_graph(model, inputs, name=name)
    records: list[StageRecord] = []
    optimized = run_graph_passes(raw, verify_each=True, records=records)
    return Imported(inputs, expected, raw, optimized, tuple(records))


def zoo_params(names):
    return [pytest.param(n, marks=pytest.mark.xdist_group(n), id=n) for n in names]


def assert_close_to_eager(g: Graph, m: Imported) -> None:
    (got,) = interpret(g, *m.inputs)
    assert got.shape == m.expected.shape and got.dtype == m.expected.dtype
    scale = max(1.0, float(m.expected.abs().max()))
    err = float((got - m.expected).abs().max())
    assert err <= 1e-4 * scale, f"max abs error {err:.3e} exceeds 1e-4 x {scale:.3g}"


@pytest.mark.parametrize("name", zoo_params(zoo_names()))
def test_raw_import_matches_eager(name):
    assert_close_to_eager(imported(name).raw, imported(name))


@pytest.mark.parametrize("name", zoo_params(zoo_names()))
def test_optimized_graph_matches_eager(name):
    m = imported(name)
    assert_close_to_eager(m.optimized, m)
    # every pass ran and was verified (run_graph_passes verifies after each one)
    assert [r.name for r in m.records] == [p.__name__ for p in GRAPH_PASSES]
    assert len(m.optimized.nodes) < len(m.raw.nodes)


@pytest.mark.parametrize("name", zoo_params(CNNS))
def test_passes_remove_every_batch_norm(name):
    m = imported(name)
    assert any(n.op == "batch_norm" for n in m.raw.nodes)
    assert not any(n.op == "batch_norm" for n in m.optimized.nodes)


@pytest.mark.parametrize("name", zoo_params(zoo_names()))
def test_text_round_trip(name):
    m = imported(name)
    for g in (m.raw, m.optimized):
        assert graphs_equal(parse_graph(print_graph(g), g.constants), g)


@pytest.mark.parametrize("name", zoo_params(zoo_names()))
def test_nodes_carry_user_source_locations(name):
    g = imported(name).raw
    compute = [n for n in g.nodes if n.op != "const"]
    located = [n for n in compute if n.loc]
    assert len(located) >= 0.9 * len(compute)
    assert not any("torch/nn/" in n.loc for n in located)


@pytest.mark.parametrize("name", zoo_params(zoo_names()))
def test_make_inputs_is_seeded_and_matches_the_example_inputs(name):
    entry = zoo_entry(name)
    example = imported(name).inputs
    a, b, c = entry.make_inputs(0), entry.make_inputs(0), entry.make_inputs(1)
    assert all(torch.equal(x, y) for x, y in zip(a, b))
    assert not all(torch.equal(x, y) for x, y in zip(a, c))
    assert all(x.shape == e.shape and x.dtype == e.dtype for x, e in zip(a, example))


@pytest.mark.parametrize("name", ["torchvision:resnet18", "transformers:bert-tiny"])
def test_loading_twice_gives_the_same_weights_and_the_same_graph(name):
    m1, _ = zoo_entry(name).load()
    m2, _ = zoo_entry(name).load()
    s1, s2 = m1.state_dict(), m2.state_dict()
    assert s1.keys() == s2.keys() and all(torch.equal(s1[k], s2[k]) for k in s1)
    g = imported(name).raw
    again = import_graph(m2, zoo_entry(name).make_inputs(0), name=name)
    assert graphs_equal(g, again)


@pytest.mark.parametrize(
    "name, gmacs, params",
    [
        pytest.param("torchvision:resnet18", 1.814, 11_689_512 - 4_800, marks=pytest.mark.xdist_group("torchvision:resnet18")),
        pytest.param("torchvision:resnet50", 4.089, 25_557_032 - 26_560, marks=pytest.mark.xdist_group("torchvision:resnet50")),
        pytest.param("torchvision:mobilenet_v2", 0.301, 3_504_872 - 17_056, marks=pytest.mark.xdist_group("torchvision:mobilenet_v2")),
    ],
)
def test_summary_gives_the_published_macs_and_parameters(name, gmacs, params):
    # Published figures: ResNet-18 1.81 GMACs and 11,689,512 parameters, ResNet-50 4.09 / 25,557,032,
    # MobileNetV2 0.30 / 3,504,872.  Folding a batch norm of C channels into its conv removes its 2C
    # affine parameters and adds a C-element bias: C fewer parameters per norm.
    from npuc.frontend.summary import graph_summary

    _, totals = graph_summary(imported(name).optimized)
    assert round(totals.macs / 1e9, 3) == gmacs
    assert totals.params == params
