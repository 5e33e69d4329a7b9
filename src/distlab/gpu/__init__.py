"""The GPU tier (docs/gpu.md): ``config/gpu.yaml``'s job list, its plan and its runner's pieces."""
