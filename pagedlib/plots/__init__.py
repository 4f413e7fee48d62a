"""The course's figures, one module per part of the course; every function returns a matplotlib Figure.

Each figure has a title, axis labels with units and a legend where there is more than one series.
Importing this package applies the course's matplotlib defaults (``style.use_course_style``: readable
font sizes, 2x PNGs in a notebook); ``show(fig, alt=..., caption=...)`` displays a figure with alt
text and a caption (``display.py``); ``show_table(rows, headers)`` shows results as a table
(defined in ``pagedlib.output``, with the one "display in a notebook, else print").
"""
from .style import COLORS, PADDING_HATCH, use_course_style  # noqa: F401
from .display import FigureView, figure_html, show  # noqa: F401
from ..output import TableView, show_table  # noqa: F401
from .kernels import *  # noqa: F401,F403
from .sim import *  # noqa: F401,F403
from .engine import *  # noqa: F401,F403
from .memory import *  # noqa: F401,F403
from .sharing import *  # noqa: F401,F403
from .paging import *  # noqa: F401,F403
from .cluster import *  # noqa: F401,F403
from .radix import *  # noqa: F401,F403
from .steps import *  # noqa: F401,F403

use_course_style()
