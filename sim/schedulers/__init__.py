"""Scheduler families: what each step computes. base.py holds the interface every family
offers the engine (Scheduler), the state they share (SchedulerBase), the plan of a step
(StepPlan) and the per-replica options (SchedulerOptions); one module per family:
vllm_v1.py, vllm_v0.py, sglang.py, trtllm.py, teaching.py (Orca, static batching).

May import sim.kv, sim.workload, sim.engines, sim.specs (and the root).
"""
