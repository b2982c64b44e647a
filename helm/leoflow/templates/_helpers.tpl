{{/*
Names, labels and the few checks every template relies on.
*/}}

{{- define "leoflow.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/*
Full name: <release>-<chart>, or the release name when it already contains the chart name.
Truncated to 63 characters (DNS label limit).
*/}}
{{- define "leoflow.fullname" -}}
{{- if .Values.fullnameOverride }}
{{- .Values.fullnameOverride | trunc 63 | trimSuffix "-" }}
{{- else }}
{{- $name := default .Chart.Name .Values.nameOverride }}
{{- if contains $name .Release.Name }}
{{- .Release.Name | trunc 63 | trimSuffix "-" }}
{{- else }}
{{- printf "%s-%s" .Release.Name $name | trunc 63 | trimSuffix "-" }}
{{- end }}
{{- end }}
{{- end }}

{{- define "leoflow.chart" -}}
{{- printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/* Selector labels: stable for the life of a release (a Deployment selector is immutable). */}}
{{- define "leoflow.selectorLabels" -}}
app.kubernetes.io/name: {{ include "leoflow.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end }}

{{/* The standard labels on every object the chart renders. */}}
{{- define "leoflow.labels" -}}
helm.sh/chart: {{ include "leoflow.chart" . }}
{{ include "leoflow.selectorLabels" . }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
app.kubernetes.io/part-of: leoflow
{{- end }}

{{- define "leoflow.serviceAccountName" -}}
{{- if .Values.serviceAccount.create }}
{{- default (include "leoflow.fullname" .) .Values.serviceAccount.name }}
{{- else }}
{{- required "serviceAccount.name is required when serviceAccount.create is false" .Values.serviceAccount.name }}
{{- end }}
{{- end }}

{{- define "leoflow.image" -}}
{{- printf "%s:%s" .Values.image.repository (default .Chart.AppVersion .Values.image.tag) }}
{{- end }}

{{/* LEOFLOW_CLUSTER: the election lock's name. */}}
{{- define "leoflow.clusterName" -}}
{{- default .Release.Name .Values.cluster.name }}
{{- end }}

{{/* Namespace task pods run in (and where the executor's Role lives). */}}
{{- define "leoflow.taskNamespace" -}}
{{- default .Release.Namespace .Values.tasks.namespace }}
{{- end }}

{{/*
The Secret holding the database URL (under key database.secretKey): the user's, the one
rendered from database.url, or the bundled PostgreSQL's; fails when there is none.
*/}}
{{- define "leoflow.databaseSecretName" -}}
{{- if include "leoflow.postgresql.enabled" . }}
{{- include "leoflow.postgresql.fullname" . }}
{{- else if .Values.database.existingSecret }}
{{- .Values.database.existingSecret }}
{{- else if .Values.database.url }}
{{- printf "%s-database" (include "leoflow.fullname" .) }}
{{- else }}
{{- fail "\n\nleoflow: postgresql.enabled=false needs an external database: set database.existingSecret (a Secret whose key database.secretKey, default \"uri\", holds postgresql://user:pass@host:5432/db) or database.url. The replicas cannot start without a database." }}
{{- end }}
{{- end }}

{{/*
The Secret holding API tokens, or "" when auth is disabled: the user's, the one rendered from
auth.tokens, or (neither given) the generated admin token's.
*/}}
{{- define "leoflow.authSecretName" -}}
{{- if .Values.auth.enabled }}
{{- if .Values.auth.existingSecret }}
{{- .Values.auth.existingSecret }}
{{- else if .Values.auth.tokens }}
{{- printf "%s-auth" (include "leoflow.fullname" .) }}
{{- else }}
{{- include "leoflow.generatedTokenSecretName" . }}
{{- end }}
{{- end }}
{{- end }}

{{/*
The Secrets no DAG may reference (LEOFLOW_K8S_PROTECTED_SECRETS), comma-separated: the
release's own — the database URL's, the API tokens', the webhook's, the metrics token's — and
tasks.protectedSecrets. Task pods run in the release namespace by default, where a DAG author
could otherwise mount them by name.
*/}}
{{- define "leoflow.protectedSecrets" -}}
{{- $names := list (include "leoflow.databaseSecretName" .) }}
{{- with (include "leoflow.authSecretName" .) }}{{ $names = append $names . }}{{ end }}
{{- with .Values.notify.webhook.existingSecret }}{{ $names = append $names . }}{{ end }}
{{- with .Values.oidc.existingSecret }}{{ $names = append $names . }}{{ end }}
{{- with .Values.metrics.serviceMonitor.tokenSecret }}{{ $names = append $names . }}{{ end }}
{{- range .Values.tasks.protectedSecrets }}{{ $names = append $names . }}{{ end }}
{{- $names | uniq | join "," }}
{{- end }}

{{/* "true" when the chart generates the admin token (auth on, no tokens given), else "". */}}
{{- define "leoflow.generatesToken" -}}
{{- if and .Values.auth.enabled (not .Values.auth.existingSecret) (not .Values.auth.tokens) }}true{{ end }}
{{- end }}

{{/* Name of the ConfigMap the chart renders from dags.inline. */}}
{{- define "leoflow.inlineDagsName" -}}
{{- printf "%s-dags" (include "leoflow.fullname" .) }}
{{- end }}

{{/*
Every ConfigMap of DAG files the replicas mount, in order (dags.configMaps, then the inline
one), as a YAML list; each is mounted at /etc/leoflow/dags/<name>/.
*/}}
{{- define "leoflow.dagConfigMaps" -}}
{{- $names := .Values.dags.configMaps }}
{{- if .Values.dags.inline }}
{{- $names = append $names (include "leoflow.inlineDagsName" .) }}
{{- end }}
{{- toYaml $names }}
{{- end }}

{{/* Checks of relations between values that the JSON schema cannot express. */}}
{{- define "leoflow.validate" -}}
{{- $_ := include "leoflow.databaseSecretName" . }}
{{- $_ = include "leoflow.authSecretName" . }}
{{- $chartEnv := list }}
{{- range (include "leoflow.serverEnv" . | fromYamlArray) }}
{{- $chartEnv = append $chartEnv .name }}
{{- end }}
{{- range .Values.extraEnv }}
{{- if has .name $chartEnv }}
{{- fail (printf "\n\nleoflow: extraEnv sets %s, which the chart already sets from its own values; change that value instead (see values.yaml)." .name) }}
{{- end }}
{{- end }}
{{- if and .Values.auth.metricsAuth .Values.metrics.serviceMonitor.enabled (not .Values.metrics.serviceMonitor.tokenSecret) }}
{{- fail "\n\nleoflow: auth.metricsAuth=true protects /metrics; set metrics.serviceMonitor.tokenSecret (a Secret with a read token) so Prometheus can scrape it." }}
{{- end }}
{{- if has (include "leoflow.inlineDagsName" .) .Values.dags.configMaps }}
{{- fail (printf "\n\nleoflow: dags.configMaps lists %s, the ConfigMap the chart renders from dags.inline; rename yours or move its files into dags.inline." (include "leoflow.inlineDagsName" .)) }}
{{- end }}
{{- $inlineBytes := 0 }}
{{- range $file, $text := .Values.dags.inline }}
{{- $inlineBytes = add $inlineBytes (len $file) (len $text) }}
{{- end }}
{{- if gt (int $inlineBytes) 1000000 }}
{{- fail (printf "\n\nleoflow: dags.inline holds %d bytes, more than the 1000000 a ConfigMap can take (1 MiB with its metadata). Put the files into ConfigMaps of your own and list them in dags.configMaps." (int $inlineBytes)) }}
{{- end }}
{{- $needed := add .Values.preStopSleepSeconds .Values.config.shutdownGrace }}
{{- if le (int .Values.terminationGracePeriodSeconds) (int $needed) }}
{{- fail (printf "\n\nleoflow: terminationGracePeriodSeconds (%v) must exceed preStopSleepSeconds + config.shutdownGrace (%v), or a stopping leader is killed before it hands over." .Values.terminationGracePeriodSeconds $needed) }}
{{- end }}
{{- if gt (mulf .Values.config.keepaliveInterval 2.0) (float64 .Values.config.leaderLease) }}
{{- fail (printf "\n\nleoflow: config.leaderLease (%v) must be at least twice config.keepaliveInterval (%v)." .Values.config.leaderLease .Values.config.keepaliveInterval) }}
{{- end }}
{{- end }}

{{/*
Environment shared by the replicas and the migration init container: identity, database and
logging. Only variables declared in leoflow.settings.VARIABLES (a test checks it; the few whose
code lands later are listed in that test as pending).
*/}}
{{- define "leoflow.baseEnv" -}}
- name: LEOFLOW_NODE_ID
  valueFrom:
    fieldRef:
      fieldPath: metadata.name
- name: LEOFLOW_CLUSTER
  value: {{ include "leoflow.clusterName" . | quote }}
- name: LEOFLOW_DATABASE_URL
  valueFrom:
    secretKeyRef:
      name: {{ include "leoflow.databaseSecretName" . }}
      key: {{ .Values.database.secretKey }}
- name: LEOFLOW_DB_POOL_SIZE
  value: {{ .Values.database.poolSize | int | quote }}
- name: LEOFLOW_DB_STATEMENT_TIMEOUT
  value: {{ .Values.database.statementTimeout | quote }}
- name: LEOFLOW_LOG_LEVEL
  value: {{ .Values.config.logLevel | quote }}
- name: LEOFLOW_LOG_FORMAT
  value: {{ .Values.config.logFormat | quote }}
- name: LEOFLOW_HOME
  value: /var/lib/leoflow
{{- end }}

{{/* Environment of the leoflow container (extraEnv is appended after it). */}}
{{- define "leoflow.serverEnv" -}}
{{ include "leoflow.baseEnv" . }}
# Only used to build LEOFLOW_API_URL below: pod names do not resolve in DNS.
- name: POD_IP
  valueFrom:
    fieldRef:
      fieldPath: status.podIP
- name: LEOFLOW_API_URL
  value: "http://$(POD_IP):{{ .Values.containerPort }}"
- name: LEOFLOW_HOST
  value: "0.0.0.0"
- name: LEOFLOW_PORT
  value: {{ .Values.containerPort | quote }}
- name: LEOFLOW_EXECUTOR
  value: kubernetes
- name: LEOFLOW_K8S_NAMESPACE
  {{- if .Values.tasks.namespace }}
  value: {{ .Values.tasks.namespace | quote }}
  {{- else }}
  valueFrom:
    fieldRef:
      fieldPath: metadata.namespace
  {{- end }}
{{- with .Values.tasks.serviceAccount }}
- name: LEOFLOW_K8S_SERVICE_ACCOUNT
  value: {{ . | quote }}
{{- end }}
{{- with .Values.tasks.imagePullSecrets }}
- name: LEOFLOW_K8S_IMAGE_PULL_SECRETS
  value: {{ join "," . | quote }}
{{- end }}
- name: LEOFLOW_K8S_PENDING_TIMEOUT
  value: {{ .Values.tasks.pendingTimeout | quote }}
- name: LEOFLOW_K8S_POD_RETENTION
  value: {{ .Values.tasks.podRetention | quote }}
{{- with .Values.tasks.podTemplate }}
- name: LEOFLOW_K8S_POD_TEMPLATE
  value: {{ toJson . | quote }}
{{- end }}
{{- with .Values.tasks.podPolicy }}
- name: LEOFLOW_K8S_POD_POLICY
  value: {{ join "," . | quote }}
{{- end }}
{{- with .Values.tasks.allowedServiceAccounts }}
- name: LEOFLOW_K8S_ALLOWED_SERVICE_ACCOUNTS
  value: {{ join "," . | quote }}
{{- end }}
- name: LEOFLOW_K8S_PROTECTED_SECRETS
  value: {{ include "leoflow.protectedSecrets" . | quote }}
- name: LEOFLOW_SHUTDOWN_GRACE
  value: {{ .Values.config.shutdownGrace | quote }}
- name: LEOFLOW_LEADER_LEASE
  value: {{ .Values.config.leaderLease | quote }}
- name: LEOFLOW_KEEPALIVE_INTERVAL
  value: {{ .Values.config.keepaliveInterval | quote }}
- name: LEOFLOW_PARALLELISM
  value: {{ .Values.config.parallelism | int | quote }}
{{- if (include "leoflow.authSecretName" .) }}
- name: LEOFLOW_AUTH
  value: enabled
- name: LEOFLOW_API_TOKENS_FILE
  value: /etc/leoflow/auth/{{ .Values.auth.secretKey }}
{{- else }}
- name: LEOFLOW_AUTH
  value: disabled
{{- end }}
- name: LEOFLOW_METRICS_AUTH
  value: {{ .Values.auth.metricsAuth | quote }}
{{- if .Values.teams }}
- name: LEOFLOW_TEAMS_FILE
  value: /etc/leoflow/teams/teams.yaml
{{- end }}
- name: LEOFLOW_RETENTION_DAYS
  value: {{ .Values.retention.days | int | quote }}
- name: LEOFLOW_AUDIT_RETENTION_DAYS
  value: {{ .Values.retention.auditDays | int | quote }}
{{- if (include "leoflow.dagConfigMaps" . | fromYamlArray) }}
- name: LEOFLOW_DAGS_DIR
  value: /etc/leoflow/dags
- name: LEOFLOW_DAGS_SOURCE
  value: {{ default .Release.Name .Values.dags.source | quote }}
{{- end }}
{{- if .Values.notify.webhook.existingSecret }}
- name: LEOFLOW_NOTIFY_WEBHOOK
  valueFrom:
    secretKeyRef:
      name: {{ .Values.notify.webhook.existingSecret }}
      key: {{ .Values.notify.webhook.secretKey }}
{{- else if .Values.notify.webhook.url }}
- name: LEOFLOW_NOTIFY_WEBHOOK
  value: {{ .Values.notify.webhook.url | quote }}
{{- end }}
{{- if .Values.oidc.issuer }}
{{- if not (or .Values.oidc.clientId .Values.oidc.audiences) }}
{{- fail "\n\nleoflow: oidc.issuer needs oidc.clientId (or oidc.audiences): the audience tokens must carry." }}
{{- end }}
- name: LEOFLOW_OIDC_ISSUER
  value: {{ .Values.oidc.issuer | quote }}
{{- with .Values.oidc.clientId }}
- name: LEOFLOW_OIDC_CLIENT_ID
  value: {{ . | quote }}
{{- end }}
{{- with .Values.oidc.audiences }}
- name: LEOFLOW_OIDC_AUDIENCE
  value: {{ join "," . | quote }}
{{- end }}
{{- with .Values.oidc.adminGroups }}
- name: LEOFLOW_OIDC_ADMIN_GROUPS
  value: {{ join "," . | quote }}
{{- end }}
- name: LEOFLOW_OIDC_GROUPS_CLAIM
  value: {{ .Values.oidc.groupsClaim | quote }}
{{- with .Values.oidc.existingSecret }}
- name: LEOFLOW_OIDC_SESSION_SECRET
  valueFrom:
    secretKeyRef:
      name: {{ . }}
      key: sessionSecret
      optional: true
- name: LEOFLOW_OIDC_CLIENT_SECRET
  valueFrom:
    secretKeyRef:
      name: {{ . }}
      key: clientSecret
      optional: true
{{- end }}
{{- end }}
{{- end }}

{{/* The container security context, shared by the replicas and the init container. */}}
{{- define "leoflow.containerSecurityContext" -}}
{{- toYaml .Values.securityContext }}
{{- end }}

{{/* The ConfigMap holding the teams file (teams). */}}
{{- define "leoflow.teamsConfigMapName" -}}
{{- printf "%s-teams" (include "leoflow.fullname" .) }}
{{- end }}

{{/*
The teams file (docs/access-control.md) from the teams values: camelCase keys become the file's
(dagIdPrefixes → dag_id_prefixes, serviceAccount → service_account, podTemplate → pod_template),
groups (group → role) become rules, and teamAdminGroups becomes admin_groups.
*/}}
{{- define "leoflow.teamsFile" -}}
{{- $teams := list }}
{{- range .Values.teams }}
{{- $team := . }}
{{- $entry := dict "name" $team.name }}
{{- with $team.dagIdPrefixes }}{{ $_ := set $entry "dag_id_prefixes" . }}{{ end }}
{{- with $team.namespace }}{{ $_ := set $entry "namespace" . }}{{ end }}
{{- with $team.serviceAccount }}{{ $_ := set $entry "service_account" . }}{{ end }}
{{- with $team.podTemplate }}{{ $_ := set $entry "pod_template" . }}{{ end }}
{{- $rules := list }}
{{- range $group, $role := $team.groups }}
{{- $rules = append $rules (dict "group" $group "role" $role) }}
{{- end }}
{{- if $rules }}{{ $_ := set $entry "rules" $rules }}{{ end }}
{{- $teams = append $teams $entry }}
{{- end }}
{{- $file := dict "teams" $teams }}
{{- with .Values.teamAdminGroups }}{{ $_ := set $file "admin_groups" . }}{{ end }}
{{- toYaml $file }}
{{- end }}
