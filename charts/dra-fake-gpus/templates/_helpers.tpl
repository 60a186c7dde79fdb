{{/* The label that ties every object to this release's fleet; the KWOK controller manages nodes carrying it. */}}
{{- define "fake-gpus.fleetLabel" -}}dra-fake-gpus.io/release{{- end }}
{{/* The dra-testbed.io/driver value of this release's nodes: its publisher serves those, a bed's publisher none. */}}
{{- define "fake-gpus.serves" -}}chart-{{ .Release.Name }}{{- end }}
{{- define "fake-gpus.labels" -}}
app.kubernetes.io/name: dra-fake-gpus
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
helm.sh/chart: {{ .Chart.Name }}-{{ .Chart.Version }}
{{ include "fake-gpus.fleetLabel" . }}: {{ .Release.Name }}
{{- end }}
{{- define "fake-gpus.publisherAccount" -}}{{ .Release.Name }}-publisher{{- end }}
{{/* The identity of the fake nodes' drivers: the publisher writes each node's slices with this account's token bound to that Node. */}}
{{- define "fake-gpus.nodeAccount" -}}{{ .Release.Name }}-node-driver{{- end }}
{{- define "fake-gpus.kwokAccount" -}}{{ .Release.Name }}-kwok{{- end }}
