"""What is simulated on: the GPU catalogue (hardware/*.yaml), model architectures
(HuggingFace config.json files, sim/catalog/models/) and the links between GPUs
(hardware/links.yaml).

    hardware.py      Hardware and the catalogue: FLOP/s per dtype, HBM, NVLink, PCIe, price
    model.py         ModelSpec: layers, attention kinds, MoE, MLA; parameters, FLOPs, KV bytes
    model_config.py  config.json -> ModelSpec, the model catalogue
    links.py         Link and hardware/links.yaml (disaggregated KV transfer)
    names.py         catalogue names as typed: "did you mean", HuggingFace ids as entries

Imports only sim.errors and sim.paths: everything else builds on these.
"""
