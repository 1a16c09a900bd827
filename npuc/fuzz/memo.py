"""Process-wide memos of library work the random-graph checks repeat for every graph.

Each is a pure function of what it is given and of the op registry, recomputed by the library
on every call; :func:`install` makes the first two remember their results in this process and
lets the third skip a search that cannot match.  They change no result, only how often the same
work is done.

* **torchao's pattern graphs.**  ``convert_pt2e`` looks for QAT conv + batch-norm patterns in any graph that holds a batch norm,
and builds each pattern by running ``torch.export`` on a tiny function -- sixteen exports per
conversion, the same every time, which is most of the int8 check's cost on a random graph with a
batch norm (about 13 of the 13.6 CPU seconds on this machine).  :func:`install` makes torchao
reuse each exported pattern: the key is the pattern function's code and closure (the conv
function and flags it was made for), the example inputs' shapes and dtypes and the keyword
flags; every call returns a deep copy, so a caller that edits its pattern graph edits its own.
A key that cannot be hashed falls through to torchao unchanged.
* **torchao's search for QAT conv + batch-norm patterns.**  A pattern can only match where a
  convolution's result reaches a batch norm; in a graph with no such path (a batch norm on its
  own, or no convolution) the search finds nothing, so the memo runs only what the search does
  around its matching (dead-code elimination, the duplication and removal of dequantize nodes)
  and skips the matching and the pattern exports -- the one-time cost of about a hundred exports
  in each process that meets a batch norm.
* **torch.export's list of composite-implicit ops.**  Every ``run_decompositions`` (once per
  import) scans every op of every namespace of the dispatcher, twice, to list the
  CompositeImplicitAutograd ops it may decompose or keep: about half of the 0.4 CPU s that
  decomposing a small graph costs.  The memo keys a namespace's list on its name and the number
  of ops it holds, so an op registered later is seen; the C++ ops are materialized once, when
  the memo is installed.

The random-graph checks (:mod:`npuc.fuzz.check`) install them.
"""

from __future__ import annotations

import copy
from typing import Any, Callable

_MEMO: dict[Any, Any] = {}


def _spec(x: Any) -> Any:
    """A tensor by its shape and dtype (tracing sees nothing else of an example input)."""
    import torch

    return ("tensor", tuple(x.shape), x.dtype, x.device.type) if isinstance(x, torch.Tensor) else x


def _key(pattern: Callable, example_inputs: tuple, is_cuda: bool, kwargs: dict) -> Any:
    fn = getattr(pattern, "fn", None)  # torchao wraps a pattern function in a module with .fn
    if fn is not None and type(pattern).__name__ == "WrapperModule" and not list(pattern.parameters()):
        pattern = fn
    cells = tuple(_spec(c.cell_contents) for c in (pattern.__closure__ or ()))
    shapes = tuple(_spec(x) for x in example_inputs)
    flags = tuple(sorted((k, _spec(v)) for k, v in kwargs.items()))
    key = (pattern.__code__, cells, shapes, is_cuda, flags)
    hash(key)  # TypeError for an unhashable closure or flag: not memoized
    return key


def _memoized(export_pattern: Callable) -> Callable:
    def get(pattern, example_inputs, is_cuda=False, **kwargs):
        try:
            key = _key(pattern, example_inputs, is_cuda, kwargs)
        except (TypeError, AttributeError):
            return export_pattern(pattern, example_inputs, is_cuda, **kwargs)
        if key not in _MEMO:
            _MEMO[key] = export_pattern(pattern, example_inputs, is_cuda, **kwargs)
        return copy.deepcopy(_MEMO[key])

    get.npuc_memo = _MEMO  # type: ignore[attr-defined]
    return get


def install() -> None:
    """Install the memos in this process (idempotent; a library whose layout differs from the
    one this was written for is left alone)."""
    _install_cia_memo()
    _install_pattern_memo()
    _install_fold_shortcut()


def _install_cia_memo() -> None:
    from torch._export import utils

    scan = utils._collect_all_valid_cia_ops_for_namespace
    if hasattr(scan, "npuc_memo"):
        return
    utils._materialize_cpp_cia_ops()
    memo: dict[tuple[str, int], frozenset] = {}

    def collect(op_namespace):
        key = (op_namespace.name, len(list(op_namespace)))
        if key not in memo:
            memo[key] = frozenset(scan(op_namespace))
        return set(memo[key])

    collect.npuc_memo = memo  # type: ignore[attr-defined]
    utils._collect_all_valid_cia_ops_for_namespace = collect


def _install_pattern_memo() -> None:
    try:
        from torchao.quantization.pt2e import qat_utils, utils
    except ImportError:
        return
    original = getattr(utils, "_get_aten_graph_module_for_pattern", None)
    if original is None or hasattr(getattr(qat_utils, "_get_aten_graph_module_for_pattern", None), "npuc_memo"):
        return
    qat_utils._get_aten_graph_module_for_pattern = _memoized(original)


def _conv_reaches_batch_norm(m: Any) -> bool:
    """Whether a convolution's (or transposed convolution's) result flows into a batch norm."""
    from torchao.quantization.pt2e.utils import _is_bn_node, _is_conv_or_conv_transpose_node

    todo = [n for n in m.graph.nodes if _is_conv_or_conv_transpose_node(n)]
    seen = set(todo)
    while todo:
        n = todo.pop()
        if _is_bn_node(n):
            return True
        for u in n.users:
            if u not in seen:
                seen.add(u)
                todo.append(u)
    return False


def _install_fold_shortcut() -> None:
    try:
        from torchao.quantization.pt2e import qat_utils
    except ImportError:
        return
    original = getattr(qat_utils, "_fold_conv_bn_qat_helper", None)
    needed = ("_duplicate_dequantize_node", "_remove_extra_dequantize")
    if original is None or hasattr(original, "npuc_memo") or not all(hasattr(qat_utils, f) for f in needed):
        return

    def fold(m, conv_fn, example_inputs, is_cuda):
        if _conv_reaches_batch_norm(m):
            return original(m, conv_fn, example_inputs, is_cuda)
        # what the helper does when no pattern matches, in its order
        m.graph.eliminate_dead_code()
        m.recompile()
        qat_utils._duplicate_dequantize_node(m)
        m.recompile()
        qat_utils._remove_extra_dequantize(m)
        m.graph.eliminate_dead_code()
        m.recompile()
        return m

    fold.npuc_memo = True  # type: ignore[attr-defined]
    fold.npuc_original = original  # type: ignore[attr-defined]
    qat_utils._fold_conv_bn_qat_helper = fold
