"""The Dagster layer of Profile Warehouse: thin wrappers that call ``warehouse``."""
