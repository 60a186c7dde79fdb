"""`dra-testbed install` / `uninstall`: the fake fleet of a layout in a cluster someone else runs, through the
Helm chart in charts/dra-fake-gpus (values from the layout, collisions refused, helm install / uninstall)."""
