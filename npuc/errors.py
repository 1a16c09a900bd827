"""Errors meant for users.

Every error npuc raises on purpose derives from :class:`NpucError` and reads as a sentence: what
went wrong, where, and what to do about it.  Anything else escaping npuc is a bug in npuc.
"""

from __future__ import annotations


class NpucError(Exception):
    """Base class of every error meant for a user of npuc."""


class ExportError(NpucError):
    """torch.export could not capture the model."""


class DynamicShapeError(NpucError):
    """The model has a dynamic dimension; npuc compiles static shapes only."""


class UnsupportedOpError(NpucError):
    """The frontend met an operator it has no mapping for."""


class VerifyError(NpucError):
    """An IR failed its verifier: a malformed graph or program."""


class ParseError(NpucError):
    """A text form of an IR could not be parsed."""


class TargetError(NpucError):
    """A target file is missing, malformed or invalid."""


class AsmError(NpucError):
    """Assembly text could not be assembled."""


class BinaryFormatError(NpucError):
    """A .npub container is malformed, truncated, of a newer version, or for another target."""


class SimulationError(NpucError):
    """The simulator met an illegal program: bad address, misaligned access, bad token, ..."""


class CompileError(NpucError):
    """The model cannot be compiled for the target (does not fit, unsupported configuration)."""


class ModelSpecError(NpucError):
    """A MODEL argument names no zoo entry and no loadable user file."""


class ReportError(NpucError):
    """A report could not be built (plotly missing, a table or figure that does not fit)."""


class ExploreError(NpucError):
    """A design-space sweep is malformed: an unknown key, a bad value, an unknown objective."""
class MissingExtraError(NpucError):
    """An optional dependency of npuc is not installed; the message names what to install."""


class FileError(NpucError):
    """A file or folder npuc was asked to read or write could not be (missing, not a folder,
    no permission, no space...); the message names the path."""
