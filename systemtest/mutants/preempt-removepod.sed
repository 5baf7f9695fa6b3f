# file: schedplugin/preempt.go
# guard: RemovePod frees a victim's recorded slots in the dry run's occupancy
# test: schedplugin ^TestPreemption
/^\t\to\.removed\[uid\] = pod$/{n;s/^\t\to\.apply(rs, false)$/\t\t_ = rs/}
