package lifecycle_test

import (
	"sync/atomic"

	corev1 "k8s.io/api/core/v1"

	"github.com/dynmig/dynmig/e2e/internal/cluster"
	"github.com/dynmig/dynmig/extender"
	"github.com/dynmig/dynmig/kube"
	"github.com/dynmig/dynmig/placement"
	"github.com/dynmig/dynmig/schedplugin"
)

// scheduling is one of the two ways dynmig schedules MIG pods, each run
// from its shipped configuration under the deployed scheduler
// ServiceAccount: the upstream kube-scheduler with the extender, or
// kube-scheduler built with the DynMIG framework plugin.
type scheduling interface {
	// configFile is the shipped KubeSchedulerConfiguration.
	configFile() string
	// start starts the scheduler (again, after stop) on e's cluster.
	start(e *env)
	stop()
	// ledger is the running scheduler's placement ledger.
	ledger() *placement.Ledger
	// refusal is the reason dynmig's part of the scheduler gives for not
	// placing pod on node, which the pod's PodScheduled condition carries.
	refusal(e *env, pod *corev1.Pod, node string) string
}

// schedulings are the schedulers TestLifecycle runs against, by subtest
// name.
var schedulings = []struct {
	name string
	new  func() scheduling
}{
	{"extender", func() scheduling { return &extenderScheduling{} }},
	{"plugin", func() scheduling { return &pluginScheduling{} }},
}

// extenderScheduling is the upstream kube-scheduler with
// deploy/scheduler/kube-scheduler-config.yaml and the extender it names.
type extenderScheduling struct {
	ext   *cluster.Extender
	sched *cluster.Scheduler
}

func (*extenderScheduling) configFile() string { return cluster.SchedulerConfigPath() }

func (s *extenderScheduling) start(e *env) {
	e.t.Helper()
	addr, err := cluster.ExtenderAddr(s.configFile())
	if err != nil {
		e.t.Fatal(err)
	}
	if s.ext, err = cluster.StartExtender(e.ctx, e.t, clientFor(e.t, e.schedulerCfg), addr, extender.Options{Logger: logger("extender")}); err != nil {
		e.t.Fatal(err)
	}
	if s.sched, err = e.c.StartScheduler(e.t, cluster.SchedulerOptions{ConfigFile: s.configFile(), Client: e.schedulerCfg}); err != nil {
		e.t.Fatal(err)
	}
}

func (s *extenderScheduling) stop() {
	s.sched.Stop()
	s.ext.Stop()
}

func (s *extenderScheduling) ledger() *placement.Ledger { return s.ext.Ledger() }

func (s *extenderScheduling) refusal(e *env, pod *corev1.Pod, node string) string {
	res := s.ext.Filter(e.ctx, extender.Args{Pod: pod, NodeNames: &[]string{node}})
	if reason := res.FailedNodes[node]; reason != "" {
		return reason
	}
	return res.FailedAndUnresolvableNodes[node]
}

// pluginScheduling is kube-scheduler with DynMIG registered and
// schedplugin/deploy/kube-scheduler-config.yaml.
type pluginScheduling struct {
	plugin atomic.Pointer[schedplugin.Plugin]
	sched  *cluster.Scheduler
}

func (*pluginScheduling) configFile() string { return cluster.PluginSchedulerConfigPath() }

func (s *pluginScheduling) start(e *env) {
	e.t.Helper()
	s.plugin.Store(nil)
	var err error
	s.sched, err = e.c.StartSchedulerWith(e.t, cluster.SchedulerOptions{ConfigFile: s.configFile(), Client: e.schedulerCfg},
		cluster.WithDynMIG(schedplugin.Options{Logger: logger("schedplugin")}, s.plugin.Store))
	if err != nil {
		e.t.Fatal(err)
	}
	if s.plugin.Load() == nil {
		e.t.Fatal("the scheduler's profile does not enable DynMIG")
	}
}

func (s *pluginScheduling) stop() { s.sched.Stop() }

func (s *pluginScheduling) ledger() *placement.Ledger { return s.plugin.Load().View().Ledger() }

// refusal is the ledger's reason: DynMIG's Filter passes the node's
// device count and lock (no pod waits to be realized) and refuses with
// the error of placement.Ledger.Evaluate.
func (s *pluginScheduling) refusal(e *env, pod *corev1.Pod, node string) string {
	req, err := kube.ParseRequestFor(pod, kube.ResourceGPU)
	if err != nil {
		e.t.Fatalf("pod %s: %v", pod.Name, err)
	}
	if _, err := s.ledger().Evaluate(node, &req); err != nil {
		return err.Error()
	}
	return ""
}
