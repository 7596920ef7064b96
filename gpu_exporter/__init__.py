"""gpu-exporter: NVIDIA GPU metrics for Prometheus, sampled through NVML."""

__version__ = "0.1.0"
