"""Whether a forward is recorded into a graph (torch.jit.trace, torch.export, torch.compile) rather than run:
checks that read values and ops without a graph form step aside then."""

from __future__ import annotations

import torch


def recording_graph() -> bool:
    """Whether this forward is being recorded into a graph rather than run."""
    return torch.jit.is_tracing() or torch.compiler.is_compiling()
