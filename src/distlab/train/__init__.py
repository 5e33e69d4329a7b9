"""Training drivers.  Each technique keeps its algorithm in one module and
runs it on either backend (the simulated cluster or torch.distributed)."""
