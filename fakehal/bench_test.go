package fakehal_test

import (
	"sync"
	"testing"
	"time"

	"github.com/dynmig/dynmig/fakehal"
)

// BenchmarkCreateDestroy measures one CreateInstance plus its destroys with
// no injected latency: the fake's own overhead.
func BenchmarkCreateDestroy(b *testing.B) {
	n := fakehal.MustNew(fakehal.Options{})
	b.ReportAllocs()
	for b.Loop() {
		inst, err := n.CreateInstance(ctx, 0, p3g, pl(4, 4))
		if err != nil {
			b.Fatal(err)
		}
		if err := n.DestroyComputeInstance(ctx, 0, inst.GIID, 0); err != nil {
			b.Fatal(err)
		}
		if err := n.DestroyGPUInstance(ctx, 0, inst.GIID); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkCreateLatency shows that injected GI-create latency is per call:
// creating on 8 GPUs in parallel ("8GPUs") costs about one create ("1GPU"),
// not eight, because the node does not hold its lock while sleeping.
func BenchmarkCreateLatency(b *testing.B) {
	const latency = 100 * time.Millisecond
	for _, gpus := range []int{1, 8} {
		b.Run(map[int]string{1: "1GPU", 8: "8GPUs"}[gpus], func(b *testing.B) {
			n := fakehal.MustNew(fakehal.Options{GPUs: fakehal.Repeat(gpus, "A100")})
			n.AddLatency(fakehal.OpCreateGI, latency)
			for b.Loop() {
				var wg sync.WaitGroup
				for gpu := range gpus {
					wg.Go(func() {
						inst, err := n.CreateInstance(ctx, gpu, p7g, pl(0, 8))
						if err != nil {
							b.Error(err)
							return
						}
						_ = n.DestroyComputeInstance(ctx, gpu, inst.GIID, 0)
						_ = n.DestroyGPUInstance(ctx, gpu, inst.GIID)
					})
				}
				wg.Wait()
			}
		})
	}
}
