"""The simulator and what it runs on: hardware profiles (`hardware`), requests (`workload`), predictors,
policies (`policies`, `bounds`: amin; `early`: LAPS-SD's Â), the running batch (`runset`), the event-jump
simulation (`simulator`) and its per-run metrics (`metrics`). Imports nothing else from `lengthpred.sched`.
"""
