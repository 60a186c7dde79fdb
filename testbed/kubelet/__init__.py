"""A stand-in for the kubelet's DRA side on KWOK nodes: plugin registration and NodePrepare/Unprepare."""
