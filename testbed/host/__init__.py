"""This machine: Debian packages the project installs, signals that unwind like Ctrl-C, what a run leaves
behind, progress on the terminal, component health probes."""
