"""Address widths of the instruction set, shared with the target validator.

A target cannot describe more memory than an instruction can address: DRAM addresses are 32-bit
byte addresses, scratchpad and accumulator addresses are 24-bit byte addresses.
"""

from __future__ import annotations

DRAM_ADDR_BITS = 32
LOCAL_ADDR_BITS = 24
