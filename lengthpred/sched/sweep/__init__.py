"""Grids of simulation runs over request pools (T5): the pools (`pool`, `sources`), the grid and its results
files (`experiment`), means over seeds with gains over FCFS (`summary`) and the sweep's figures (`plots`).
"""
