{{/* The name of every namespaced object and of the cluster-scoped RBAC. */}}
{{- define "wasm-operator.fullname" -}}
{{- if eq .Release.Name "wasm-operator" -}}wasm-operator{{- else -}}{{ printf "%s-wasm-operator" .Release.Name | trunc 63 | trimSuffix "-" }}{{- end -}}
{{- end -}}

{{- define "wasm-operator.labels" -}}
app.kubernetes.io/name: wasm-operator
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
helm.sh/chart: {{ .Chart.Name }}-{{ .Chart.Version }}
{{- end -}}

{{- define "wasm-operator.selector" -}}
app.kubernetes.io/name: wasm-operator
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end -}}

{{- define "wasm-operator.keySecret" -}}
{{- if .key.secretName -}}{{ .key.secretName }}{{- else -}}{{ include "wasm-operator.fullname" .root }}-key-{{ .key.name }}{{- end -}}
{{- end -}}

{{/* The tenants' key Secrets as --tenant-key-secret takes them: NAMESPACE/NAME, comma-separated. */}}
{{- define "wasm-operator.tenantKeySecrets" -}}
{{- $namespace := .Release.Namespace -}}
{{- $items := list -}}
{{- range .Values.tenantPlugins.keySecrets -}}
{{- $items = append $items (printf "%s/%s" $namespace .) -}}
{{- end -}}
{{- join "," $items -}}
{{- end }}
