{{/* The prefix of every object's name: gpupool unless overridden. */}}
{{- define "gpupool.fullname" -}}
{{- default "gpupool" .Values.fullnameOverride | trunc 50 | trimSuffix "-" -}}
{{- end -}}

{{- define "gpupool.labels" -}}
app.kubernetes.io/name: gpupool
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version }}
{{- end -}}

{{- define "gpupool.selectorLabels" -}}
control-plane: controller-manager
{{- end -}}

{{- define "gpupool.serviceAccountName" -}}
{{ include "gpupool.fullname" . }}-controller-manager
{{- end -}}

{{- define "gpupool.image" -}}
{{ .Values.image.repository }}:{{ default .Chart.AppVersion .Values.image.tag }}
{{- end -}}

{{- define "gpupool.certSecret" -}}
{{ include "gpupool.fullname" . }}-webhook-server-cert
{{- end -}}
