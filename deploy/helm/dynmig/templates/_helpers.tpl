{{/* The prefix of every object's name. */}}
{{- define "dynmig.name" -}}
{{- .Release.Name | trunc 40 | trimSuffix "-" -}}
{{- end -}}

{{- define "dynmig.labels" -}}
app.kubernetes.io/part-of: dynmig
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" }}
{{- end -}}

{{/* An image of ours: dynmig.image (list $ "component-repo"). */}}
{{- define "dynmig.image" -}}
{{- $root := index . 0 -}}
{{- $repo := index . 1 -}}
{{- $tag := $root.Values.images.tag | default $root.Chart.AppVersion -}}
{{- if $root.Values.images.registry -}}
{{- printf "%s/%s:%s" $root.Values.images.registry $repo $tag -}}
{{- else -}}
{{- printf "%s:%s" $repo $tag -}}
{{- end -}}
{{- end -}}

{{/* kube-scheduler's image: the set tag, else the cluster's version
without distribution suffixes (v1.34.1-eks-1 -> v1.34.1). */}}
{{- define "dynmig.kubeSchedulerImage" -}}
{{- $tag := .Values.scheduler.kubeScheduler.tag -}}
{{- if not $tag -}}
{{- $tag = regexFind "^v[0-9]+\\.[0-9]+\\.[0-9]+" .Capabilities.KubeVersion.Version -}}
{{- end -}}
{{- printf "%s:%s" .Values.scheduler.kubeScheduler.image $tag -}}
{{- end -}}

{{- define "dynmig.deviceConfigName" -}}
{{- .Values.deviceConfig.name | default (printf "%s-device-config" (include "dynmig.name" .)) -}}
{{- end -}}

{{/* Where the node components mount the device config directory (a
directory mount, so that ConfigMap updates reach the file). */}}
{{- define "dynmig.deviceConfigDir" -}}/etc/dynmig/device-config{{- end -}}

{{- define "dynmig.logArgs" -}}
- -log-format={{ .Values.logging.format }}
- -v={{ .Values.logging.verbosity }}
{{- end -}}

{{/* The ServiceAccount user name of a component: dynmig.user (list $ "sa"). */}}
{{- define "dynmig.user" -}}
{{- $root := index . 0 -}}
{{- printf "system:serviceaccount:%s:%s-%s" $root.Release.Namespace (include "dynmig.name" $root) (index . 1) -}}
{{- end -}}

{{- define "dynmig.probes" -}}
livenessProbe:
  httpGet: {path: /healthz, port: metrics}
  periodSeconds: 10
  failureThreshold: 3
readinessProbe:
  httpGet: {path: /readyz, port: metrics}
  periodSeconds: 5
{{- end -}}

{{/* A node component's node selector: dynmig.nodeSelector (list $ .nodeSelector)
is nodeLabel: "true" (when nodeLabel is set) with the component's own
nodeSelector over it, as YAML. */}}
{{- define "dynmig.nodeSelector" -}}
{{- $root := index . 0 -}}
{{- $sel := dict -}}
{{- with $root.Values.nodeLabel }}{{ $_ := set $sel . "true" }}{{ end -}}
{{- $sel = merge (deepCopy (index . 1 | default dict)) $sel -}}
{{- toYaml $sel -}}
{{- end -}}

{{/* dynmig.requireAPI (list $ "group/version" "Kind" "minimum Kubernetes" "the values that render it")
fails the render unless the cluster serves the kind: its discovery lists
group/version/Kind, or (helm template without a cluster) it lists
group/version and its version is at least the minimum ("" for an API
that is not Kubernetes', such as a CRD's). */}}
{{- define "dynmig.requireAPI" -}}
{{- $root := index . 0 -}}
{{- $gv := index . 1 -}}
{{- $kind := index . 2 -}}
{{- $since := index . 3 -}}
{{- $caps := $root.Capabilities -}}
{{- $served := $caps.APIVersions.Has (printf "%s/%s" $gv $kind) -}}
{{- if and (not $served) ($caps.APIVersions.Has $gv) -}}
{{- $served = or (not $since) (semverCompare (printf ">=%s-0" $since) $caps.KubeVersion.Version) -}}
{{- end -}}
{{- if not $served -}}
{{- if $since -}}
{{- fail (printf "%s renders %s %s, which needs Kubernetes %s or later; this cluster (%s) does not serve it" (index . 4) $gv $kind $since $caps.KubeVersion.Version) -}}
{{- else -}}
{{- fail (printf "%s renders %s %s, which this cluster does not serve (install its CRD first)" (index . 4) $gv $kind) -}}
{{- end -}}
{{- end -}}
{{- end -}}
