"""Graph passes, one per module; each is a pure function ``Graph -> Graph``."""

from npuc.passes.canonicalize import canonicalize
from npuc.passes.cse import cse
from npuc.passes.dce import dce
from npuc.passes.fold_batchnorm import fold_batchnorm
from npuc.passes.fold_constants import fold_constants

__all__ = ["canonicalize", "cse", "dce", "fold_batchnorm", "fold_constants"]
