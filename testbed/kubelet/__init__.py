"""A stand-in for the kubelet's DRA side on KWOK nodes: plugin registration and NodePrepare/Unprepare."""

# The stand-in's mark on a pod whose claims it prepared: KWOK's stages (testbed/clusters/kwok/stages.py) run the
# pod only once it is there. Here, not in daemon.py, so the stages name it without loading the stand-in.
PREPARED_ANNOTATION = "dra-testbed.io/claims-prepared"
