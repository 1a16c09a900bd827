"""The JSON forms of ``npuc targets --json`` and ``npuc run --json`` (the profile's is
``Profile.to_dict()``, the compilation's ``CompileReport.to_dict()``)."""

from __future__ import annotations



def target_dict(t) -> dict:
    """Every parameter of a target (as in its TOML file) and its derived figures."""
    d = t.document()
    d["derived"] = {
        "peak_macs_per_cycle": t.peak_macs_per_cycle,
        "clock_hz": t.clock_hz,
        "peak_tops": {dt: t.peak_tops(dt) for dt in t.array.dtypes},
        "dram_gb_per_s": t.dram_gb_per_s,
        "spad_bytes_per_cycle": t.spad_bytes_per_cycle,
        "has_fp16": t.has_fp16,
        "dram_bytes_per_cycle": t.dram_bytes_per_cycle,
        "address_map": [{"memory": w.memory.name, "base": w.base, "end": w.end} for w in t.windows],
    }
    return d


def targets_json(names: list[str] | None) -> dict:
    """The targets of ``npuc targets`` (the presets, or the given names / files) with the default named."""
    from npuc.targets import DEFAULT_TARGET, list_presets, load_target

    targets = [load_target(n) for n in names] if names else sorted(
        (load_target(n) for n in list_presets()), key=lambda t: t.peak_macs_per_cycle)
    return {"default": DEFAULT_TARGET, "targets": [target_dict(t) for t in targets]}


def _stats(o) -> dict:
    f = o.float()
    return {"shape": list(o.shape), "mean": float(f.mean()), "std": float(f.std()) if o.numel() > 1 else 0.0,
            "min": float(f.min()), "max": float(f.max())}


def run_json(art, inputs: tuple, model: str | None) -> dict:
    """Run ``art`` on ``inputs``; the outputs' statistics and, when the model is known (a zoo model
    or ``model``), each output against PyTorch eager fp32 (``ok`` is None when nothing is checked)."""
    from npuc.report.accuracy import check_outputs, eager_outputs, rel_l2
    from npuc.zoo import ZOO, load_model

    outs = art.run(*inputs)
    meta = dict(art.npub.metadata.extra) if art.npub.metadata else {}
    precision = meta.get("precision", "")
    doc = {"model": art.model_name, "target": art.target.name, "precision": precision,
           "outputs": [_stats(o) for o in outs], "checks": [], "ok": None}
    name = model or (art.model_name if art.model_name in ZOO else None)
    if name is None:
        return doc
    module, _ = load_model(name)
    doc["reference"] = "PyTorch eager fp32"
    if precision == "int8":  # quantization error: shown, not judged
        for o, r in zip(outs, eager_outputs(module, inputs)):
            doc["checks"].append({"rel_l2": rel_l2(o, r), "max_abs": float((o - r).abs().max()),
                                  "tolerance": None, "ok": None})
        return doc
    checks = check_outputs(outs, module, inputs)
    for c in checks:
        doc["checks"].append({"rel_l2": c.rel_error, "fp16_rel_l2": c.fp16_rel_error, "tolerance": c.tolerance,
                              "max_abs": c.max_abs_error, "same_top1": c.argmax_same, "ok": c.ok})
    doc["ok"] = all(c.ok for c in checks)
    return doc
