"""The Docker engine the kind backend and image builds run on: a running one, else Debian's dockerd started
with our own settings; the firewall changes it makes, taken back; the runtime wrapper that drops capabilities."""
