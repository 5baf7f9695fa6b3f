package realize_test

import (
	"testing"
	"time"

	"pgregory.net/rapid"

	"github.com/dynmig/dynmig/realize"
	"github.com/dynmig/dynmig/reservation"
	"github.com/dynmig/dynmig/reservation/reservationtest"
)

// TestPodDemandIsTheAnnotationProtocol checks on random node listings
// (forged, malformed, legacy, conflicting, duplicated and released pods)
// that the annotation protocol's desired set is the same whether the
// manager builds it from the snapshot or from PodDemand's neutral demand:
// the snapshot methods and the Demand methods act alike.
func TestPodDemandIsTheAnnotationProtocol(t *testing.T) {
	gpus := []string{"GPU-a", "GPU-b"}
	records := reservationtest.RecordGenOn(gpus, 3)
	mutants := reservationtest.MutantGenOn(gpus)
	phases := []reservation.PodPhase{reservation.PodPending, reservation.PodRunning, reservation.PodSucceeded, reservation.PodFailed}
	now := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	rapid.Check(t, func(t *rapid.T) {
		snap := reservation.Snapshot{Complete: rapid.Float64Range(0, 1).Draw(t, "complete") < 0.8}
		if rapid.Bool().Draw(t, "clock") {
			snap.Now = now
		}
		for range rapid.IntRange(0, 5).Draw(t, "pods") {
			uid := rapid.SampledFrom([]string{"p0", "p1", "p2", "p3", ""}).Draw(t, "uid")
			p := reservation.Pod{UID: uid, Namespace: "ns", Name: "n" + uid, Phase: rapid.SampledFrom(phases).Draw(t, "phase"),
				Deleting: rapid.Float64Range(0, 1).Draw(t, "deleting") < 0.2}
			if p.Deleting {
				p.ContainersTerminated = rapid.Bool().Draw(t, "terminated")
				p.DeletionDeadline = now.Add(time.Duration(rapid.IntRange(-1, 1).Draw(t, "deadline")) * time.Second)
			}
			switch rapid.IntRange(0, 5).Draw(t, "record kind") {
			case 0:
				m := mutants.Draw(t, "mutant")
				p.Annotations = map[string]string{reservation.AnnotationKey: m.Value}
				p.DeviceRequests = m.DeviceRequests
			case 1: // a v2.9 identifier next to a valid record
				r := records.Draw(t, "record")
				p.Annotations = map[string]string{reservation.AnnotationKey: r.Value(),
					reservation.LegacyDevicesAnnotationKey: "GPU-a[1-0],NVIDIA,4864,14:;"}
				p.DeviceRequests = r.DeviceRequests
			default:
				r := records.Draw(t, "record")
				p.Annotations = map[string]string{reservation.AnnotationKey: r.Value()}
				p.DeviceRequests = r.DeviceRequests
			}
			if rapid.Float64Range(0, 1).Draw(t, "forged") < 0.3 {
				p.DeviceRequests = rapid.SliceOfN(rapid.IntRange(0, 2), 0, 2).Draw(t, "requests")
			}
			// First observations and bindings, as a node pod source
			// records them: resolved conflicts must map to the same
			// withheld entries.
			if n := rapid.IntRange(-1, 2).Draw(t, "seen"); n >= 0 {
				p.RecordSeen = now.Add(time.Duration(n) * time.Second)
			}
			p.RecordScheduled = rapid.Bool().Draw(t, "scheduled")
			snap.Pods = append(snap.Pods, p)
		}
		if diff := realize.DesiredDiff(snap); diff != "" {
			t.Fatalf("desired set via the snapshot and via PodDemand differ: %s", diff)
		}
	})
}
