{{/* The prefix of every object's name. */}}
{{- define "dynmig.name" -}}
{{- .Release.Name | trunc 40 | trimSuffix "-" -}}
{{- end -}}

{{/* The labels of every object: dynmig.labels is the chart's own objects'
(app.kubernetes.io/name dynmig), dynmig.componentLabels (list $ "name")
a component's, whose name its selectors use. */}}
{{- define "dynmig.labels" -}}
{{- include "dynmig.componentLabels" (list . "dynmig") -}}
{{- end -}}

{{- define "dynmig.componentLabels" -}}
{{- $root := index . 0 -}}
app.kubernetes.io/name: {{ index . 1 }}
app.kubernetes.io/version: {{ $root.Chart.AppVersion | quote }}
app.kubernetes.io/part-of: dynmig
app.kubernetes.io/instance: {{ $root.Release.Name }}
app.kubernetes.io/managed-by: {{ $root.Release.Service }}
helm.sh/chart: {{ printf "%s-%s" $root.Chart.Name $root.Chart.Version | replace "+" "_" }}
{{- end -}}

{{/* An image of ours: dynmig.image (list $ "component-repo"). */}}
{{- define "dynmig.image" -}}
{{- $root := index . 0 -}}
{{- $repo := index . 1 -}}
{{- $tag := $root.Values.images.tag | default $root.Chart.AppVersion -}}
{{- if not $root.Values.images.registry -}}
{{- fail (printf "images.registry is not set: dynmig publishes no images, so %s:%s exists in no registry. Build and push them with hack/build-images.sh (REGISTRY=<prefix> PUSH=1), then set images.registry=<prefix> (and images.tag to the tag it printed)" $repo $tag) -}}
{{- end -}}
{{- printf "%s/%s:%s" $root.Values.images.registry $repo $tag -}}
{{- end -}}

{{/* dynmig.seconds "1m30s" is a duration value (values.schema.json's
pattern: a Go duration with units) in seconds, as a float. */}}
{{- define "dynmig.seconds" -}}
{{- $units := dict "ns" 1e-9 "us" 1e-6 "µs" 1e-6 "ms" 0.001 "s" 1.0 "m" 60.0 "h" 3600.0 -}}
{{- $total := 0.0 -}}
{{- range regexFindAll "[0-9]+(\\.[0-9]+)?(ns|us|µs|ms|s|m|h)" (toString .) -1 -}}
{{- $num := regexFind "^[0-9]+(\\.[0-9]+)?" . -}}
{{- $total = addf $total (mulf (float64 $num) (get $units (trimPrefix $num .))) -}}
{{- end -}}
{{- $total -}}
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

