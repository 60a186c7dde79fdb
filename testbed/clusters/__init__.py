"""Clusters behind one interface: backends kwok (simulated nodes), kind and existing (next)."""
