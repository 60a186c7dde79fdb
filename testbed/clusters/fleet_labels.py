"""What the Helm chart charts/dra-fake-gpus marks its objects with (its templates/_helpers.tpl and
configmaps.yaml), in a module of their own: the `existing` backend finds an installed fleet by them and
`install` writes them, and `dra-testbed install` must not load the Kubernetes client to parse its arguments."""

FLEET_RELEASE_LABEL = "dra-fake-gpus.io/release"  # on every object of a release, fake nodes included
FLEET_LAYOUT_LABEL = "dra-fake-gpus.io/layout"  # on the ConfigMap that holds a release's layout
FLEET_LAYOUT_KEY = "layout.yaml"  # that ConfigMap's key of the layout file's text
