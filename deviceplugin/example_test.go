package deviceplugin_test

import (
	"context"
	"fmt"
	"os"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1"

	"github.com/dynmig/dynmig/capability"
	"github.com/dynmig/dynmig/deviceplugin"
	"github.com/dynmig/dynmig/fakehal"
	"github.com/dynmig/dynmig/kube"
	"github.com/dynmig/dynmig/kube/kubetest"
	"github.com/dynmig/dynmig/reservation"
)

// The kubelet admits a pod the scheduler reserved 1g.5gb at [0,1) for:
// Allocate creates exactly that instance, hands it to the container and
// records its identity in the pod.
func ExamplePlugin_Allocate() {
	hw := fakehal.MustNew(fakehal.Options{})
	gpu, _ := hw.Device(0)
	pod := boundPod("train", reservation.Allocation{GPUUUID: gpu.UUID, Profile: "1g.5gb", Placement: capability.Placement{Start: 0, Size: 1}})
	client := kubetest.NewClientset(&corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n1"}}, pod)
	dir, err := os.MkdirTemp("", "plugin")
	if err != nil {
		fmt.Println(err)
		return
	}
	defer os.RemoveAll(dir)
	p, err := deviceplugin.New(deviceplugin.Config{Node: "n1", Client: client, Hardware: hw, SocketDir: dir})
	if err != nil {
		fmt.Println(err)
		return
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- p.Run(ctx) }() // Run owns every goroutine it starts
	defer func() { cancel(); <-done }()
	select {
	case <-p.Ready():
	case err := <-done:
		fmt.Println(err)
		return
	}

	conn, err := grpc.NewClient("unix://"+p.SocketPath(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		fmt.Println(err)
		return
	}
	defer conn.Close()
	resp, err := v1beta1.NewDevicePluginClient(conn).Allocate(ctx, &v1beta1.AllocateRequest{
		ContainerRequests: []*v1beta1.ContainerAllocateRequest{{DevicesIds: []string{gpu.UUID + "::0"}}},
	})
	if err != nil {
		fmt.Println(err)
		return
	}
	visible := resp.ContainerResponses[0].Envs[deviceplugin.VisibleDevicesEnv]

	stored, err := client.CoreV1().Pods("default").Get(ctx, "train", metav1.GetOptions{})
	if err != nil {
		fmt.Println(err)
		return
	}
	allocs, err := kube.PodAllocations(stored)
	if err != nil {
		fmt.Println(err)
		return
	}
	id, realized := allocs[0].Runtime()
	fmt.Println("realized:", realized, "same device in the pod and the container:", id.MIGUUID == visible)
	for _, gi := range hw.Snapshot() {
		fmt.Printf("hardware: GPU%d instance at %v with %d compute instance\n", gi.GPU, gi.Placement, len(gi.ComputeInstances))
	}
	// Output:
	// realized: true same device in the pod and the container: true
	// hardware: GPU0 instance at [0,1) with 1 compute instance
}
