{{/* Generated from the kind registry (src/controller/kinds/registry/mod.rs): the resources of every
managed kind, for the chart's RBAC rules (the operator's and the tenant roles). Regenerate with
UPDATE_GENERATED=1 cargo test -p gpucloud-controller --lib registry; do not edit. */}}
{{- define "gpucloud-operator.kindResources" -}}[firewalls, gpuinstances, images, snapshots, sshkeys, volumes]{{- end -}}
{{- define "gpucloud-operator.policyResources" -}}[budgets, gpuinstancepools]{{- end -}}
{{- define "gpucloud-operator.kindStatusResources" -}}[budgets/status, firewalls/status, gpuinstancepools/status, gpuinstances/status, images/status, snapshots/status, sshkeys/status, volumes/status]{{- end -}}
{{- define "gpucloud-operator.kindCrdNames" -}}[budgets.gpucloud.io, firewalls.gpucloud.io, gpuinstancepools.gpucloud.io, gpuinstances.gpucloud.io, gpuofferings.gpucloud.io, gpupolicies.gpucloud.io, images.gpucloud.io, snapshots.gpucloud.io, sshkeys.gpucloud.io, volumes.gpucloud.io]{{- end -}}
{{- define "gpucloud-operator.clusterPolicyResources" -}}[gpupolicies]{{- end -}}
{{- define "gpucloud-operator.clusterPolicyStatusResources" -}}[gpupolicies/status]{{- end -}}
{{- define "gpucloud-operator.catalogResources" -}}[gpuofferings]{{- end -}}
{{- define "gpucloud-operator.catalogStatusResources" -}}[gpuofferings/status]{{- end -}}
{{- define "gpucloud-operator.tenantResources" -}}[firewalls, gpuinstancepools, gpuinstances, images, snapshots, sshkeys, volumes]{{- end -}}
{{- define "gpucloud-operator.tenantScaleResources" -}}[gpuinstancepools/scale]{{- end -}}
{{- define "gpucloud-operator.guardrailResources" -}}[budgets]{{- end -}}
