{{- define "sextant.fullname" -}}
{{- if contains .Chart.Name .Release.Name -}}
{{- .Release.Name | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-%s" .Release.Name .Chart.Name | trunc 63 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}

{{- define "sextant.labels" -}}
app.kubernetes.io/name: sextant
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version }}
{{- end -}}

{{- define "sextant.operatorSelector" -}}
app.kubernetes.io/name: sextant
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/component: operator
{{- end -}}

{{- define "sextant.serviceAccountName" -}}
{{- if .Values.serviceAccount.create -}}
{{- default (include "sextant.fullname" .) .Values.serviceAccount.name -}}
{{- else -}}
{{- if or (not .Values.serviceAccount.name) (eq .Values.serviceAccount.name "default") -}}
{{- fail "serviceAccount.create=false needs serviceAccount.name (not \"default\"): the operator's ClusterRole must not go to the namespace's default ServiceAccount" -}}
{{- end -}}
{{- .Values.serviceAccount.name -}}
{{- end -}}
{{- end -}}

{{- define "sextant.image" -}}
{{- printf "%s:%s" .Values.image.repository (default .Chart.AppVersion .Values.image.tag) -}}
{{- end -}}

{{- /* Never empty: an empty namespaceSelector would admit every namespace. */ -}}
{{- define "sextant.metricsNamespaceSelector" -}}
{{- $default := dict "matchLabels" (dict "kubernetes.io/metadata.name" "monitoring") -}}
{{- toYaml (default $default .Values.networkPolicy.metricsNamespaceSelector) -}}
{{- end -}}
