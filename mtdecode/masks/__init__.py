"""Attention-mask builders shared by every strategy, and a `plot` helper for the docs."""

from mtdecode.masks.batch import place
from mtdecode.masks.build import causal, tree, tree_positions
from mtdecode.masks.lookahead import LookaheadLayout
from mtdecode.masks.plot import plot

__all__ = ["LookaheadLayout", "causal", "place", "plot", "tree", "tree_positions"]
