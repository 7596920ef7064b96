"""`gpu-exporter --self-check`: the exporter's values beside nvidia-smi's, on a real host.

`nvidia_smi` runs and parses nvidia-smi, `compare` holds the quantities compared and
their tolerances, `check` samples through the daemon's own backend and sampler, and
prints the table. Nothing here is imported unless `--self-check` is given.
"""
