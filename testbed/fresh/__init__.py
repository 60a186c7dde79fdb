"""`nox -s fresh`: the README's commands on a throwaway Debian root (machine), with its own network (net)
and mount namespace (root)."""
