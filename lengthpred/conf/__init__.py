"""The Hydra configs, shipped inside the package so an installed wheel composes them (`pkg://lengthpred.conf`).

The checkout keeps a `conf -> lengthpred/conf` symlink, so `scripts/*.py` (`config_path="../conf"`) and every
path that names `conf/...` work as before. No Python lives here: this file only makes the folder importable.
"""
