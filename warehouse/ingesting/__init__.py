"""Ingesting: source formats (detect, parse, validate), the atomic loader, the landing folder."""
