"""Running schedules: plans of point-to-point rounds (pure data) that executors such as
:mod:`forestcoll.torch` carry out, and a numpy reference executor."""

from forestcoll.runtime.plan import Message, Plan, Round, Segment, build_plans, phase_schedule, shard_bounds, work_layout

__all__ = ["Message", "Plan", "Round", "Segment", "build_plans", "phase_schedule", "shard_bounds", "work_layout"]
