# file: schedplugin/preempt.go
# guard: AddPod gives a nominated preemptor the placements preemption freed for it
# test: schedplugin ^TestPreemption
s/^\tif rs := p\.intended(o, pod, ni); len(rs) > 0 {$/\tif rs := p.intended(o, pod, ni); false \&\& len(rs) > 0 {/
