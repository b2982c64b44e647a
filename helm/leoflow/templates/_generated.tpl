{{/*
Values the chart generates once and then keeps: the bundled PostgreSQL's password and the
admin token.

"Kept" means: when the Secret that holds the value already exists in the release namespace
(helm upgrade, or helm install again after an uninstall, which keeps these Secrets through
helm.sh/resource-policy: keep), its stored value is used again; otherwise a fresh random one is
generated (sprig's randAlphaNum reads crypto/rand). `lookup` only sees the cluster during
helm install/upgrade (and --dry-run=server); offline rendering (helm template, helm lint,
Argo CD) gets an empty answer and so a fresh value every time: GitOps tools that render
offline must use existing Secrets instead (see the chart README).
*/}}

{{/* The decoded value of key in Secret secret when it exists and is non-empty, else fresh. */}}
{{- define "leoflow.keptSecretValue" -}}
{{- $existing := lookup "v1" "Secret" .ctx.Release.Namespace .secret }}
{{- $kept := dig "data" .key "" $existing }}
{{- if $kept }}
{{- $kept | b64dec }}
{{- else }}
{{- .fresh }}
{{- end }}
{{- end }}

{{/* Name of the Secret holding the generated admin token. */}}
{{- define "leoflow.generatedTokenSecretName" -}}
{{- printf "%s-admin-token" (include "leoflow.fullname" .) }}
{{- end }}

{{/* The generated token file: one name:scope:token line, an admin token of 40 characters. */}}
{{- define "leoflow.generatedTokens" -}}
{{- include "leoflow.keptSecretValue" (dict "ctx" . "secret" (include "leoflow.generatedTokenSecretName" .) "key" .Values.auth.secretKey "fresh" (printf "admin:admin:%s\n" (randAlphaNum 40))) }}
{{- end }}
