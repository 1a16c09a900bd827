"""A binary loads without ``target=`` on every preset: the target description in its metadata
rebuilds the same target (fingerprint), memory order included.

Found from outside: on ``u55-like-256`` (memories ``sram`` then ``flash``) the metadata's JSON
sorted the memory tables, the rebuilt target had a different address map, and ``npuc.load``
refused the compiler's own output as not matching its fingerprint.
"""

import pytest
import torch

import npuc
from npuc.targets import list_presets


class Tiny(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.conv = torch.nn.Conv2d(3, 8, 3)

    def forward(self, x):
        return torch.relu(self.conv(x))


@pytest.mark.parametrize("preset", list_presets())
def test_binary_loads_without_target(preset, tmp_path):
    torch.manual_seed(0)
    m = Tiny().eval()
    x = torch.randn(1, 3, 12, 12)
    art = npuc.compile(m, (x,), target=preset, quantize="int8", calibration=[(torch.randn(1, 3, 12, 12),)])
    path = tmp_path / "m.npub"
    art.save(path)
    loaded = npuc.load(path)
    assert loaded.target.fingerprint() == art.target.fingerprint()
    assert [mem.name for mem in loaded.target.memories] == [mem.name for mem in art.target.memories]
    (want,) = art.run(x)
    (got,) = loaded.run(x)
    assert torch.equal(got, want)
