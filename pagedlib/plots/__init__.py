"""The course's figures, one module per part of the course; every function returns a matplotlib Figure.

Each figure has a title, axis labels with units and a legend where there is more than one series.
"""
from .style import COLORS, PADDING_HATCH  # noqa: F401
from .kernels import *  # noqa: F401,F403
from .sim import *  # noqa: F401,F403
from .engine import *  # noqa: F401,F403
from .memory import *  # noqa: F401,F403
from .sharing import *  # noqa: F401,F403
from .pages import *  # noqa: F401,F403
