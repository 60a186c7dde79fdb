"""Drivers under test, one folder each (ours, nvidia, ...): how each runs on each backend."""
