package dradriver_test

import (
	"context"
	"sync"
	"testing"

	resourceapi "k8s.io/api/resource/v1"
)

// Preparing claims while the publication is rebuilt (Rediscover, as
// SetAllowlist and a health change do) shares no memory between the
// claim being prepared and the checkpoint the rebuild reads (issue 35):
// under -race, a checkpoint that shared the prepared claim's devices
// reports the rebuild's read of a device the preparation writes. Every
// claim is prepared, and unprepared, as without the concurrent rebuilds.
func TestPrepareConcurrentWithRediscover(t *testing.T) {
	e := newEnv(t, "NVIDIA A30", "NVIDIA A30")
	d := e.driver(t)
	var claims []*resourceapi.ResourceClaim
	for gpu := range 2 {
		for start := range uint32(4) {
			uid := "uid-" + string(rune('a'+gpu)) + string(rune('0'+start))
			claims = append(claims, claimFor(uid, deviceName(t, e.hw, gpu, "1g.6gb", start, 1)))
		}
	}
	e.claims.set(true, claims...)
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	wg.Go(func() {
		for ctx.Err() == nil {
			if err := d.Rediscover(ctx); err != nil && ctx.Err() == nil {
				t.Errorf("Rediscover: %v", err)
			}
		}
	})
	defer func() {
		cancel()
		wg.Wait()
	}()
	for range 2 {
		for _, c := range claims {
			if r := prepareOne(t, d, c); r.Err != nil {
				t.Fatalf("prepare %s: %v", c.UID, r.Err)
			}
		}
		for _, c := range claims {
			if err := unprepareOne(t, d, c); err != nil {
				t.Fatalf("unprepare %s: %v", c.UID, err)
			}
		}
	}
}
