{{/*
The bundled evaluation PostgreSQL: whether it is on, its names, labels and its generated Secret.

Its pods carry app.kubernetes.io/name=leoflow-postgresql, never the Leoflow selector labels, so
the Deployment, its Service, PodDisruptionBudget, NetworkPolicy and topology spread never match
a database pod.
*/}}

{{/* "true" when the bundled PostgreSQL is deployed, "" otherwise; fails on contradictory values. */}}
{{- define "leoflow.postgresql.enabled" -}}
{{- $external := or .Values.database.url .Values.database.existingSecret }}
{{- $mode := .Values.postgresql.enabled }}
{{- if eq (toString $mode) "auto" }}
{{- if not $external }}true{{ end }}
{{- else if $mode }}
{{- if $external }}
{{- fail "\n\nleoflow: postgresql.enabled=true deploys the bundled PostgreSQL, but database.url or database.existingSecret points at an external one; unset one of them (postgresql.enabled=auto picks the external database when one is set)." }}
{{- end }}true
{{- end }}
{{- end }}

{{/*
Base name of the PostgreSQL objects. Truncated so that the StatefulSet name stays within 52
characters (its pods' controller-revision-hash label appends about 11) and "-hl" still fits 63.
*/}}
{{- define "leoflow.postgresql.fullname" -}}
{{- printf "%s-postgresql" (include "leoflow.fullname" . | trunc 41 | trimSuffix "-") }}
{{- end }}

{{- define "leoflow.postgresql.selectorLabels" -}}
app.kubernetes.io/name: leoflow-postgresql
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end }}

{{- define "leoflow.postgresql.labels" -}}
helm.sh/chart: {{ include "leoflow.chart" . }}
{{ include "leoflow.postgresql.selectorLabels" . }}
app.kubernetes.io/version: {{ .Values.postgresql.image.tag | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
app.kubernetes.io/part-of: leoflow
app.kubernetes.io/component: database
{{- end }}

{{- define "leoflow.postgresql.image" -}}
{{- printf "%s:%s" .Values.postgresql.image.repository .Values.postgresql.image.tag }}
{{- end }}

{{/* The ClusterIP Service's in-cluster DNS name (the replicas' database host). */}}
{{- define "leoflow.postgresql.host" -}}
{{- printf "%s.%s.svc" (include "leoflow.postgresql.fullname" .) .Release.Namespace }}
{{- end }}

{{/* The bundled PostgreSQL's password: kept across upgrades (see _generated.tpl). */}}
{{- define "leoflow.postgresql.password" -}}
{{- include "leoflow.keptSecretValue" (dict "ctx" . "secret" (include "leoflow.postgresql.fullname" .) "key" "password" "fresh" (randAlphaNum 32)) }}
{{- end }}
