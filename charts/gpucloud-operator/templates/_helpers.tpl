{{/* The release's objects are named after the release, with the chart name added unless the release name contains it. */}}
{{- define "gpucloud-operator.fullname" -}}
{{- if contains .Chart.Name .Release.Name -}}
{{- .Release.Name | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-%s" .Release.Name .Chart.Name | trunc 63 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}

{{- define "gpucloud-operator.selectorLabels" -}}
app.kubernetes.io/name: {{ .Chart.Name }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end -}}

{{- define "gpucloud-operator.labels" -}}
{{ include "gpucloud-operator.selectorLabels" . }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/component: operator
app.kubernetes.io/part-of: gpucloud-operator
app.kubernetes.io/managed-by: {{ .Release.Service }}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" }}
{{- end -}}

{{- define "gpucloud-operator.serviceAccountName" -}}
{{- if .Values.serviceAccount.create -}}
{{- default (include "gpucloud-operator.fullname" .) .Values.serviceAccount.name -}}
{{- else -}}
{{- required "serviceAccount.name is required when serviceAccount.create is false" .Values.serviceAccount.name -}}
{{- end -}}
{{- end -}}

{{/* The default credentials Secret's name, or nothing when there is none. */}}
{{- define "gpucloud-operator.credentialsSecret" -}}
{{- if and .Values.credentials.apiKey .Values.credentials.existingSecret -}}
{{- fail "set credentials.existingSecret or credentials.apiKey, not both" -}}
{{- else if .Values.credentials.apiKey -}}
{{- printf "%s-credentials" (include "gpucloud-operator.fullname" .) -}}
{{- else -}}
{{- .Values.credentials.existingSecret -}}
{{- end -}}
{{- end -}}

{{/* "true" when leader election is on: asked for, or needed by more than one replica. */}}
{{- define "gpucloud-operator.leaderElect" -}}
{{- if or .Values.leaderElection.enabled (gt (int .Values.replicas) 1) -}}true{{- end -}}
{{- end -}}

{{/*
The permissions on the operator's own kinds and the objects it reads and writes in every
watched namespace; a ClusterRole's rules cluster-wide, a Role's in namespaced mode.
docs/install.md says why each is needed; tests/least_privilege.rs proves each is used.
*/}}
{{- define "gpucloud-operator.namespacedRules" -}}
- apiGroups: [gpucloud.io]
  resources: {{ include "gpucloud-operator.kindResources" . }}
  verbs: [get, list, watch, patch]
- apiGroups: [gpucloud.io]
  resources: {{ include "gpucloud-operator.policyResources" . }}
  verbs: [list, watch]
- apiGroups: [gpucloud.io]
  resources: [gpuinstances]
  verbs: [create, delete]
- apiGroups: [gpucloud.io]
  resources: {{ include "gpucloud-operator.kindStatusResources" . }}
  verbs: [update]
- apiGroups: [""]
  resources: [secrets]
  verbs: [get, list, watch, create, update]
- apiGroups: [""]
  resources: [configmaps]
  verbs: [get, list, watch]
- apiGroups: [events.k8s.io]
  resources: [events]
  verbs: [create, patch]
{{- end -}}

{{/* Start-up check that the CRDs are installed: reading these, nothing else. */}}
{{- define "gpucloud-operator.crdRules" -}}
- apiGroups: [apiextensions.k8s.io]
  resources: [customresourcedefinitions]
  resourceNames: {{ include "gpucloud-operator.kindCrdNames" . }}
  verbs: [get]
{{- end -}}

{{/*
The catalog's kinds (GpuOffering): cluster-scoped, so granted by the ClusterRole in both modes.
The operator lists them, creates and deletes them as the cloud's catalog changes, and replaces
their status; it never reads one by name or watches them.
*/}}
{{- define "gpucloud-operator.catalogRules" -}}
- apiGroups: [gpucloud.io]
  resources: {{ include "gpucloud-operator.catalogResources" . }}
  verbs: [list, create, delete]
- apiGroups: [gpucloud.io]
  resources: {{ include "gpucloud-operator.catalogStatusResources" . }}
  verbs: [update]
{{- end -}}

{{/*
The cluster's GpuPolicies, which govern namespaces by their labels: read before every billed
create, counted (their status holds the reservations of creates under way).
*/}}
{{- define "gpucloud-operator.clusterPolicyRules" -}}
- apiGroups: [gpucloud.io]
  resources: {{ include "gpucloud-operator.clusterPolicyResources" . }}
  verbs: [list, watch]
- apiGroups: [gpucloud.io]
  resources: {{ include "gpucloud-operator.clusterPolicyStatusResources" . }}
  verbs: [update]
- apiGroups: [""]
  resources: [namespaces]
  verbs: [get, list]
{{- end -}}

{{/* Adoption, where allowed: the namespace's label says whether its objects may adopt. */}}
{{- define "gpucloud-operator.adoptionRules" -}}
{{- if .Values.adoption.allowed }}
- apiGroups: [""]
  resources: [namespaces]
  verbs: [get]
{{- end }}
{{- end -}}

{{/*
The operator's image: [registry/]repository, then @digest when one is set (it pins the image,
so the tag is not used), else :tag (the chart's appVersion by default).
*/}}
{{- define "gpucloud-operator.image" -}}
{{- $image := .Values.image -}}
{{- $repository := $image.repository -}}
{{- if $image.registry -}}
{{- $repository = printf "%s/%s" (trimSuffix "/" $image.registry) $repository -}}
{{- end -}}
{{- if $image.digest -}}
{{- printf "%s@%s" $repository $image.digest -}}
{{- else -}}
{{- printf "%s:%s" $repository ($image.tag | default .Chart.AppVersion) -}}
{{- end -}}
{{- end -}}

{{/* The default image.repository: a placeholder, which NOTES.txt warns about. */}}
{{- define "gpucloud-operator.placeholderRepository" -}}ghcr.io/example/gpucloud-operator{{- end -}}

{{/* priorityClassName, else the parent chart's global.priorityClassName. */}}
{{- define "gpucloud-operator.priorityClassName" -}}
{{- .Values.priorityClassName | default (dig "priorityClassName" "" (.Values.global | default dict)) -}}
{{- end -}}
