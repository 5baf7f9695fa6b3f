# file: schedplugin/victims.go
# guard: the preemption dry run pins the cheapest placement to free (without it, upstream's reprieve order picks the victims)
# test: schedplugin ^TestPreemption
s/^\tif o\.pin == nil {$/\tif true || o.pin == nil {/
