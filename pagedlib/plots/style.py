"""Colours and patterns shared by every figure (a colour-blind-safe palette, Okabe-Ito)."""

COLORS = {
    "kv": "#0072B2",          # real K/V tokens (blue)
    "tail": "#E69F00",        # the unused tail of the last page (orange)
    "padding": "#D55E00",     # reserved but unused slots (vermillion, also hatched)
    "free": "#F0F0F0",        # free pool space (light grey)
    "external": "#999999",    # free but unusable holes (grey)
    "shared": "#009E73",      # pages shared by several sequences (green)
    "other": "#CC79A7",       # anything else (purple)
    "accent": "#56B4E9",      # a second series (sky blue)
}
PADDING_HATCH = "///"         # padding is hatched as well as coloured, so it survives greyscale
