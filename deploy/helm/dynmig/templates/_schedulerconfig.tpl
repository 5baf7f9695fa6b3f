{{- /* kube-scheduler's configuration: deploy/scheduler/kube-scheduler-config.yaml
(mode extender) or schedplugin/deploy/kube-scheduler-config.yaml (mode
plugin), whose comments say why each field is set; charttest checks that they
agree. */}}
{{- define "dynmig.schedulerConfig" -}}
{{- $sched := .Values.scheduler -}}
apiVersion: kubescheduler.config.k8s.io/v1
kind: KubeSchedulerConfiguration
clientConnection:
  kubeconfig: ""
leaderElection:
  leaderElect: {{ $sched.leaderElection.enabled }}
  resourceLock: leases
  resourceName: {{ $sched.name }}
  resourceNamespace: {{ .Release.Namespace }}
  leaseDuration: {{ $sched.leaderElection.leaseDuration }}
  renewDeadline: {{ $sched.leaderElection.renewDeadline }}
  retryPeriod: {{ $sched.leaderElection.retryPeriod }}
profiles:
- schedulerName: {{ $sched.name }}
{{- if eq $sched.mode "plugin" }}
  plugins:
    bind:
      enabled:
      - name: DynMIG
    multiPoint:
      enabled:
      - name: DynMIG
        weight: {{ $sched.plugin.weight }}
  pluginConfig:
  - name: DynMIG
    args:
      resource: {{ .Values.devicePlugin.resource }}
      lockTimeout: {{ $sched.plugin.lockTimeout }}
  - name: NodeResourcesFit
    args:
      ignoredResources:
      - {{ .Values.devicePlugin.resource }}
      - nvidia.com/gpumem
      - nvidia.com/gpumem-percentage
      scoringStrategy:
        type: LeastAllocated
        resources:
        - name: cpu
          weight: 1
        - name: memory
          weight: 1
{{- else }}
extenders:
- urlPrefix: http://127.0.0.1:{{ $sched.extender.port }}
  filterVerb: filter
  prioritizeVerb: prioritize
  bindVerb: bind
  weight: {{ $sched.weight }}
  enableHTTPS: false
  httpTimeout: {{ $sched.httpTimeout }}
  nodeCacheCapable: true
  ignorable: false
  managedResources:
  - name: {{ .Values.devicePlugin.resource }}
    ignoredByScheduler: false
  - name: nvidia.com/gpumem
    ignoredByScheduler: true
  - name: nvidia.com/gpumem-percentage
    ignoredByScheduler: true
{{- end }}
{{- end -}}
