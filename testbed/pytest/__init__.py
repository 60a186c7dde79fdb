"""pytest plugins: the test-bed fixtures (plugin), the proof table and report (proofs), the skip allowlist (skips).

Absolute imports only: inside this package `import pytest` is pytest itself."""
