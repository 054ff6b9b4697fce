"""The tests' float64 model copies: :func:`oar_rl.float64.float64_copy` (moved to the package so that
`oar-rl gpu-check` can use the same reference)."""

from oar_rl.float64 import float64_copy

__all__ = ["float64_copy"]
