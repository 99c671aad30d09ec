"""The GPU check: one prepared script for a machine with one CUDA GPU (eval/gpu/check.sh)."""
