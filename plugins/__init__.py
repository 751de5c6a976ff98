"""The built-in plugins of zoo, one family per folder, one component per file.

Each folder's ``__init__`` is a plugin, listed in pyproject's ``zoo`` entry points
exactly as a third-party plugin would be. Registration passes ``"module:Class"``
strings, so loading a plugin imports no torch.
"""
