"""Kubernetes' AI-conformance tests (kubernetes-sigs/ai-conformance) run on a test bed: their test binary built
from source, offline stand-ins for the images they name, junit/JSON/log evidence and the program's checklist."""
