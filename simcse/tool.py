"""The reference code's module path of the tool: ``from simcse.tool import SimCSE`` is
:class:`simcse.retrieval.tool.SimCSE` (the same class as ``from simcse import SimCSE``)."""
from simcse.retrieval.tool import SimCSE

__all__ = ["SimCSE"]
