"""[weight_decoder]: optional, validated, part of the fingerprint only when present."""

from __future__ import annotations

import pytest

from npuc.errors import TargetError
from npuc.targets import load_target
from npuc.targets.loader import target_from_dict


def doc_with(decoder):
    d = load_target("u55-like-256").document()
    if decoder is None:
        d.pop("weight_decoder", None)
    else:
        d["weight_decoder"] = decoder
    return d


def test_presets_with_and_without_a_decoder():
    assert load_target("u55-like-256").weight_decoder.bytes_per_cycle == 16
    assert load_target("u65-like-256").weight_decoder is not None
    for name in ("npu-small", "npu-mid", "npu-large"):
        assert load_target(name).weight_decoder is None
        assert "weight_decoder" not in load_target(name).hardware_params()


def test_the_decoder_is_hardware_it_changes_the_fingerprint():
    with_one = target_from_dict(doc_with({"bytes_per_cycle": 16, "latency_cycles": 8, "pj_per_byte": 0.05}))
    slower = target_from_dict(doc_with({"bytes_per_cycle": 4, "latency_cycles": 8, "pj_per_byte": 0.05}))
    without = target_from_dict(doc_with(None))
    assert len({with_one.fingerprint(), slower.fingerprint(), without.fingerprint()}) == 3
    assert target_from_dict(with_one.document()) == with_one


@pytest.mark.parametrize("decoder, words", [
    ({"bytes_per_cycle": 0, "latency_cycles": 8, "pj_per_byte": 0.05}, "weight_decoder.bytes_per_cycle"),
    ({"bytes_per_cycle": 16, "latency_cycles": -1, "pj_per_byte": 0.05}, "weight_decoder.latency_cycles"),
    ({"bytes_per_cycle": 16, "latency_cycles": 8}, "weight_decoder.pj_per_byte': missing key"),
    ({"bytes_per_cycle": 16, "latency_cycles": 8, "pj_per_byte": 0.05, "ratio": 2}, "weight_decoder.ratio': unknown key"),
])
def test_bad_decoders_are_refused_with_the_key(decoder, words):
    with pytest.raises(TargetError, match=words):
        target_from_dict(doc_with(decoder), "t.toml")
