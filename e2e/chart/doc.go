// Package chart installs dynmig from the Helm chart's rendered output
// (deploy/helm/charttest/testdata/rendered.yaml, the chart with default
// values as helm template prints it, and rendered-plugin.yaml, with
// scheduler.mode plugin) into a real control plane: the
// chart's namespace-scoped and cluster-scoped objects are applied as they
// are, and the components run in the test process with the identities,
// flags, scheduler configuration and device config the chart's
// Deployment, DaemonSet and ConfigMaps give them. It schedules and
// realizes a MIG pod in each scheduler mode (kube-scheduler with the
// extender sidecar; kube-scheduler with the DynMIG plugin registered as
// schedplugin/cmd/kube-scheduler does), then scrapes the extender's and
// the device plugin's /metrics (the pod's hami_node_gpu_mig_instance_info series) and checks
// their probes; under the chart's cdi-cri strategy it checks the CDI names
// and specs the pod gets and, once the pod is deleted, that its
// instance's spec is removed. It checks that the chart's env policy
// (dynmig-no-device-env) refuses pods that choose GPUs through the NVIDIA
// container toolkit's variables. It also applies the chart's MutatingAdmissionPolicy
// (deploy/helm/charttest/testdata/admission-policy.yaml) and checks which
// pods it routes to the dynmig scheduler, and the chart's sealing policy
// for the allocation record (deploy/helm/charttest/testdata/record-policy.yaml):
// who may create, bind with, and change the record. The package has test
// files only.
package chart
