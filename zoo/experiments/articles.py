"""The two articles this project grew from, by their titles: the experiments cite them."""

from __future__ import annotations


REREAD = "“Attention Is All You Need 重读笔记”"
"""The first article this project grew from, by its title."""
IN_PRACTICE = "“PyTorch实现Transformer：从Self-Attention到实战调优”"
"""The second article, by its title."""
