"""Serving: the read-only analyst query layer, published snapshots, backup and restore."""
