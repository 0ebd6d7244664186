"""Kept for scripts/continuity.py, which imports the page server from here; the home is tests.support.pages."""

from tests.support.pages import PAGES, serve_pages

__all__ = ["PAGES", "serve_pages"]
