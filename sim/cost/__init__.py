"""A step's time: every kernel of the forward pass priced as its roofline times an efficiency
(fixed in the prior, fitted to measured kernel timings in a GPU's calibrated profile), plus
communication, launches and the engine's CPU time.

    step.py          CostModel.step_cost(plan) -> StepCost: the whole step
    attention.py     attention of every layer kind; context_table.py its per-sequence tables
    kernels.py       KernelPricer: one kernel's seconds; roofline.py its roofline and features
    routing.py       the experts a batch's tokens are routed to (the tables' power law)
    measured_moe.py  expert shapes a table timed, priced at its timings
    prior.py         CostProfile: the uncalibrated prior (calibration/profiles/prior.yaml)
    profiles.py      calibrated GPU profiles (calibration/profiles/<gpu>.json), choose_pricer
    surface.py       the fitted efficiency surfaces
    speculative.py   speculative decoding's verify pass and proposer

It sits above sim.schedulers because it prices their StepPlan. May import sim.schedulers,
sim.kv, sim.workload, sim.engines, sim.specs (and the root).
"""
