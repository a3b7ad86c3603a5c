"""Real serving traces as workloads: windows scaled to a load (`windows`), heads matched into a trace
(`head_mapping`; their pool: `lengthpred.stages.head_pool`), noisy oracles of a set Spearman (`noisy_oracle`), the grid with gains against
Spearman (`experiment`), its tables (`report`) and figures (`plots`).
"""
