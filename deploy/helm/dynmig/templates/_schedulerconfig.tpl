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
{{- end -}}
