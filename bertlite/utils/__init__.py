"""Helpers with no model in them: CPU capabilities, dtype names, user warnings, text."""
