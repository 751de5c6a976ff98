"""The errors zoo raises. Each names what is wrong and what would be right."""

from __future__ import annotations


class ZooError(Exception):
    """Base class of every error zoo raises on purpose."""


class UnknownNameError(ZooError, LookupError):
    """A component, family or recipe name that nothing registered."""


class DuplicateComponentError(ZooError, ValueError):
    """A second registration of a name without ``override=True``."""


class RecipeError(ZooError, ValueError):
    """A recipe (or an override of one) that cannot be built."""


class CapabilityError(RecipeError):
    """Components that each exist but cannot work together."""


class MemoryBudgetError(RecipeError):
    """A recipe whose weights would not fit in this machine's memory."""


class PluginError(ZooError, RuntimeError):
    """A plugin that could not be loaded or broke while registering."""


class CheckpointError(ZooError, RuntimeError):
    """A checkpoint that cannot be written (a full disk) or read back (a corrupt one)."""


class TrainingError(ZooError, RuntimeError):
    """Training that cannot go on as it is (its loss became NaN or infinite)."""


class ArtifactError(ZooError, ValueError):
    """A saved model (a folder or a Hub repository) that cannot be loaded as it is."""


class CorruptFileError(ArtifactError):
    """A file of a saved model that is not what it should be: its sha256 differs from the
    one its config.json was saved with, or it does not parse. ``paths`` names the files."""

    def __init__(self, message: str, paths: list | None = None) -> None:
        super().__init__(message)
        self.paths = list(paths or [])


class MissingPluginError(ArtifactError):
    """A saved model naming a component whose plugin is not installed."""


class ExportError(ZooError, ValueError):
    """A model an engine cannot express, or an export that cannot be written."""


class FormatError(ArtifactError):
    """A foreign model (a transformers folder) with an option zoo cannot express, or
    weights that do not fit its config."""


class SettingError(ZooError, ValueError):
    """An environment variable zoo reads holds a value outside what it takes."""
