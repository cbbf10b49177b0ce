"""Catalogue names of the GPUs and models the sources name: their system names, and
HuggingFace ids matched to hardware/ and the model catalogue."""

from __future__ import annotations

from sim.paths import MODEL_CATALOG_DIR

SYSTEMS = {
    "h100_sxm": "h100-sxm",
    "h200_sxm": "h200",
    "b200_sxm": "b200",
    "a100_sxm": "a100-80gb",
    "l40s": "l40s",
    "RTX4090": "rtx-4090",
    "RTXPRO6000": "rtx-pro-6000",
}
# Checkpoints of one architecture the catalogue lists under another name.
SAME_ARCHITECTURE = {"deepseek-r1": "deepseek-v3"}


def catalogue_model(hf_id: str) -> tuple[str, str | None]:
    """(catalogue name, note) for a HuggingFace id; the id itself when nothing matches (the
    case then fails with the catalogue's list)."""
    names = {p.stem for p in MODEL_CATALOG_DIR.glob("*.json")}
    base = hf_id.split("/")[-1].lower()
    for suffix in ("-fp8", "-instruct-2507", "-instruct", "-hf", "-2507"):
        if base in names:
            break
        base = base.removesuffix(suffix)
    if base in names:
        return base, None
    if base in SAME_ARCHITECTURE:
        name = SAME_ARCHITECTURE[base]
        return name, f"{hf_id} has {name}'s architecture"
    for name in sorted(names, key=len, reverse=True):  # llama-3.1-8b-instruct -> llama-3.1-8b
        if base.startswith(name):
            return name, None
    return hf_id, None
