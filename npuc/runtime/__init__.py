"""Runtime: the .npub container, its loader, and the NPU simulator."""
