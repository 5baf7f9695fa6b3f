package schedplugin_test

import (
	"context"
	"slices"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/dynamic/dynamicinformer"
	dynamicfake "k8s.io/client-go/dynamic/fake"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes/fake"
	"k8s.io/client-go/tools/events"
	"k8s.io/klog/v2"
	"k8s.io/kubernetes/cmd/kube-scheduler/app/options"
	"k8s.io/kubernetes/pkg/scheduler"
	"k8s.io/kubernetes/pkg/scheduler/apis/config"
	"k8s.io/kubernetes/pkg/scheduler/apis/config/validation"
	frameworkruntime "k8s.io/kubernetes/pkg/scheduler/framework/runtime"
	"k8s.io/kubernetes/pkg/scheduler/profile"

	"github.com/dynmig/dynmig/kube"
	"github.com/dynmig/dynmig/schedplugin"
)

// TestDeployConfig loads deploy/kube-scheduler-config.yaml with
// kube-scheduler's own loader and validation and builds the scheduler from
// it, with DynMIG registered as cmd/kube-scheduler registers it: the
// profile enables DynMIG at every extension point, first among the
// binders, its args decode, and
// NodeResourcesFit ignores the device and memory resources.
func TestDeployConfig(t *testing.T) {
	cfg, err := options.LoadConfigFromFile(klog.Background(), "deploy/kube-scheduler-config.yaml")
	require.NoError(t, err)
	require.NoError(t, validation.ValidateKubeSchedulerConfiguration(cfg))
	require.Len(t, cfg.Profiles, 1)
	prof := cfg.Profiles[0]
	assert.Equal(t, "dynmig-scheduler", prof.SchedulerName)
	for _, pc := range prof.PluginConfig {
		if args, ok := pc.Args.(*config.NodeResourcesFitArgs); ok {
			for _, r := range []string{string(kube.ResourceGPU), string(kube.ResourceGPUMem), string(kube.ResourceGPUMemPercentage)} {
				assert.Contains(t, args.IgnoredResources, r)
			}
		}
	}

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	client := fake.NewClientset()
	factory := informers.NewSharedInformerFactory(client, 0)
	dyn := dynamicinformer.NewDynamicSharedInformerFactory(dynamicfake.NewSimpleDynamicClient(runtime.NewScheme()), 0)
	broadcaster := events.NewBroadcaster(&events.EventSinkImpl{Interface: client.EventsV1()})
	defer broadcaster.Shutdown()
	sched, err := scheduler.New(ctx, client, factory, dyn, profile.NewRecorderFactory(broadcaster),
		scheduler.WithProfiles(cfg.Profiles...),
		scheduler.WithFrameworkOutOfTreeRegistry(frameworkruntime.Registry{schedplugin.Name: schedplugin.Factory(schedplugin.Options{})}))
	require.NoError(t, err)
	fw := sched.Profiles["dynmig-scheduler"]
	require.NotNil(t, fw)
	plugins := fw.ListPlugins()
	for point, set := range map[string]config.PluginSet{"preFilter": plugins.PreFilter, "filter": plugins.Filter,
		"preScore": plugins.PreScore, "score": plugins.Score, "reserve": plugins.Reserve,
		"postFilter": plugins.PostFilter, "postBind": plugins.PostBind} {
		assert.True(t, slices.ContainsFunc(set.Enabled, func(p config.Plugin) bool { return p.Name == schedplugin.Name }),
			"DynMIG not enabled at %s", point)
	}
	require.NotEmpty(t, plugins.Bind.Enabled)
	assert.Equal(t, schedplugin.Name, plugins.Bind.Enabled[0].Name, "DynMIG binds MIG pods before DefaultBinder: %v", plugins.Bind.Enabled)
	for _, fwk := range sched.Profiles {
		_ = fwk.Close()
	}
	cancel()
	factory.Shutdown()
}
